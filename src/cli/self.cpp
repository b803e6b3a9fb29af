#include "cli/self.h"

#include <filesystem>

namespace parity::cli {

std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

bool is_parity_subcommand(const std::string& name) {
  static const char* kNames[] = {"run", "dump", "bench", "explain", "launch", "ckpt", "golden", "plot", "matrix"};
  for (const char* n : kNames)
    if (name == n) return true;
  return false;
}

void add_launch_options(CLI::App& sub, comm::LaunchOptions& opts, std::string& backend, double& timeout_s) {
  sub.add_option("-n,--nproc", opts.nproc, "Number of rank processes")->required()->check(CLI::PositiveNumber);
  sub.add_option("--backend", backend, "gloo, mpi or nccl")
      ->check(CLI::IsMember({"gloo", "mpi", "nccl"}))
      ->capture_default_str();
  sub.add_option("--timeout", timeout_s, "Per-collective timeout in seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub.add_option("--log-dir", opts.log_dir, "Also write each rank's output to DIR/rank<r>.log");
}

void finish_launch_options(comm::LaunchOptions& opts, const std::string& backend, double timeout_s) {
  opts.backend = comm::parse_backend(backend);
  opts.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
}

std::vector<std::string> self_command(const std::vector<std::string>& args) {
  std::vector<std::string> cmd{self_exe()};
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

}  // namespace parity::cli
