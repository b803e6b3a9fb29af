#include "cli/resolved.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "harness/scenario/scenario.h"

namespace parity::cli {

namespace fs = std::filesystem;

void sweep_stale_temp(const std::string& prefix) {
  std::error_code ec;
  const fs::path dir = fs::temp_directory_path(ec);
  if (ec) return;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const long pid = std::atol(name.c_str() + prefix.size());
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) fs::remove(e.path(), ec);
  }
}

ResolvedScenario::ResolvedScenario(const Scenario& s, const std::string& keep_dir) : keep_(!keep_dir.empty()) {
  static int seq = 0;
  if (keep_) {
    fs::create_directories(keep_dir);
    path_ = (fs::path(keep_dir) / "scenario.json").string();
  } else {
    sweep_stale_temp("parity-run-");
    std::error_code ec;
    path_ = (fs::temp_directory_path(ec) / ("parity-run-" + std::to_string(::getpid()) + "-" + std::to_string(seq++) +
                                            ".json"))
                .string();
  }
  std::ofstream f(path_);
  f << scenario_to_json(s).dump(2) << "\n";
  if (!f.flush()) throw IoError("cannot write the resolved scenario " + path_);
}

ResolvedScenario::~ResolvedScenario() {
  if (keep_) return;
  std::error_code ec;
  fs::remove(path_, ec);
}

}  // namespace parity::cli
