// `parity --version` and `parity version`: what this binary is, for a bug report or a CI log:
// the version (CMakeLists.txt's project version), the commit it was built from (read at every
// build by cmake/build_info.cmake: git with "-dirty", the build's PARITY_COMMIT, or
// "unknown"), the communication backends built in and whether the CUDA kernels are, with the
// CUDA and NCCL versions they were built against.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "parity_build_info.h"  // generated in the build directory

namespace parity::cli {

std::string build_commit() { return PARITY_BUILD_COMMIT; }

std::string version_text() {
  std::string t = "parity " PARITY_VERSION "\ncommit: " PARITY_BUILD_COMMIT "\n";
  if (PARITY_CUDA_BUILT) {
    t += std::string("backends: gloo, mpi, nccl ") + PARITY_NCCL_VERSION + "\n";
    t += std::string("cuda: kernels built (CUDA ") + PARITY_CUDA_VERSION + ")\n";
  } else {
    t += "backends: gloo, mpi (nccl not built)\n";
    t += "cuda: not built (no GPU visible when configured, no CUDA toolkit and NCCL found, or PARITY_CUDA=OFF; "
         "-DPARITY_CUDA=ON builds it: --device cuda is exit 77)\n";
  }
  return t;
}

Command add_version_command(CLI::App& app) {
  // The flag: CLI11 prints the text and exits 0 before any subcommand is required.
  app.set_version_flag(
      "--version", [] { return version_text().substr(0, version_text().size() - 1); },
      "Print the version, the commit built, the backends and CUDA built in, and exit");
  CLI::App* sub = app.add_subcommand("version", "Print what `parity --version` prints");
  return {sub, [] {
            std::fputs(version_text().c_str(), stdout);
            return 0;
          }};
}

}  // namespace parity::cli
