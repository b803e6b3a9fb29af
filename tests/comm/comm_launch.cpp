// comm_launch: a thin stand-in for `parity launch` used by the comm tests (the CLI wires
// the same proc::launch_main with CLI11).
//   comm_launch [-n N] [--backend B] [--timeout-ms T] [--grace-ms G] [--log-dir D]
//               [--store-root S] -- COMMAND ARGS...
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "proc/launch.h"
#include "core/error.h"

int main(int argc, char** argv) {
  using namespace parity::comm;
  using namespace parity::proc;
  LaunchOptions o;
  std::vector<std::string> cmd;
  try {
    int i = 1;
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw parity::ConfigError(argv[i], "needs a value");
      return argv[++i];
    };
    for (; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--") {
        cmd.assign(argv + i + 1, argv + argc);
        break;
      }
      if (a == "-n") o.nproc = std::stoi(next());
      else if (a == "--backend") o.backend = parse_backend(next());
      else if (a == "--timeout-ms") o.timeout = std::chrono::milliseconds(std::stoll(next()));
      else if (a == "--grace-ms") o.grace = std::chrono::milliseconds(std::stoll(next()));
      else if (a == "--log-dir") o.log_dir = next();
      else if (a == "--store-root") o.store_root = next();
      else throw parity::ConfigError(a, "unknown option");
    }
    return launch_main(o, cmd);
  } catch (const parity::ConfigError& e) {
    std::cerr << "comm_launch: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "comm_launch: " << e.what() << "\n";
    return 1;
  }
}
