// comm_worker: the rank process the comm tests launch (under `parity launch`, the
// test launcher comm_launch, or mpirun). One mode per run; the exit code is the verdict:
// 0 pass, 1 wrong results or bad usage, 3 a CommError (the expected outcome of fault modes
// for the surviving ranks).
//
//   comm_worker smoke                 allreduce of the ranks, printed by every rank
//   comm_worker collectives [large]   every collective, exact inputs, #wrong over all ranks
//   comm_worker digest FILE           rank 0 writes a digest of backend-independent results
//   comm_worker props CASES           RapidCheck properties of alltoallv / allgatherv
//   comm_worker kill K                rank K is SIGKILLed mid-allreduce
//   comm_worker absent K              rank K never joins (sleeps), the rest wait at rendezvous
//   comm_worker exit K                rank K exits 0 before joining
//   comm_worker stall K               rank K joins but never reaches the allreduce
//   comm_worker sleep                 join, print the pid, sleep (for signal tests)
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <span>
#include <string>
#include <thread>

#include "comm/world.h"
#include "comm_checks.h"
#include "core/error.h"

using namespace parity;
using namespace parity::comm;

namespace {

int env_rank() {
  RankEnv e = read_rank_env();
  return e.rank;
}

void sleep_s(int s) { std::this_thread::sleep_for(std::chrono::seconds(s)); }

int smoke() {
  auto w = make_world_communicator();
  std::vector<int64_t> x = {w->rank(), 1};
  w->allreduce(std::span<int64_t>(x), ReduceOp::sum);
  int64_t want = int64_t{w->size()} * (w->size() - 1) / 2;
  std::printf("rank %d/%d [%s]: sum of ranks %lld (expected %lld), count %lld\n", w->rank(), w->size(),
              std::string(backend_name(w->backend())).c_str(), static_cast<long long>(x[0]),
              static_cast<long long>(want), static_cast<long long>(x[1]));
  return x[0] == want && x[1] == w->size() ? 0 : 1;
}

int collectives(bool large) {
  auto w = make_world_communicator();
  testing::Tally t;
  testing::check_collectives(*w, t, large);
  testing::check_groups(*w, t);
  return testing::report(*w, t) == 0 ? 0 : 1;
}

int digest(const std::string& file) {
  auto w = make_world_communicator();
  uint64_t d = testing::digest_collectives(*w);
  if (w->rank() == 0) std::ofstream(file) << std::hex << d << "\n";
  return 0;
}

int props(int cases) {
  auto w = make_world_communicator();
  return testing::run_properties(*w, cases) ? 0 : 1;
}

int fault(const std::string& mode, int k) {
  int me = env_rank();
  if (me == k && mode == "absent") sleep_s(120);
  if (me == k && mode == "exit") return 0;
  auto w = make_world_communicator();
  w->barrier();
  if (me == k && mode == "stall") sleep_s(120);
  if (me == k && mode == "kill")
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      raise(SIGKILL);
    }).detach();
  std::vector<float> buf(1 << 18, 1.0f);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < end) w->allreduce(std::span<float>(buf), ReduceOp::max);
  return 0;
}

int sleeper() {
  auto w = make_world_communicator();
  w->barrier();
  std::printf("pid %d ready\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  sleep_s(120);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  std::string arg = argc > 2 ? argv[2] : "";
  try {
    if (mode == "smoke") return smoke();
    if (mode == "collectives") return collectives(arg == "large");
    if (mode == "digest") return digest(arg);
    if (mode == "props") return props(arg.empty() ? 30 : std::stoi(arg));
    if (mode == "kill" || mode == "absent" || mode == "exit" || mode == "stall")
      return fault(mode, std::stoi(arg));
    if (mode == "sleep") return sleeper();
    std::cerr << "comm_worker: unknown mode '" << mode << "'\n";
    return 1;
  } catch (const CommError& e) {
    std::cerr << "CommError: " << e.what() << std::endl;
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
