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
#include <set>
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

namespace parity {

BaselinePlace baseline_place() {
  const char* v = knob("PARITY_SHARED_BASELINE");
  return v != nullptr && std::string(v) == "0" ? BaselinePlace::in_every_rank : BaselinePlace::once_per_host;
}

namespace {

constexpr char kMagic[8] = {'P', 'A', 'R', 'B', 'A', 'S', 'E', '3'};  // 2: error_code, 3: the step's sums
constexpr int kMaxConsumers = comm::kMaxSimRanks;  // ranks that can share a file: one host's, or a simulated world's
static_assert(kMaxConsumers >= proc::kMaxRanksPerHost);
constexpr size_t kHeader = 8192 + 8 * kMaxConsumers, kKeyBytes = 256, kErrorBytes = 2048;
constexpr int64_t kNotStarted = -2, kFailed = -1;
// Step blocks kept: the producer runs at most this far ahead of the slowest rank. On the CPU a rank reads a
// step's tensors in place and holds two blocks while it compares step t (the parameters after t - 1 and
// step t's), so four let the producer run two steps ahead, as two did when each rank copied its block out
// (that copy was a third of each rank's fresh memory: docs/bench.md, issue 43).
constexpr int64_t kRing = 4;

struct Header {
  char magic[8];
  int64_t elem, init_bytes, block_bytes, steps;
  alignas(8) int64_t ready;  // steps published (kNotStarted before the first parameters, kFailed on error)
  int64_t consumers;                 // ranks reading: each says which step it reads next
  int64_t next[kMaxConsumers];       // per rank: the first step whose block it still needs
  char key[kKeyBytes];
  char error[kErrorBytes];
  int64_t error_code;  // the failure's exit code (core/exit_codes.h): out of memory is 3, not "parity broken"
};
static_assert(sizeof(Header) <= kHeader);

size_t pad8(size_t n) { return (n + 7) / 8 * 8; }

// The sizes of one scenario's records (every array padded to 8 bytes).
struct Geometry {
  std::vector<ParamSpec> specs;
  int64_t params = 0, L = 0, E = 0, n = 0, K = 0, M = 0;
  size_t elem = 0;
  std::vector<size_t> group_of;  // per parameter: its family group in the verdict (verdict_layout)
  size_t groups = 0;
  explicit Geometry(const Scenario& s, size_t elem_bytes) : specs(param_specs(s.model)), elem(elem_bytes) {
    verdict_detail::VerdictLayout v = verdict_detail::verdict_layout(specs, s.model);
    group_of = std::move(v.group_of), groups = v.families.size();
    for (const auto& sp : specs) params += numel(sp.shape);
    L = s.model.moe_layers(), E = s.model.experts, n = s.model.batch * s.model.seq, K = s.model.top_k;
    M = s.model.microbatches;
    exact = s.model.reduce != Low::none;
  }
  bool exact = false;  // the gradients before the policy's 16-bit rounding too (StepRecord::grads_exact)
  // a step's scalars: loss, ce, aux, grad_norm, clip_coef, fp16's loss_scale and skipped, the logits' peak and
  // gradient rms
  static constexpr size_t kScalars = 9;
  size_t tensors() const { return pad8(static_cast<size_t>(params) * elem); }
  size_t bias() const { return pad8(static_cast<size_t>(L * E) * elem); }
  size_t init_bytes() const { return tensors() + bias(); }
  // the step's sums (family_sums.h StepSums): clip, wd, then per parameter its group, gradient's and
  // parameter's sums of squares, then per group the update's squares, the elements, the taken gradient's
  size_t sums() const { return 8 * (2 + 3 * specs.size() + 3 * groups); }
  size_t block_bytes() const {
    return 8 * (kScalars + static_cast<size_t>(M)) + (exact ? 3 : 2) * tensors() + bias() +
           8 * static_cast<size_t>(L * E + L * n * K + L * n * E) + 8 * kNoiseWidth + sums();
  }
};

std::atomic_ref<int64_t> ready_of(Header* h) { return std::atomic_ref<int64_t>(h->ready); }

// Readers sleep on the low half of `ready` (a futex on the shared mapping: processes and the
// threads of a simulated world alike) instead of polling it: W pollers every 20-200 us starved
// the producer once W reached the hundreds (--backend sim). The producer wakes them at every
// store; a 50 ms timeout keeps a lost wake-up harmless.
static_assert(std::endian::native == std::endian::little, "the futex word is the low half of Header::ready");
uint32_t* ready_word(Header* h) { return reinterpret_cast<uint32_t*>(&h->ready); }
void publish(Header* h, int64_t v) {
  ready_of(h).store(v, std::memory_order_release);
  ::syscall(SYS_futex, ready_word(h), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}
void wait_change(Header* h, int64_t seen) {
  timespec ts{0, 50'000'000};
  ::syscall(SYS_futex, ready_word(h), FUTEX_WAIT, static_cast<uint32_t>(seen), &ts, nullptr, 0);
}

template <class T> void put(unsigned char*& at, const T* src, size_t count) {
  std::memcpy(at, src, count * sizeof(T));
  at += pad8(count * sizeof(T));
}
template <class T> void get(const unsigned char*& at, T* dst, size_t count) {
  std::memcpy(dst, at, count * sizeof(T));
  at += pad8(count * sizeof(T));
}

template <class T> void put_tensors(unsigned char*& at, const std::vector<Tensor<T>>& ts) {
  unsigned char* p = at;
  for (const auto& t : ts)
    std::memcpy(p, t.ptr(), static_cast<size_t>(t.numel()) * sizeof(T)), p += t.numel() * sizeof(T);
  int64_t total = 0;
  for (const auto& t : ts) total += t.numel();
  at += pad8(static_cast<size_t>(total) * sizeof(T));
}
// view: the tensors read the mapping in place (borrow), else copies.
template <class T>
std::vector<Tensor<T>> get_tensors(const unsigned char*& at, const std::vector<ParamSpec>& specs, bool view) {
  std::vector<Tensor<T>> out;
  const auto* p = reinterpret_cast<const T*>(at);
  int64_t total = 0;
  for (const auto& sp : specs) {
    const int64_t k = numel(sp.shape);
    out.emplace_back(sp.shape, view ? borrow<T>(p, k) : Buffer<T>(p, p + k));
    p += k, total += k;
  }
  at += pad8(static_cast<size_t>(total) * sizeof(T));
  return out;
}

template <class T> void put_bias(unsigned char*& at, const std::vector<Buffer<T>>& bias, const Geometry& g) {
  unsigned char* p = at;
  for (const auto& b : bias) std::memcpy(p, b.data(), b.size() * sizeof(T)), p += b.size() * sizeof(T);
  at += g.bias();
}
template <class T> std::vector<Buffer<T>> get_bias(const unsigned char*& at, const Geometry& g) {
  std::vector<Buffer<T>> out;
  const auto* p = reinterpret_cast<const T*>(at);
  for (int64_t l = 0; l < g.L; ++l) out.emplace_back(p + l * g.E, p + (l + 1) * g.E);
  at += g.bias();
  return out;
}

// A step's sums (family_sums.h StepSums): Geometry::sums() bytes, every number as a double.
void put_sums(unsigned char*& at, const family_sums::StepSums& s, const Geometry& g) {
  std::vector<double> v{s.clip, s.wd};
  const size_t P = g.specs.size();
  for (size_t p = 0; p < P; ++p) v.push_back(p < s.group_of.size() ? static_cast<double>(s.group_of[p]) : 1e18);
  for (const auto* x : {&s.grad_sq, &s.param_sq})
    for (size_t p = 0; p < P; ++p) v.push_back(p < x->size() ? (*x)[p] : 0.0);
  for (const auto* x : {&s.update_sq, &s.n, &s.taken_sq})
    for (size_t k = 0; k < g.groups; ++k) v.push_back(k < x->size() ? (*x)[k] : 0.0);
  put(at, v.data(), v.size());
}
std::shared_ptr<const family_sums::StepSums> get_sums(const unsigned char*& at, const Geometry& g) {
  const size_t P = g.specs.size(), G = g.groups;
  std::vector<double> v(2 + 3 * P + 3 * G);
  get(at, v.data(), v.size());
  auto s = std::make_shared<family_sums::StepSums>();
  const double* x = v.data();
  s->clip = x[0], s->wd = x[1], x += 2;
  for (size_t p = 0; p < P; ++p) s->group_of.push_back(static_cast<size_t>(x[p]));
  x += P;
  s->grad_sq.assign(x, x + P), x += P;
  s->param_sq.assign(x, x + P), x += P;
  s->update_sq.assign(x, x + G), x += G;
  s->n.assign(x, x + G), x += G;
  s->taken_sq.assign(x, x + G);
  return s;
}

// ---- a baseline trained in this process ----
template <class T> class LocalBaseline final : public BaselineSource<T> {
 public:
  explicit LocalBaseline(const Scenario& s) : run_(s), twin_(s) {}
  std::shared_ptr<const StepRecord<T>> step(int64_t t) override {
    const std::vector<Tensor<T>> before = run_.model().params.tensors;
    if (!run_.scenario().trajectory) twin_.start_from(before, run_.model().expert_bias);  // step-local
    StepRecord<T> r = run_.step(t, KeepGrads::yes);
    r.noise = twin_.step(t, r, before, run_.model().params.tensors, run_.model().expert_bias);
    return std::make_shared<const StepRecord<T>>(std::move(r));
  }
  const std::vector<Tensor<T>>& params() override { return run_.model().params.tensors; }
  std::shared_ptr<const std::vector<Tensor<T>>> params_handle() override {
    return std::make_shared<const std::vector<Tensor<T>>>(run_.model().params.tensors);  // a copy: it trains on
  }
  const std::vector<Buffer<T>>& expert_bias() override { return run_.model().expert_bias; }
  void skip_to(int64_t t) override {
    for (int64_t i = 0; i < t; ++i) (void)run_.step(i), twin_.skip(i);  // replayed, not compared
  }
  bool shared() const override { return false; }

 private:
  BaselineRun<T> run_;
  TwinRun<T> twin_;
};

// ---- the host's shared file ----
// What a reader decodes from the file: the parameters and expert biases after a step, and the
// step's record. The threads of a simulated world (--backend sim) read the same file: they share
// one decoded copy per step (DecodeCache) instead of each holding the whole model's gradients and
// parameters and the whole batch's routing (what grew a 1024-rank world by gigabytes).
template <class T> struct BaselineState {
  std::vector<Tensor<T>> params;
  std::vector<Buffer<T>> bias;
};
template <class T> struct DecodedStep {
  std::shared_ptr<const StepRecord<T>> rec;  // null for the state alone (the initial one, skip_to)
  std::shared_ptr<const BaselineState<T>> state;
};

// One decoded copy per (file, step) in this process, while some reader holds it.
template <class T>
DecodedStep<T> decode_once(const std::string& file, int64_t t, bool need_rec,
                           const std::function<DecodedStep<T>()>& decode) {
  using Entry = std::pair<std::weak_ptr<const StepRecord<T>>, std::weak_ptr<const BaselineState<T>>>;
  static std::mutex mu;
  static std::map<std::pair<std::string, int64_t>, Entry> cache;
  std::lock_guard<std::mutex> lk(mu);  // the first reader decodes; the others would wait for it anyway
  Entry& e = cache[{file, t}];
  DecodedStep<T> d{e.first.lock(), e.second.lock()};
  if (d.state && (d.rec || !need_rec)) return d;
  d = decode();
  e = {d.rec, d.state};
  for (auto it = cache.begin(); it != cache.end();)
    it = it->second.second.expired() ? cache.erase(it) : std::next(it);
  return d;
}

// A file's mapping, unmapped when its last holder lets go.
struct FileMap {
  unsigned char* base = nullptr;
  size_t bytes = 0;
  ino_t ino = 0;  // the file's, when it was mapped
  FileMap(unsigned char* b, size_t n, ino_t i) : base(b), bytes(n), ino(i) { buffer_detail::lend(b, n); }
  FileMap(const FileMap&) = delete;
  FileMap& operator=(const FileMap&) = delete;
  ~FileMap() {
    buffer_detail::unlend(base);
    ::munmap(base, bytes);
  }
};

// One mapping of a shared baseline file per process, while some reader holds it: the threads of
// a simulated world share it (each used to map the whole file itself, so a 4096-rank world's
// address space held 4096 mappings of it and passed a 24 GB `ulimit -v`). A process rank maps
// it once, as before. Keyed by the file's device and inode; null when it cannot be opened or mapped.
std::shared_ptr<FileMap> map_once(const std::string& path) {
  static std::mutex mu;
  static std::map<std::pair<dev_t, ino_t>, std::weak_ptr<FileMap>> maps;
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);  // read-write: a reader posts its next step
  if (fd < 0) return nullptr;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < kHeader) {
    ::close(fd);
    return nullptr;
  }
  const auto bytes = static_cast<size_t>(st.st_size);
  std::lock_guard<std::mutex> lk(mu);
  std::weak_ptr<FileMap>& slot = maps[{st.st_dev, st.st_ino}];
  if (std::shared_ptr<FileMap> m = slot.lock(); m && m->bytes == bytes) {
    ::close(fd);
    return m;
  }
  void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) return nullptr;
  auto map = std::make_shared<FileMap>(static_cast<unsigned char*>(m), bytes, st.st_ino);
  slot = map;
  for (auto it = maps.begin(); it != maps.end();) it = it->second.expired() ? maps.erase(it) : std::next(it);
  return map;
}

