#include "harness/runner/comm_clock.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <span>
#include <vector>

namespace parity {

namespace {

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

class TimedCommunicator final : public comm::Communicator {
 public:
  TimedCommunicator(comm::Communicator& inner, std::shared_ptr<CommClock> clock, comm::Communicator* world)
      : Communicator(inner.backend(), inner.members(), inner.rank(), inner.timeout(), world),
        inner_(inner),
        clock_(std::move(clock)),
        cpu_clock_(inner.backend() == comm::Backend::sim ? CLOCK_THREAD_CPUTIME_ID : CLOCK_PROCESS_CPUTIME_ID) {}

 protected:
  void do_allreduce(void* buf, int64_t n, DType t, comm::ReduceOp op) override {
    timed([&] { with_dtype(t, [&](auto z) { inner_.allreduce(span<decltype(z)>(buf, n), op); }); });
  }
  void do_broadcast(void* buf, int64_t n, DType t, int root) override {
    timed([&] { with_dtype(t, [&](auto z) { inner_.broadcast(span<decltype(z)>(buf, n), root); }); });
  }
  void do_allgather(const void* in, void* out, int64_t n, DType t) override {
    timed([&] {
      with_dtype(t, [&](auto z) { inner_.allgather(cspan<decltype(z)>(in, n), span<decltype(z)>(out, n * size())); });
    });
  }
  void do_allgatherv(const void* in, void* out, const std::vector<int64_t>& counts, DType t) override {
    const int64_t nin = counts[static_cast<size_t>(rank())];
    timed([&] {
      with_dtype(t, [&](auto z) {
        using T = decltype(z);
        inner_.allgatherv(cspan<T>(in, nin), span<T>(out, sum(counts)), std::span<const int64_t>(counts));
      });
    });
  }
  void do_reduce_scatterv(const void* in, void* out, const std::vector<int64_t>& counts, DType t,
                          comm::ReduceOp op) override {
    const int64_t nout = counts[static_cast<size_t>(rank())];
    timed([&] {
      with_dtype(t, [&](auto z) {
        using T = decltype(z);
        inner_.reduce_scatterv(cspan<T>(in, sum(counts)), span<T>(out, nout), std::span<const int64_t>(counts), op);
      });
    });
  }
  void do_alltoall(const void* in, void* out, int64_t n, DType t) override {
    const int64_t all = n * size();
    timed([&] {
      with_dtype(t, [&](auto z) { inner_.alltoall(cspan<decltype(z)>(in, all), span<decltype(z)>(out, all)); });
    });
  }
  void do_alltoallv(const void* in, const std::vector<int64_t>& send_counts, void* out,
                    const std::vector<int64_t>& recv_counts, DType t) override {
    timed([&] {
      with_dtype(t, [&](auto z) {
        using T = decltype(z);
        inner_.alltoallv(cspan<T>(in, sum(send_counts)), std::span<const int64_t>(send_counts),
                         span<T>(out, sum(recv_counts)), std::span<const int64_t>(recv_counts));
      });
    });
  }
  void do_barrier() override {
    timed([&] { inner_.barrier(); });
  }
  std::unique_ptr<Communicator> do_make_group(const std::vector<int>& world_ranks) override {
    return std::make_unique<TimedCommunicator>(inner_.group(world_ranks), clock_, this);
  }
  std::string diagnose(const std::string&) override { return "(the wrapped communicator's error above)"; }

 private:
  template <class T> static std::span<T> span(void* p, int64_t n) {
    return {static_cast<T*>(p), static_cast<size_t>(n)};
  }
  template <class T> static std::span<const T> cspan(const void* p, int64_t n) {
    return {static_cast<const T*>(p), static_cast<size_t>(n)};
  }
  template <class F> void timed(F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    f();
    clock_->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    clock_->cpu_seconds += cpu_seconds() - c0;
    clock_->calls += 1;
  }
  double cpu_seconds() const {
    timespec ts{};
    clock_gettime(cpu_clock_, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }

  comm::Communicator& inner_;
  std::shared_ptr<CommClock> clock_;
  // The CPU a collective costs: the process's where a rank is a process (its transport's threads
  // count too); under sim, where the ranks are threads of one process, the calling thread's. The
  // process's clock there sums every rank's thread in the kernel, O(W) per call: at W = 1024, 20%
  // of a run's samples, and a 4096-rank world's first collective timed out waiting for set-up.
  clockid_t cpu_clock_;
};

}  // namespace

std::unique_ptr<comm::Communicator> timed_communicator(comm::Communicator& inner, std::shared_ptr<CommClock> clock) {
  return std::make_unique<TimedCommunicator>(inner, std::move(clock), nullptr);
}

// Rank 0's timings and, per field, the slowest rank's (comm_clock.h).
void gather_timings(comm::Communicator& world, const Timings& mine, VerdictReport& rep) {
  // rank 0's own (broadcast) and the largest over the ranks (an exact max): two small
  // collectives, not a copy of every rank's timings on every rank (W x W in a simulated world).
  std::vector<double> v{mine.startup,  mine.rendezvous,   mine.setup,       mine.baseline, mine.parallel,
                        mine.layout_comm, mine.layout_comm_calls, mine.compare, mine.compare_comm};
  auto to = [](const double* x) { return Timings{x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8]}; };
  std::vector<double> mx = v, r0 = v;
  world.allreduce(std::span<double>(mx), comm::ReduceOp::max);
  world.broadcast(std::span<double>(r0), 0);
  rep.rank0 = to(r0.data());
  rep.slowest = to(mx.data());
}

}  // namespace parity
