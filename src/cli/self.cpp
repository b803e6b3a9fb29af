#include "cli/self.h"

#include "cli/numbers.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string_view>

#include "core/error.h"
#include "core/precision.h"
#include "harness/scenario/scenario.h"

extern char** environ;

namespace parity::cli {

std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

bool is_parity_subcommand(const std::string& name) {
  static const char* kNames[] = {"run",  "dump", "bench",  "explain", "launch", "ckpt",
                                 "golden", "plot", "matrix", "zoo", "cover", "rank"};
  for (const char* n : kNames)
    if (name == n) return true;
  return false;
}

CLI::Validator backend_choice() { return CLI::IsMember({"gloo", "mpi", "nccl", "sim"}); }
CLI::Validator process_backend_choice() { return CLI::IsMember({"gloo", "mpi", "nccl"}); }
CLI::Validator device_choice() { return CLI::IsMember({"cpu", "cuda", "gpu"}); }

CLI::Validator precision_choice() {
  return CLI::Validator(
      [](std::string& v) {
        try {
          (void)parse_precision(v, "--precision");
          return std::string();
        } catch (const ConfigError& e) {
          return e.rule();
        }
      },
      "PRECISION");
}

CLI::Validator steps_choice() { return integer_in(1, kMaxSteps); }

void add_launch_options(CLI::App& sub, proc::LaunchOptions& opts, std::string& backend, double& timeout_s) {
  sub.add_option("-n,--nproc", opts.nproc, "Number of rank processes")->required()->check(positive_integer());
  sub.add_option("--backend", backend, "gloo, mpi or nccl")
      ->check(process_backend_choice())
      ->capture_default_str();
  sub.add_option("--timeout", timeout_s, "Per-collective timeout in seconds")
      ->check(positive_seconds())
      ->capture_default_str();
  sub.add_option("--log-dir", opts.log_dir, "Also write each rank's output to DIR/rank<r>.log");
}

void finish_launch_options(proc::LaunchOptions& opts, const std::string& backend, double timeout_s) {
  opts.backend = comm::parse_backend(backend);
  opts.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
}

void add_node_options(CLI::App& sub, int& nnodes, int& node_rank, std::string& master) {
  sub.add_option("--nnodes", nnodes,
                 "Hosts of the run, one launcher on each (default 1: this host alone). With N > 1 the ranks meet\n"
                 "through a TCP store that rank 0 serves at --master; this launcher starts ranks\n"
                 "node-rank * nproc .. + nproc - 1 of N * nproc (docs/multihost.md)")
      ->check(positive_integer());
  sub.add_option("--node-rank", node_rank, "This host's index in [0, --nnodes); node 0 runs rank 0")
      ->check(non_negative_integer());
  sub.add_option("--master", master,
                 "ADDR:PORT of rank 0's TCP store (node 0's address, the same on every host; unused with --nnodes 1)");
}

std::vector<std::string> self_command(const std::vector<std::string>& args) {
  std::vector<std::string> cmd{self_exe()};
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

// glibc's heap for a job (a `parity run` and the ranks it forks, a golden check): grown 4 MiB
// at a time on transparent huge pages where the host allows them (THP "madvise" or "always";
// with "never" it changes nothing). On the 2-core VM this project is built on, page faults are
// a fifth of a matrix's CPU time (about 14 us each); these settings cut them 30% and the
// shipped matrix's wall time about 5% (32.2 and 31.6 s against 30.5 and 29.5 s, interleaved
// runs, issue 43). Allocation policy only: no value computed changes. A GLIBC_TUNABLES the
// user set is passed on as it is. Every parity process also advises its heap onto huge pages itself
// (core/resources.h keep_freed_memory: a run typed by hand gets most of this); glibc's own
// tunable still does it better, before a growth is first written (W = 8 dim64: 1.24 -> 1.14 s).
std::vector<char*> job_environment(char** env) {
  static char tunables[] = "GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.top_pad=4194304";
  std::vector<char*> out;
  bool set = false;
  for (char** e = env; *e != nullptr; ++e) {
    set = set || std::string_view(*e).starts_with("GLIBC_TUNABLES=");
    out.push_back(*e);
  }
  if (!set) out.push_back(tunables);
  out.push_back(nullptr);
  return out;
}

pid_t spawn_self(const std::vector<std::string>& args, const std::string& log, const std::string& what) {
  const std::vector<std::string> cmd = self_command(args);
  std::vector<char*> argv;
  for (const std::string& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  // The log is parity's file in parity's directory: an earlier one is removed and the new one
  // created exclusively, never through a link or into a FIFO or device planted at its name.
  struct stat st{};
  if (::lstat(log.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      posix_spawn_file_actions_destroy(&fa);
      throw ConfigError(log, "is not a regular file where parity writes a log; parity never writes through it");
    }
    ::unlink(log.c_str());
  }
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), job_environment(environ).data());
  posix_spawn_file_actions_destroy(&fa);
  if (err != 0) throw IoError("cannot start " + cmd[0] + " for " + what);
  return pid;
}

}  // namespace parity::cli
