// comm_worker: the rank process the comm tests launch (under `parity launch`, the
// test launcher comm_launch, or mpirun). One mode per run; the exit code is the verdict:
// 0 pass, 1 wrong results or bad usage, 3 a CommError (the expected outcome of fault modes
// for the surviving ranks).
//
//   comm_worker smoke                 allreduce of the ranks, printed by every rank
//   comm_worker collectives [large]   every collective, exact inputs, #wrong over all ranks
//   comm_worker digest FILE [sum]     rank 0 writes a digest of backend-independent results
//                                     (sum: and of sum allreduces, equal on gloo tcp and shm)
//   comm_worker props CASES           RapidCheck properties of alltoallv / allgatherv
//   comm_worker kill K                rank K is SIGKILLed mid-allreduce
//   comm_worker absent K              rank K never joins (sleeps), the rest wait at rendezvous
//   comm_worker exit K                rank K exits 0 before joining
//   comm_worker stall K               rank K joins but never reaches the allreduce
//   comm_worker groupexit K           every rank makes its pair group {2i, 2i+1} and allreduces
//                                     in it; rank K exits 0 after the world, before its group
//   comm_worker sleep                 join, print the pid, sleep (for signal tests)
//   comm_worker bench MAXBYTES [json]  nccl-tests style table (comm/bench.h)
//   comm_worker nccl                  device-buffer allreduce + alltoallv (needs a GPU)
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <numeric>
#include <span>
#include <string>
#include <thread>

#include "comm/bench.h"
#include "comm/world.h"
#include "comm_checks.h"
#include "core/error.h"
#if PARITY_HAVE_CUDA
#include <cuda_runtime.h>
#endif

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

int digest(const std::string& file, bool with_sum) {
  auto w = make_world_communicator();
  uint64_t d = testing::digest_collectives(*w, with_sum);
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
  if (mode == "groupexit") {
    if (me == k) return 0;
    std::vector<float> pair(8, 1.0f);
    w->group({me / 2 * 2, me / 2 * 2 + 1}).allreduce(std::span<float>(pair), ReduceOp::sum);
    return pair[0] == 2.0f ? 0 : 1;
  }
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

int bench(int64_t max_bytes, bool json) {
  auto w = make_world_communicator();
  CommBenchOptions o;
  o.max_bytes = max_bytes;
  o.json = json;
  return run_comm_bench(*w, o, std::cout) == 0 ? 0 : 1;
}

#if PARITY_HAVE_CUDA
// Device buffers through the nccl backend: allreduce (exact) and alltoallv with zeros.
int nccl_check() {
  auto w = make_world_communicator();
  int p = w->size(), me = w->rank();
  std::vector<float> h(1001), back(1001);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(me + 1 + static_cast<int>(i % 7));
  float* d = nullptr;
  if (cudaMalloc(&d, h.size() * sizeof(float)) != cudaSuccess) throw Error("cudaMalloc failed");
  cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice);
  w->allreduce(std::span<float>(d, h.size()), ReduceOp::sum);
  cudaMemcpy(back.data(), d, h.size() * sizeof(float), cudaMemcpyDeviceToHost);
  int64_t wrong = 0;
  for (size_t i = 0; i < h.size(); ++i)
    wrong += back[i] != static_cast<float>(p * (p + 1) / 2 + p * static_cast<int>(i % 7));
  std::vector<int64_t> send(static_cast<size_t>(p)), recv(static_cast<size_t>(p));
  for (int j = 0; j < p; ++j) {
    send[static_cast<size_t>(j)] = (me + j) % 3;
    recv[static_cast<size_t>(j)] = (j + me) % 3;
  }
  w->alltoallv(std::span<const float>(d, static_cast<size_t>(std::accumulate(send.begin(), send.end(), int64_t{0}))),
               std::span<const int64_t>(send),
               std::span<float>(d + 500, static_cast<size_t>(std::accumulate(recv.begin(), recv.end(), int64_t{0}))),
               std::span<const int64_t>(recv));
  cudaFree(d);
  std::printf("rank %d: nccl allreduce #wrong %lld\n", me, static_cast<long long>(wrong));
  return wrong == 0 ? 0 : 1;
}
#endif

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
    if (mode == "digest") return digest(arg, argc > 3 && std::string(argv[3]) == "sum");
    if (mode == "props") return props(arg.empty() ? 30 : std::stoi(arg));
    if (mode == "kill" || mode == "absent" || mode == "exit" || mode == "stall" || mode == "groupexit")
      return fault(mode, std::stoi(arg));
    if (mode == "sleep") return sleeper();
    if (mode == "bench")
      return bench(arg.empty() ? int64_t{1} << 26 : std::stoll(arg), argc > 3 && std::string(argv[3]) == "json");
#if PARITY_HAVE_CUDA
    if (mode == "nccl") return nccl_check();
#endif
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
