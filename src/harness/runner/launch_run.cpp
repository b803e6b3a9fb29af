#include "harness/runner/launch_run.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "proc/launch.h"
#include "core/clock.h"
#include "core/device.h"
#include "core/error.h"
#include "core/inject.h"
#include "core/knobs.h"
#include "core/text.h"
#include "harness/runner/rank_main.h"
#include "harness/runner/floors_first.h"
#include "harness/runner/shared_baseline.h"
#include "harness/runner/sim_launch.h"
#include "harness/runner/verdict_run.h"

namespace parity {

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

RequestFile::RequestFile(const RunRequest& r, const std::string& keep_dir) : keep_(!keep_dir.empty()) {
  static int seq = 0;
  if (keep_) {
    fs::create_directories(keep_dir);
    path_ = (fs::path(keep_dir) / "request.json").string();
  } else {
    sweep_stale_temp("parity-run-");
    std::error_code ec;
    path_ = (fs::temp_directory_path(ec) / ("parity-run-" + std::to_string(::getpid()) + "-" + std::to_string(seq++) +
                                            ".json"))
                .string();
  }
  std::ofstream f(path_);
  f << request_json(r).dump(2) << "\n";
  if (!f.flush()) throw IoError("cannot write the run request " + path_);
}

RequestFile::~RequestFile() {
  if (keep_) return;
  std::error_code ec;
  fs::remove(path_, ec);
}

namespace {

// A fresh path for this launcher's shared baseline; files of launchers that no longer run
// (killed -9 before they could remove theirs) are removed first.
std::string shared_baseline_path() {
  static int seq = 0;
  std::error_code ec;
  const fs::path dir = fs::temp_directory_path(ec);
  sweep_stale_temp("parity-baseline-");
  return (dir / ("parity-baseline-" + std::to_string(::getpid()) + "-" + std::to_string(seq++) + ".bin")).string();
}

// Whether the ranks start by fork alone (proc/launch.h, LaunchOptions::in_process): every
// rank on this host, gloo, the CPU (mpirun starts mpi's ranks; a CUDA context does not
// survive a fork; across hosts each launcher's store client may hold a thread), and
// PARITY_RANK_START not "exec" (the old way: fork + exec of `parity rank FILE`).
bool fork_started(const proc::LaunchOptions& lo, Device device) {
  const char* v = knob("PARITY_RANK_START");
  const std::string how = v != nullptr ? v : "";
  if (!how.empty() && how != "fork" && how != "exec")
    throw ConfigError("PARITY_RANK_START", "must be fork or exec, got '" + printable(how, 64) + "'");
  return how != "exec" && lo.nnodes == 1 && lo.backend == comm::Backend::gloo && device == Device::cpu;
}

// The request this launcher's fork-started ranks read (inherited_request), while it launches.
const RunRequest* g_inherited = nullptr;
const std::string* g_inherited_path = nullptr;
struct Inherited {
  Inherited(const RunRequest* r, const std::string& path) {
    if (r != nullptr) g_inherited = r, g_inherited_path = &path;
  }
  ~Inherited() { g_inherited = nullptr, g_inherited_path = nullptr; }
  Inherited(const Inherited&) = delete;
  Inherited& operator=(const Inherited&) = delete;
};

}  // namespace

const RunRequest* inherited_request(const std::string& path) {
  return g_inherited != nullptr && *g_inherited_path == path ? g_inherited : nullptr;
}

int launch(const RunRequest& r, const RankStart& how, const std::function<void()>& checks) {
  const bool verdict = r.job == RankJob::verdict;
  RunRequest req = r;  // what the ranks read: r and what this launcher adds (run_request.h)
  if (verdict) {
    if (fault_from_env()) req.fault = knob("PARITY_FAULT");  // a malformed one is refused here
    (void)measure_again_enabled();  // and a PARITY_MEASURE_AGAIN that is not 0 or 1
    (void)floors_first_enabled();   // or a PARITY_FLOORS_FIRST
  }
  if (r.scenario) req.inject = injected_names();  // an unknown PARITY_INJECT / --inject name likewise
  const int64_t world = r.world();
  proc::LaunchOptions lo;
  if (world % r.nnodes != 0)
    throw ConfigError("--nnodes", "the layout's " + std::to_string(world) + " ranks do not split evenly over " +
                                      std::to_string(r.nnodes) + " hosts");
  lo.nproc = static_cast<int>(world / r.nnodes);
  lo.nnodes = r.nnodes, lo.node_rank = r.node_rank, lo.master = r.master;
  lo.backend = r.backend();
  lo.timeout = std::chrono::milliseconds(static_cast<int64_t>(r.timeout_s * 1000));
  lo.deadline = std::chrono::milliseconds(static_cast<int64_t>(r.deadline_s * 1000));
  lo.prefix_output = false;  // rank 0 alone prints; errors name their rank themselves
  lo.log_dir = r.log_dir;
  req.launch_t0_ns = unix_ns();
  const Device device = r.scenario ? r.scenario->layout.device : Device::cpu;
  if (r.scenario)
    require_device(device, "layout.device cuda" +
                               std::string(r.scenario->layout.backend == comm::Backend::nccl ? " (backend nccl)" : ""));
  const bool sim = lo.backend == comm::Backend::sim;
  if (sim) check_sim_request(r);
  const bool by_fork = how.in_process && fork_started(lo, device);  // never sim: fork_started wants gloo
  // A simulated world's ranks and fork-started ones read this very request (inherited_request):
  // validated once here, its proof shared by every rank (an exec'd rank validates what it reads,
  // run_request.cpp).
  if ((sim || by_fork) && r.scenario && !req.valid) req.valid = validate_scenario(*r.scenario);
  if (checks) checks();
  // One baseline per host (harness/runner/shared_baseline.h): trained here while the ranks run,
  // read by every rank from a shared file; none trains its own copy.
  // PARITY_SHARED_BASELINE=0: every rank trains its own (the old way; for comparisons).
  std::optional<BaselineProducer> baseline;
  if (!sim) share_one_heap();  // the baseline's threads on the heap's huge pages (core/resources.h)
  // A simulated world always shares it: its ranks are threads of this process.
  if (verdict && (sim || baseline_place() == BaselinePlace::once_per_host)) {
    use_device(device);
    Scenario first = *r.scenario;
    first.twin_sets = first_twin_sets(first);  // the ranks' first measurement's (floors_first.h)
    baseline.emplace(first, shared_baseline_path(), lo.nproc, r.first_block);  // this host's ranks
    req.baseline_file = baseline->path();
  }
  const RequestFile file(req, r.log_dir);
  if (baseline) lo.after_start = [&baseline] { baseline->start(); };
  const Inherited inherited(by_fork ? &req : nullptr, file.path());
  if (by_fork) lo.in_process = how.in_process;
  std::vector<std::string> command = how.self;
  command.insert(command.end(), {"rank", file.path()});
  std::fflush(stdout);
  int rc = 0;
  if (sim) {
    SimLaunch sl;
    sl.timeout = lo.timeout, sl.deadline = lo.deadline;
    if (r.rank_timeout_s > 0) sl.timeout = std::chrono::milliseconds(static_cast<int64_t>(r.rank_timeout_s * 1000));
    sl.baseline_file = baseline ? baseline->path() : "";
    if (baseline) sl.after_start = [&baseline] { baseline->start(); };
    sl.t0_s = static_cast<double>(req.launch_t0_ns) * 1e-9;
    rc = launch_sim(req, sl);  // the request the ranks would read: its fault, bugs and baseline
  } else {
    rc = proc::launch_main(lo, command);
  }
  if (baseline) baseline->stop();
  if (!verdict) return rc;
  const std::string ranks = lo.nnodes > 1 ? std::to_string(lo.nproc) + " of " + std::to_string(world) +
                                                " ranks on this host"
                                          : std::to_string(lo.nproc) + " ranks";
  const std::string started = lo.backend == comm::Backend::mpi ? "started by mpirun"
                              : sim                            ? "as threads of one process (sim)"
                              : by_fork                        ? "started by fork"
                                                               : "started by exec";
  std::printf("time to verdict: %.3f s (launcher wall clock, %s %s, exit %d)\n",
              static_cast<double>(unix_ns() - req.launch_t0_ns) * 1e-9, ranks.c_str(), started.c_str(), rc);
  return rc;
}

}  // namespace parity
