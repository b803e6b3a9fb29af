#include "harness/runner/rank_main.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/bench.h"
#include "comm/rank_env.h"
#include "comm/world.h"
#include "core/clock.h"
#include "core/device.h"
#include "core/error.h"
#include "core/files.h"
#include "core/inject.h"
#include "core/exit_codes.h"
#include "core/knobs.h"
#include "core/text.h"
#include "harness/golden/golden.h"
#include "harness/runner/comm_clock.h"
#include "harness/runner/verdict_run.h"

namespace parity {

std::optional<Fault> fault_from_env() {
  const char* v = knob("PARITY_FAULT");
  if (v == nullptr || *v == '\0') return std::nullopt;
  return parse_fault(v);
}

namespace {

// Who this rank is, with the request's backend. A world of the wrong size is refused before
// the rendezvous would wait for ranks that never come.
comm::RankEnv rank_env(const RunRequest& r, const std::string& source) {
  comm::RankEnv env = comm::read_rank_env(r.backend());
  if (r.rank_timeout_s > 0) env.timeout = std::chrono::milliseconds(static_cast<int64_t>(r.rank_timeout_s * 1000));
  if (env.world_size != r.world()) {
    const std::string var = env.source == "OMPI_COMM_WORLD_RANK" ? "OMPI_COMM_WORLD_SIZE"
                            : env.source == "SLURM_PROCID"       ? "SLURM_NTASKS"
                                                                 : "WORLD_SIZE";
    const std::string is = env.source == "none" ? "not set (a world of one)" : "is " + std::to_string(env.world_size);
    throw ConfigError(var, is + ", but the layout of " + source + " has " + std::to_string(r.world()) +
                               " ranks ($.layout.world)");
  }
  return env;
}

// How this rank joins its world: the environment's (a rank process) or a simulated world's
// (a thread of `parity run --backend sim`, comm/sim/sim_world.h).
struct RankSide {
  std::function<std::unique_ptr<comm::Communicator>()> join;
  int local_rank = 0;
  double startup_s = 0;
  std::string baseline_file;  // the host's shared baseline (the request's, or the simulated world's); "": our own
  bool process = true;        // false: a thread (no device to choose: sim runs on the CPU)
};

RankSide process_side(const RunRequest& r, const std::string& source) {
  if (r.backend() == comm::Backend::sim)
    throw ConfigError("--backend", "sim: its ranks are threads that `parity run --backend sim` starts itself; a rank "
                                   "process (parity rank, --as-rank under mpirun, srun or torchrun) needs gloo, mpi "
                                   "or nccl");
  const comm::RankEnv env = rank_env(r, source);
  RankSide side;
  side.join = [env] { return comm::make_world_communicator(env); };
  side.local_rank = env.local_rank;
  side.startup_s = r.launch_t0_ns > 0 ? static_cast<double>(unix_ns() - r.launch_t0_ns) * 1e-9 : 0.0;
  side.baseline_file = r.baseline_file;
  return side;
}

int verdict_job(const RunRequest& r, const RankSide& side) {
  const Scenario& s = *r.scenario;
  if (side.process) use_device(s.layout.device, side.local_rank);
  const auto r0 = std::chrono::steady_clock::now();
  auto world = side.join();
  VerdictOptions vo;
  vo.rendezvous_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count();
  vo.startup_s = side.startup_s;
  if (!r.fault.empty()) vo.fault = parse_fault(r.fault);
  vo.save_at = r.save_at, vo.ckpt_dir = r.ckpt, vo.resume_dir = r.resume, vo.trace = r.trace;
  vo.carry_dir = r.carry;
  vo.baseline_file = side.baseline_file;
  vo.valid = r.valid ? &*r.valid : nullptr;
  if (world->size() != s.layout.world)
    throw ConfigError("$.layout.world", "the scenario asks for " + std::to_string(s.layout.world) +
                                            " ranks but this run has " + std::to_string(world->size()));
  VerdictReport rep = with_real(s.model.dtype, [&](auto x) { return run_verdict<decltype(x)>(s, *world, vo); });
  if (world->rank() == 0) {
    std::fputs(format_verdict(rep).c_str(), stdout);
    std::fflush(stdout);
    if (!r.report.empty())
      write_json_file(r.report, verdict_json(rep), 2, "report file", Replace{kVerdictReportSignature});
  }
  return rep.exit_code();
}

int curves_job(const RunRequest& r, const RankSide& side) {
  const Scenario& s = *r.scenario;
  if (side.process) use_device(s.layout.device, side.local_rank);
  auto world = side.join();
  // Each rank's cost, for the golden's perf (golden.h Perf): the CPU seconds of its work outside
  // collectives (start-up, rendezvous and a wait for a peer left out: they spin, as long as the
  // machine's load makes them) and its peak memory.
  auto clock = std::make_shared<CommClock>();
  const auto timed = timed_communicator(*world, clock);
  const double cpu0 = process_usage().cpu_s;
  const Curves c = layout_curves(s, *timed, {r.save_at, r.ckpt, r.resume, r.valid ? &*r.valid : nullptr});
  const ProcessUsage u = process_usage();
  const std::vector<double> mine{std::max(0.0, u.cpu_s - cpu0 - clock->cpu_seconds), u.peak_rss_mib};
  std::vector<double> all(2 * static_cast<size_t>(world->size()));
  world->allgather(std::span<const double>(mine), std::span<double>(all));
  if (world->rank() == 0) {
    nlohmann::json ranks = nlohmann::json::array();
    for (size_t i = 0; i + 1 < all.size(); i += 2) ranks.push_back({{"cpu_s", all[i]}, {"peak_rss_mib", all[i + 1]}});
    write_json_file(r.out, {{"curves", curves_to_json(c)}, {"ranks", ranks}}, -1, "curves");
  }
  return 0;
}

int comm_bench_job(const RunRequest& r, const RankSide& side) {
  auto world = side.join();
  const int64_t wrong = comm::run_comm_bench(*world, r.bench, std::cout);
  return wrong == 0 ? 0 : 1;
}

int run_job(const RunRequest& r, const RankSide& side) {
  switch (r.job) {
    case RankJob::verdict: return verdict_job(r, side);
    case RankJob::curves: return curves_job(r, side);
    case RankJob::comm_bench: return comm_bench_job(r, side);
  }
  return exit_code::bad_input;
}

// The rank's error, printed once and mapped to its exit code (`error`: the message, for a simulated world).
int rank_failed(const std::exception& e, const std::string& rank, std::string* error) {
  const int code = exit_code::of(e);
  if (error != nullptr) *error = printable_lines(e.what());
  // every rank runs the same baseline and diverges alike: rank 0 says it once
  if (code == exit_code::diverged && rank != "?" && rank != "0") return code;
  std::fprintf(stderr, "parity: rank %s: %s: %s\n", rank.c_str(),
               code == exit_code::diverged ? "baseline diverged" : "error", printable_lines(e.what()).c_str());
  return code;
}

}  // namespace

int run_rank(const std::function<RunRequest()>& request, const std::string& source) {
  const std::string rank = comm::rank_label();
  try {
    const RunRequest r = request();
    set_injected(r.inject);  // the request's bugs, not the environment's: the file replays the run
    return run_job(r, process_side(r, source));
  } catch (const std::exception& e) {
    return rank_failed(e, rank, nullptr);
  }
}

int run_sim_rank(const RunRequest& r, const SimRankSide& sim, std::string& error) {
  const comm::ThreadRank here(sim.rank);
  try {
    RankSide side;
    side.join = sim.join;
    side.local_rank = sim.rank;
    side.startup_s = sim.startup_s;
    side.baseline_file = sim.baseline_file.empty() ? r.baseline_file : sim.baseline_file;
    side.process = false;
    return run_job(r, side);
  } catch (const std::exception& e) {
    return rank_failed(e, std::to_string(sim.rank), &error);
  }
}

}  // namespace parity