// Which step blocks a reader's records and states still read in place (SharedBaseline's views): the
// reader's `next` in the header is the first of them (or the first step it has not read), so the
// producer reuses none while some handle reads it. Shared with every pinned handle: it outlives the
// reader if a handle does.
struct ReaderPins {
  std::shared_ptr<FileMap> map;
  int slot = 0;
  std::mutex mu;
  std::multiset<int64_t> held;
  int64_t read = 0;                // the steps before it were read
  int64_t posted = INT64_MIN;      // what `next` says (it only grows)
  void post_locked() {
    const int64_t next = held.empty() ? read : std::min(*held.begin(), read);
    if (next <= posted) return;
    posted = next;
    auto* h = reinterpret_cast<Header*>(map->base);
    std::atomic_ref<int64_t>(h->next[slot]).store(next, std::memory_order_release);
  }
  void unpin(int64_t t) {
    std::lock_guard<std::mutex> lk(mu);
    held.erase(held.find(t));
    post_locked();
  }
};

template <class T> class SharedBaseline final : public BaselineSource<T> {
 public:
  SharedBaseline(const Scenario& s, std::shared_ptr<FileMap> map, int slot, std::string file)
      : g_(s, sizeof(T)), map_(std::move(map)), base_(map_->base), slot_(slot), file_(std::move(file)) {
    pins_->map = map_, pins_->slot = slot;
    wait_for(0);
    cur_ = decode_once<T>(file_, -1, false, [&] {
             const unsigned char* at = base_ + kHeader;
             return DecodedStep<T>{nullptr, read_state(at)};
           }).state;
  }

  std::shared_ptr<const StepRecord<T>> step(int64_t t) override {
    not_released(t);
    wait_for(t + 1);
    const DecodedStep<T> d = decode_once<T>(file_, t, true, [&] { return decode_step(t); });
    cur_ = pinned(d.state, t);
    std::shared_ptr<const StepRecord<T>> rec = pinned(d.rec, t);
    release(t + 1);
    return rec;
  }
  const std::vector<Tensor<T>>& params() override { return cur_->params; }
  const std::vector<Buffer<T>>& expert_bias() override { return cur_->bias; }
  std::shared_ptr<const std::vector<Tensor<T>>> params_handle() override {
    return std::shared_ptr<const std::vector<Tensor<T>>>(cur_, &cur_->params);  // no copy: shares the state
  }
  void skip_to(int64_t t) override {
    if (t == 0) return;
    not_released(t - 1);
    wait_for(t);  // the parameters after step t - 1
    cur_ = decode_once<T>(file_, t - 1, false, [&] {
             const unsigned char* at = block(t - 1) + 8 * (Geometry::kScalars + static_cast<size_t>(g_.M)) +
                                       (g_.exact ? 2 : 1) * g_.tensors();  // past the step's gradients
             return DecodedStep<T>{nullptr, read_state(at)};
           }).state;
    cur_ = pinned(cur_, t - 1);
    release(t);
  }
  bool shared() const override { return true; }

 private:
  // Until `n` steps are published (0: the initial parameters); the producer's error, if any.
  void wait_for(int64_t n) const {
    auto* h = reinterpret_cast<Header*>(const_cast<unsigned char*>(base_));
    for (unsigned spins = 0;; ++spins) {
      const int64_t r = ready_of(h).load(std::memory_order_acquire);
      if (r >= n && r != kNotStarted) return;
      if (r == kFailed) {
        const std::string what = std::string("the shared baseline failed: ") + h->error;
        if (h->error_code == exit_code::infrastructure) throw IoError(what);
        throw Error(what);
      }
      if (r >= 0 && r >= h->steps && n > r)
        throw Error("the shared baseline has " + std::to_string(h->steps) + " steps, step " + std::to_string(n - 1) +
                    " was asked for");
      if (spins < 10)
        ::usleep(20);
      else
        wait_change(h, r);
    }
  }
  const unsigned char* block(int64_t t) const {
    return base_ + kHeader + g_.init_bytes() + static_cast<size_t>(t % kRing) * g_.block_bytes();
  }
  // This rank has read the steps before `next`: the producer may reuse their blocks once no handle
  // of this rank pins them (pinned).
  void release(int64_t next) {
    released_ = std::max(released_, next);
    std::lock_guard<std::mutex> lk(pins_->mu);
    pins_->read = std::max(pins_->read, next);
    pins_->post_locked();
  }
  // On the CPU a step's tensors read the file in place (borrow: no copy, no fresh memory in each rank): the
  // handle pins step t's block until it is let go. On cuda they are copies (managed memory the kernels use).
  template <class X> std::shared_ptr<const X> pinned(std::shared_ptr<const X> x, int64_t t) {
    if (!views_ || !x || t < 0) return x;
    {
      std::lock_guard<std::mutex> lk(pins_->mu);
      pins_->held.insert(t);
    }
    return std::shared_ptr<const X>(x.get(), [x, pins = pins_, t](const X*) mutable {
      x.reset();
      pins->unpin(t);
      pins.reset();  // now, not with the control block (a weak_ptr may keep that)
    });
  }
  // A decoded object that may read the mapping in place holds it, until the object goes (decode_once's weak_ptr
  // keeps the control block, and so the deleter, for longer).
  template <class X> std::shared_ptr<X> holding_map(X* x) const {
    return std::shared_ptr<X>(x, [m = map_](X* p) mutable {
      delete p;
      m.reset();
    });
  }
  // A step's block released is the producer's to reuse: the ring's slot may already hold step t +
  // kRing, and reading it would hand this rank another step's record without a word (issue 45's
  // traced re-run asked for step 0 again and got step 8's routing). Refused instead.
  void not_released(int64_t t) const {
    if (t < released_)
      throw std::logic_error("shared baseline: step " + std::to_string(t) + " asked for again after this rank " +
                             "released it (its block of the ring of " + std::to_string(kRing) +
                             " may hold another step now); read each step once, in order");
  }
  int64_t released_ = 0;  // the blocks before it are released (release)
  Geometry g_;
  std::shared_ptr<FileMap> map_;  // this process's one mapping of the file
  const unsigned char* base_;
  int slot_;
  std::string file_;
  std::shared_ptr<const BaselineState<T>> cur_;
  const bool views_ = !on_cuda();
  std::shared_ptr<ReaderPins> pins_ = std::make_shared<ReaderPins>();

  std::shared_ptr<const BaselineState<T>> read_state(const unsigned char*& at) const {
    std::shared_ptr<BaselineState<T>> st = holding_map(new BaselineState<T>());
    st->params = get_tensors<T>(at, g_.specs, views_);
    st->bias = get_bias<T>(at, g_);
    return st;
  }
  DecodedStep<T> decode_step(int64_t t) const {
    const unsigned char* at = block(t);
    std::shared_ptr<StepRecord<T>> r = holding_map(new StepRecord<T>());
    r->step = t;
    double sc[Geometry::kScalars];
    get(at, sc, Geometry::kScalars);
    r->loss = sc[0], r->ce = sc[1], r->aux = sc[2], r->grad_norm = sc[3], r->clip_coef = sc[4];
    r->loss_scale = sc[5], r->skipped = sc[6] != 0, r->logit_peak = sc[7];
    r->logit_grad_rms = sc[8];
    r->micro_losses.resize(static_cast<size_t>(g_.M));
    get(at, r->micro_losses.data(), r->micro_losses.size());
    ParamSet<T> grads;
    grads.specs = g_.specs;
    grads.tensors = get_tensors<T>(at, g_.specs, views_);
    r->grads = std::move(grads);
    if (g_.exact) r->grads_exact = ParamSet<T>{g_.specs, get_tensors<T>(at, g_.specs, views_)};
    auto st = read_state(at);
    const auto L = static_cast<size_t>(g_.L);
    r->tokens_per_expert.assign(L, std::vector<int64_t>(static_cast<size_t>(g_.E)));
    r->chosen.assign(L, std::vector<int64_t>(static_cast<size_t>(g_.n * g_.K)));
    r->select_scores.assign(L, std::vector<double>(static_cast<size_t>(g_.n * g_.E)));
    for (auto& v : r->tokens_per_expert) get(at, v.data(), v.size());
    for (auto& v : r->chosen) get(at, v.data(), v.size());
    for (auto& v : r->select_scores) get(at, v.data(), v.size());
    r->noise.resize(kNoiseWidth);
    get(at, r->noise.data(), kNoiseWidth);
    r->sums = get_sums(at, g_);
    return {r, st};
  }
};

