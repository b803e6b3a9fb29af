#include "harness/runner/sim_launch.h"

#include <pthread.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/sim/sim_world.h"
#include "core/clock.h"
#include "core/device.h"
#include "core/error.h"
#include "core/knobs.h"
#include "core/exit_codes.h"
#include "core/resources.h"
#include "harness/runner/rank_main.h"

namespace parity {

namespace {

using SimClock = std::chrono::steady_clock;

// A rank's stack: the rank code keeps its data on the heap; 4096 ranks x 2 MiB is 8 GiB of
// address space, touched only where used.
constexpr size_t kSimStackBytes = size_t{2} << 20;

struct SimEnds {
  std::mutex mu;
  std::condition_variable cv;
  int go = 0;  // the start latch: 1 run, -1 a rank's thread could not be created (every thread returns at once)
  int ended = 0;
  int first_failed = -1, first_code = 0;  // the launch's exit code: the first rank to end with one
  // The first rank that ended broken (an error, not the verdict's FAIL): the others get `grace`
  // to end, then the world is aborted. A rank that returns the verdict's FAIL (exit 1: rank 0
  // under sim) ended as it should; the others finish their last collectives, however slowly a
  // loaded machine runs 1024 threads, and are waited for as after a PASS.
  int first_broken = -1, broken_code = 0;
  SimClock::time_point first_at;
  std::vector<char> done;
};

struct SimThreadArg {
  std::function<void()> body;
};

void* sim_thread_main(void* p) {
  std::unique_ptr<SimThreadArg> a(static_cast<SimThreadArg*>(p));
  a->body();
  return nullptr;
}

}  // namespace

void check_sim_request(const RunRequest& r) {
  if (const char* f = knob("PARITY_SIM_FAULT"); f != nullptr && *f != '\0') (void)comm::parse_sim_fault(f);
  if (const char* o = knob("PARITY_SIM_ORDER"); o != nullptr && *o != '\0') (void)comm::parse_sim_order(o);
  if (r.nnodes > 1)
    throw ConfigError("--nnodes", "--backend sim runs every rank as a thread of this one process; across hosts use "
                                  "gloo, mpi or nccl (docs/multihost.md)");
  if (!r.log_dir.empty())
    throw ConfigError("--log-dir", "--backend sim: the ranks are threads of this process and print to its output "
                                   "(rank 0 alone prints the verdict); there is no rank<r>.log to write");
  if (r.job == RankJob::comm_bench)
    throw ConfigError("--backend", "sim: bench comm times a real transport; use gloo, mpi or nccl");
  if (r.scenario && r.scenario->layout.device != Device::cpu)
    throw ConfigError("$.layout.device", "--backend sim runs on the CPU (every rank a thread); use nccl for cuda");
  if (r.world() > comm::kMaxSimRanks)
    throw ConfigError("$.layout.world", "a simulated world (--backend sim) holds at most " +
                                            std::to_string(comm::kMaxSimRanks) + " ranks, got " +
                                            std::to_string(r.world()));
}

int launch_sim(const RunRequest& r, const SimLaunch& how) {
  check_sim_request(r);
  const int w = static_cast<int>(r.world());
  auto world = comm::make_sim_world(w, how.timeout);
  comm::SimFault fault;
  if (const char* f = knob("PARITY_SIM_FAULT"); f != nullptr && *f != '\0')
    comm::set_sim_fault(*world, fault = comm::parse_sim_fault(f));
  if (const char* o = knob("PARITY_SIM_ORDER"); o != nullptr && *o != '\0')
    comm::set_sim_order(*world, comm::parse_sim_order(o));
  const int late_rank = fault.late_ms > 0 ? fault.rank : -1;
  const std::chrono::milliseconds late(fault.late_ms);
  auto ends = std::make_shared<SimEnds>();
  ends->done.assign(static_cast<size_t>(w), 0);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kSimStackBytes);
  std::vector<pthread_t> threads;
  threads.reserve(static_cast<size_t>(w));
  for (int rank = 0; rank < w; ++rank) {
    auto arg = std::make_unique<SimThreadArg>();
    arg->body = [&r, &how, world, ends, rank, late_rank, late] {
      {  // no rank starts before every thread exists (or the world is given up)
        std::unique_lock<std::mutex> lk(ends->mu);
        ends->cv.wait(lk, [&] { return ends->go != 0; });
        if (ends->go < 0) return;
      }
      std::string error;
      int code = exit_code::infrastructure;
      try {  // out of memory may strike in the error path itself: the thread must still end as a rank
        SimRankSide side;
        side.rank = rank;
        side.join = [world, rank] { return comm::make_sim_rank(world, rank); };
        side.startup_s = how.t0_s > 0 ? static_cast<double>(unix_ns()) * 1e-9 - how.t0_s : 0.0;
        side.baseline_file = how.baseline_file;
        code = run_sim_rank(r, side, error);
      } catch (...) {
        code = exit_code::infrastructure;
      }
      if (rank == late_rank) std::this_thread::sleep_for(late);  // PARITY_SIM_FAULT=late@R:MS
      try {
        comm::sim_rank_ended(*world, rank, code, error);
      } catch (...) {
        comm::sim_rank_ended(*world, rank, code, std::string());
      }
      std::lock_guard<std::mutex> lk(ends->mu);
      ++ends->ended;
      ends->done[static_cast<size_t>(rank)] = 1;
      if (code != 0 && ends->first_failed < 0) ends->first_failed = rank, ends->first_code = code;
      if (code != 0 && code != exit_code::parity_broken && ends->first_broken < 0)
        ends->first_broken = rank, ends->broken_code = code, ends->first_at = SimClock::now();
      ends->cv.notify_all();
    };
    pthread_t t;
    const int e = pthread_create(&t, &attr, sim_thread_main, arg.get());
    if (e != 0) {
      pthread_attr_destroy(&attr);
      {
        std::lock_guard<std::mutex> lk(ends->mu);
        ends->go = -1;
      }
      ends->cv.notify_all();
      for (pthread_t u : threads) pthread_join(u, nullptr);
      throw IoError("--backend sim: cannot start rank " + std::to_string(rank) + " of " + std::to_string(w) +
                    " as a thread: " + describe_errno(e) +
                    (e == EAGAIN ? " (the thread limit: ulimit -u, /proc/sys/kernel/threads-max, or memory)" : ""));
    }
    arg.release();  // the thread owns it
    threads.push_back(t);
  }
  pthread_attr_destroy(&attr);
  {
    std::lock_guard<std::mutex> lk(ends->mu);
    ends->go = 1;
  }
  ends->cv.notify_all();
  if (how.after_start) how.after_start();
  const auto start = SimClock::now();
  bool deadline_passed = false, aborted = false;
  {
    std::unique_lock<std::mutex> lk(ends->mu);
    while (ends->ended < w) {
      auto until = SimClock::now() + std::chrono::milliseconds(100);
      ends->cv.wait_until(lk, until);
      const auto now = SimClock::now();
      if (how.deadline.count() > 0 && now - start >= how.deadline && !deadline_passed) {
        deadline_passed = true;
        ends->first_at = now;
        comm::sim_abort(*world, "the launch's deadline passed (" + std::to_string(how.deadline.count()) + " ms)");
      }
      const bool failing = ends->first_broken >= 0 || deadline_passed;
      if (failing && !aborted && now - ends->first_at >= how.grace) {
        aborted = true;
        comm::sim_abort(*world, "rank " + std::to_string(ends->first_broken) + " failed (exit " +
                                    std::to_string(ends->broken_code) + "); the simulated world stops");
      }
      if (aborted && now - ends->first_at >= 3 * how.grace && ends->ended < w) {
        // A rank that never reaches a collective (stuck in compute) cannot be killed: name it, end the process.
        int named = 0;
        for (int i = 0; i < w && named < 8; ++i)
          if (!ends->done[static_cast<size_t>(i)]) {
            std::fprintf(stderr, "parity: --backend sim: %s: did not return; the process ends (exit 3)\n",
                         comm::sim_rank_state(*world, i).c_str());
            ++named;
          }
        std::fflush(stdout);
        std::fflush(stderr);
        std::_Exit(exit_code::infrastructure);
      }
    }
  }
  for (pthread_t t : threads) pthread_join(t, nullptr);
  if (deadline_passed) return exit_code::infrastructure;
  if (ends->first_failed < 0) return 0;
  return ends->first_code;
}

}  // namespace parity
