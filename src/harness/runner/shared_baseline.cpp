// The producer of the host's shared baseline file (shared_baseline.h): the launcher trains the baseline once and
// writes each step's record into the file (shared_baseline_format.h); its readers are shared_baseline_read.cpp.
#include "harness/runner/shared_baseline.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <mutex>
#include <memory>
#include <optional>
#include <map>
#include <functional>
#include <bit>
#include <climits>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <system_error>
#include <thread>
#include <exception>

#include "proc/launch.h"
#include "comm/sim/sim_world.h"
#include "core/buffer.h"
#include "core/device.h"
#include "core/error.h"
#include "core/exit_codes.h"
#include "core/knobs.h"
#include "core/resources.h"
#include "harness/golden/golden.h"
#include "harness/runner/twin.h"
#include "harness/verdict/family_sums.h"
#include "harness/verdict/verdict_detail.h"
#include "model/params.h"
#include "harness/runner/shared_baseline_format.h"

namespace parity {

BaselinePlace baseline_place() {
  const char* v = knob("PARITY_SHARED_BASELINE");
  return v != nullptr && std::string(v) == "0" ? BaselinePlace::in_every_rank : BaselinePlace::once_per_host;
}

namespace shared_file {

// Baseline step t+1 runs while the twin measures step t in a thread of its own (the twin's
// step needs only the baseline's record of t and its parameters before and after t, copied):
// the two take turns no more, so the ranks get step t after about one baseline step instead of
// a baseline step and a twin step. Each computes what it did in turn, in its own precision
// scope and jitter sequence (both per thread and set per step): the same bits.
// The parameters and expert bias before and after the step, shared: the parameters after step t are those before
// t + 1, one copy for both (a copy of the whole model a step less in the launcher).
template <class T> using Snapshot = std::shared_ptr<const std::vector<Tensor<T>>>;
template <class T> using BiasSnapshot = std::shared_ptr<const std::vector<Buffer<T>>>;
template <class X> std::shared_ptr<const X> snapshot(const X& x) { return std::make_shared<const X>(x); }
template <class T> struct TwinJob {
  StepRecord<T> record;
  Snapshot<T> before, after;
  BiasSnapshot<T> bias_before, bias_after;
  std::thread thread;
  std::exception_ptr error;
  bool running = false;
};

template <class T> void finish(TwinJob<T>& job) {
  if (!job.running) return;
  job.thread.join();
  job.running = false;
  if (job.error) std::rethrow_exception(job.error);
}

template <class T> void produce(const Scenario& s, unsigned char* base, int fd, const std::atomic<bool>& stop) {
  auto* h = reinterpret_cast<Header*>(base);
  const Geometry g(s, sizeof(T));
  TwinJob<T> job;
  try {
    BaselineRun<T> run(s);
    TwinRun<T> twin(s);  // beside the baseline, once per host
    FileAt at{fd, kHeader};  // through the file, not the mapping (shared_baseline_format.h FileAt)
    put_tensors(at, run.model().params.tensors);
    put_bias(at, run.model().expert_bias, g);
    at.flush();
    publish(h, 0);
    // writes the twin's finished step into its block and publishes it
    auto write = [&](TwinJob<T>& j) {
      StepRecord<T>& r = j.record;
      const int64_t t = r.step;
      // the block of step t - kRing is reused: wait until every rank is past it
      for (unsigned spins = 0; !stop.load(); ++spins) {
        int64_t slowest = INT64_MAX;
        for (int64_t c = 0; c < h->consumers; ++c)
          slowest = std::min(slowest, std::atomic_ref<int64_t>(h->next[c]).load(std::memory_order_acquire));
        if (t - slowest < kRing) break;
        ::usleep(spins < 100 ? 20 : 200);
      }
      at.seek(kHeader + g.init_bytes() + static_cast<size_t>(t % kRing) * g.block_bytes());
      const double sc[Geometry::kScalars] = {r.loss,      r.ce,         r.aux, r.grad_norm,
                                             r.clip_coef, r.loss_scale, r.skipped ? 1.0 : 0.0, r.logit_peak,
                                             r.logit_grad_rms};
      put(at, sc, Geometry::kScalars);
      put(at, r.micro_losses.data(), r.micro_losses.size());
      put_tensors(at, r.grads->tensors);
      if (g.exact) put_tensors(at, r.grads_exact->tensors);
      put_tensors(at, *j.after);
      put_bias(at, *j.bias_after, g);
      for (const auto& v : r.tokens_per_expert) put(at, v.data(), v.size());
      for (const auto& v : r.chosen) put(at, v.data(), v.size());
      for (const auto& v : r.select_scores) put(at, v.data(), v.size());
      put(at, r.noise.data(), kNoiseWidth);
      put_sums(at, *r.sums, g);
      at.flush();
      publish(h, t + 1);
    };
    for (int64_t t = 0; t < s.steps && !stop.load(); ++t) {
      // the parameters before step t: those after t - 1, already copied for its twin and its record
      Snapshot<T> before = t > 0 && job.after ? job.after : snapshot(run.model().params.tensors);
      BiasSnapshot<T> bias_before = t > 0 && job.bias_after ? job.bias_after : snapshot(run.model().expert_bias);
      std::optional<StepRecord<T>> r;
      try {
        r.emplace(run.step(t, KeepGrads::yes));
        // once per host, not on every rank: a reader rethrows it as DivergedError (exit 4) at step t
        require_finite_baseline(*r, run.model().params.specs, run.model().params.tensors);
      } catch (...) {  // a diverged step t: step t - 1 is published first, as when the two took turns
        finish(job);
        if (t > 0) write(job);
        throw;
      }
      finish(job);  // the twin's step t - 1
      if (t > 0) write(job);
      job.record = std::move(*r), job.before = std::move(before), job.bias_before = std::move(bias_before);
      job.after = snapshot(run.model().params.tensors), job.bias_after = snapshot(run.model().expert_bias);
      auto measure = [&s, &g, &twin, &job] {
        try {
          if (!s.trajectory) twin.start_from(*job.before, *job.bias_before);  // step-local
          job.record.noise = twin.step(job.record.step, job.record, *job.before, *job.after, *job.bias_after);
          // the sums every rank's verdict reads, once per host (family_sums.h), beside the baseline's next step
          job.record.sums = std::make_shared<const family_sums::StepSums>(
              family_sums::step_sums(job.record.grads->tensors, *job.before, *job.after, job.record.clip_coef,
                                     family_sums::moment_decay(s.optim), g.group_of, g.groups));
        } catch (...) {
          job.error = std::current_exception();
        }
      };
      // on a GPU the two would share the device's stream and handles: in turn there, as where
      // no thread can be made
      bool beside = s.layout.device == Device::cpu;
      if (beside) try {
          job.thread = std::thread(measure);
        } catch (const std::system_error&) {
          beside = false;
        }
      if (!beside) measure();
      job.running = beside;
      if (!beside && job.error) std::rethrow_exception(job.error);
    }
    finish(job);
    if (s.steps > 0 && !stop.load()) write(job);
  } catch (const std::exception& e) {
    if (job.running) job.thread.join();
    std::strncpy(h->error, e.what(), kErrorBytes - 1);
    h->error_code = exit_code::of(e);
    h->readable = ready_of(h).load(std::memory_order_relaxed);  // before kFailed: published with it
    publish(h, kFailed);
  }
}

}  // namespace shared_file

std::string baseline_key(const Scenario& s) {
  Scenario c = s;
  c.name.clear(), c.source.clear();
  c.steps = 1;
  c.resume.reset();
  const Device device = s.layout.device;
  c.layout = LayoutConfig{};
  c.layout.device = device;
  return scenario_hash(c);
}


BaselineProducer::BaselineProducer(const Scenario& s, std::string path, int consumers, int64_t first)
    : path_(std::move(path)) {
  using namespace shared_file;  // NOLINT(google-build-using-namespace): the file's format
  if (consumers < 1 || consumers > kMaxConsumers)
    throw Error("shared baseline: " + std::to_string(consumers) + " ranks on one host (at most " +
                std::to_string(kMaxConsumers) + ")");
  const size_t elem = static_cast<size_t>(dtype_size(s.model.dtype));
  const Geometry g(s, elem);
  const size_t bytes = kHeader + g.init_bytes() +
                       static_cast<size_t>(std::min<int64_t>(std::max<int64_t>(s.steps, 0), kRing)) * g.block_bytes();
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw IoError("shared baseline: cannot create " + path_ + ": " + describe_errno(errno, path_));
  // Reserved up front: a full TMPDIR is this error (exit 3), never a SIGBUS through the mapping.
  if (const int e = reserve_file(fd, static_cast<int64_t>(bytes)); e != 0) {
    ::close(fd);
    ::unlink(path_.c_str());
    throw IoError("shared baseline: cannot reserve " + std::to_string(bytes) + " bytes for " + path_ + ": " +
                  describe_errno(e, path_));
  }
  void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    const int e = errno;
    ::close(fd);
    ::unlink(path_.c_str());  // the destructor does not run: nothing left in TMPDIR
    throw IoError("shared baseline: cannot map " + path_ + ": " + describe_errno(e, path_));
  }
  auto* h = static_cast<Header*>(m);
  std::memcpy(h->magic, kMagic, sizeof kMagic);
  h->elem = static_cast<int64_t>(elem);
  h->init_bytes = static_cast<int64_t>(g.init_bytes());
  h->block_bytes = static_cast<int64_t>(g.block_bytes());
  h->steps = s.steps;
  h->consumers = consumers;
  h->error_code = 0, h->readable = kNotStarted;
  for (int c = 0; c < consumers; ++c) h->next[c] = std::max<int64_t>(first, 0);
  const std::string key = baseline_key(s);
  std::strncpy(h->key, key.c_str(), kKeyBytes - 1);
  ready_of(h).store(kNotStarted, std::memory_order_release);
  auto* base = static_cast<unsigned char*>(m);
  map_ = base, map_bytes_ = bytes, fd_ = fd;
  work_ = [this, s, base, fd] {
    with_real(s.model.dtype, [&](auto x) { produce<decltype(x)>(s, base, fd, stop_); });
  };
}

void BaselineProducer::start() {
  using namespace shared_file;  // NOLINT(google-build-using-namespace): the file's format
  if (!work_ || thread_.joinable()) return;
  try {
    thread_ = std::thread(std::move(work_));
  } catch (const std::system_error& e) {  // a thread's stack did not fit (ulimit -v) or the process limit
    throw IoError("shared baseline: cannot start its thread: " + describe_errno(e.code().value()));
  }
}

BaselineProducer::~BaselineProducer() {
  using namespace shared_file;  // NOLINT(google-build-using-namespace): the file's format
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  if (fd_ >= 0) ::close(fd_);
  ::unlink(path_.c_str());
}

}  // namespace parity