// Baseline step t+1 runs while the twin measures step t in a thread of its own (the twin's
// step needs only the baseline's record of t and its parameters before and after t, copied):
// the two take turns no more, so the ranks get step t after about one baseline step instead of
// a baseline step and a twin step. Each computes what it did in turn, in its own precision
// scope and jitter sequence (both per thread and set per step): the same bits.
template <class T> struct TwinJob {
  StepRecord<T> record;
  std::vector<Tensor<T>> before, after;
  std::vector<Buffer<T>> bias_before, bias_after;
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

template <class T> void produce(const Scenario& s, unsigned char* base, const std::atomic<bool>& stop) {
  auto* h = reinterpret_cast<Header*>(base);
  const Geometry g(s, sizeof(T));
  TwinJob<T> job;
  try {
    BaselineRun<T> run(s);
    TwinRun<T> twin(s);  // beside the baseline, once per host
    unsigned char* at = base + kHeader;
    put_tensors(at, run.model().params.tensors);
    put_bias(at, run.model().expert_bias, g);
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
      at = base + kHeader + g.init_bytes() + static_cast<size_t>(t % kRing) * g.block_bytes();
      const double sc[Geometry::kScalars] = {r.loss,      r.ce,         r.aux, r.grad_norm,
                                             r.clip_coef, r.loss_scale, r.skipped ? 1.0 : 0.0, r.logit_peak,
                                             r.logit_grad_rms};
      put(at, sc, Geometry::kScalars);
      put(at, r.micro_losses.data(), r.micro_losses.size());
      put_tensors(at, r.grads->tensors);
      if (g.exact) put_tensors(at, r.grads_exact->tensors);
      put_tensors(at, j.after);
      put_bias(at, j.bias_after, g);
      for (const auto& v : r.tokens_per_expert) put(at, v.data(), v.size());
      for (const auto& v : r.chosen) put(at, v.data(), v.size());
      for (const auto& v : r.select_scores) put(at, v.data(), v.size());
      put(at, r.noise.data(), kNoiseWidth);
      put_sums(at, *r.sums, g);
      publish(h, t + 1);
    };
    for (int64_t t = 0; t < s.steps && !stop.load(); ++t) {
      std::vector<Tensor<T>> before = run.model().params.tensors;
      std::vector<Buffer<T>> bias_before = run.model().expert_bias;
      std::optional<StepRecord<T>> r;
      try {
        r.emplace(run.step(t, KeepGrads::yes));
      } catch (...) {  // a diverged step t: step t - 1 is published first, as when the two took turns
        finish(job);
        if (t > 0) write(job);
        throw;
      }
      finish(job);  // the twin's step t - 1
      if (t > 0) write(job);
      job.record = std::move(*r), job.before = std::move(before), job.bias_before = std::move(bias_before);
      job.after = run.model().params.tensors, job.bias_after = run.model().expert_bias;
      auto measure = [&s, &g, &twin, &job] {
        try {
          if (!s.trajectory) twin.start_from(job.before, job.bias_before);  // step-local
          job.record.noise = twin.step(job.record.step, job.record, job.before, job.after, job.bias_after);
          // the sums every rank's verdict reads, once per host (family_sums.h), beside the baseline's next step
          job.record.sums = std::make_shared<const family_sums::StepSums>(
              family_sums::step_sums(job.record.grads->tensors, job.before, job.after, job.record.clip_coef,
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
    publish(h, kFailed);
  }
}

}  // namespace

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

template <class T>
std::unique_ptr<BaselineSource<T>> make_baseline_source(const Scenario& s, int slot, const std::string& path) {
  if (std::shared_ptr<FileMap> m = path.empty() ? nullptr : map_once(path)) {
    const auto* h = reinterpret_cast<const Header*>(m->base);
    const Geometry g(s, sizeof(T));
    if (std::memcmp(h->magic, kMagic, sizeof kMagic) == 0 && h->elem == static_cast<int64_t>(sizeof(T)) &&
        h->key == baseline_key(s) && h->block_bytes == static_cast<int64_t>(g.block_bytes()) && slot >= 0 &&
        slot < h->consumers) {
      const std::string file = std::string(path) + "@" + std::to_string(m->ino);
      return std::make_unique<SharedBaseline<T>>(s, std::move(m), slot, file);
    }
    // another scenario's: train our own (the mapping goes with its last holder)
  }
  return std::make_unique<LocalBaseline<T>>(s);
}

int shared_baseline_readers(const std::string& path) {
  const std::shared_ptr<FileMap> m = map_once(path);
  const auto* h = m ? reinterpret_cast<const Header*>(m->base) : nullptr;
  return h != nullptr && std::memcmp(h->magic, kMagic, sizeof kMagic) == 0 ? static_cast<int>(h->consumers) : 0;
}

BaselineProducer::BaselineProducer(const Scenario& s, std::string path, int consumers, int64_t first)
    : path_(std::move(path)) {
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
  ::close(fd);
  if (m == MAP_FAILED) {
    const int e = errno;
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
  h->error_code = 0;
  for (int c = 0; c < consumers; ++c) h->next[c] = std::max<int64_t>(first, 0);
  const std::string key = baseline_key(s);
  std::strncpy(h->key, key.c_str(), kKeyBytes - 1);
  ready_of(h).store(kNotStarted, std::memory_order_release);
  auto* base = static_cast<unsigned char*>(m);
  map_ = base, map_bytes_ = bytes;
  work_ = [this, s, base] {
    with_real(s.model.dtype, [&](auto x) { produce<decltype(x)>(s, base, stop_); });
  };
}

void BaselineProducer::start() {
  if (!work_ || thread_.joinable()) return;
  try {
    thread_ = std::thread(std::move(work_));
  } catch (const std::system_error& e) {  // a thread's stack did not fit (ulimit -v) or the process limit
    throw IoError("shared baseline: cannot start its thread: " + describe_errno(e.code().value()));
  }
}

BaselineProducer::~BaselineProducer() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  ::unlink(path_.c_str());
}

template std::unique_ptr<BaselineSource<float>> make_baseline_source<float>(const Scenario&, int, const std::string&);
template std::unique_ptr<BaselineSource<double>> make_baseline_source<double>(const Scenario&, int,
                                                                              const std::string&);

}  // namespace parity
