// Runs the parity binary under test (the target's PARITY_BINARY definition) with `args`,
// stdout and stderr together, for the tests that drive the command line; and reads a file.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace parity::test {

struct Result {
  int code;         // the exit code (-1: killed by a signal)
  std::string out;  // stdout and stderr together
};

inline Result parity_cmd(const std::string& args) {
  const std::string cmd = std::string(PARITY_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace parity::test
