// The readers of the host's shared baseline file (shared_baseline.h): a rank maps it once and reads each
// step's record from it, in place on the CPU; or, without a file, a baseline trained in this process.
#include "harness/runner/shared_baseline.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/device.h"
#include "core/error.h"
#include "core/exit_codes.h"
#include "harness/runner/shared_baseline_format.h"
#include "harness/runner/twin.h"

namespace parity {

namespace shared_file {

// ---- a baseline trained in this process ----
template <class T> class LocalBaseline final : public BaselineSource<T> {
 public:
  explicit LocalBaseline(const Scenario& s) : run_(s), twin_(s) {}
  std::shared_ptr<const StepRecord<T>> step(int64_t t) override {
    const std::vector<Tensor<T>> before = run_.model().params.tensors;
    if (!run_.scenario().trajectory) twin_.start_from(before, run_.model().expert_bias);  // step-local
    StepRecord<T> r = run_.step(t, KeepGrads::yes);
    require_finite_baseline(r, run_.model().params.specs, run_.model().params.tensors);  // exit 4, every rank alike
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
  FileMap(unsigned char* b, size_t n, ino_t i) : base(b), bytes(n), ino(i) {
    try {
      buffer_detail::lend(b, n);
    } catch (...) {  // no destructor runs for a constructor that throws: the mapping goes here
      ::munmap(b, n);
      throw;
    }
  }
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
  // Until `n` steps are published (0: the initial parameters); the producer's error, if any, once a step it did
  // not publish is asked for (those it published before failing stay readable: Header::readable).
  void wait_for(int64_t n) const {
    auto* h = reinterpret_cast<Header*>(const_cast<unsigned char*>(base_));
    for (unsigned spins = 0;; ++spins) {
      const int64_t r = ready_of(h).load(std::memory_order_acquire);
      if (r >= n && r != kNotStarted) return;
      if (r == kFailed && h->readable >= n && h->readable != kNotStarted) return;
      if (r == kFailed) {
        if (h->error_code == exit_code::diverged) throw DivergedError(h->error);  // the producer's check, as is
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

}  // namespace shared_file

template <class T>
std::unique_ptr<BaselineSource<T>> make_baseline_source(const Scenario& s, int slot, const std::string& path) {
  using namespace shared_file;  // NOLINT(google-build-using-namespace): the file's format
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
  using namespace shared_file;  // NOLINT(google-build-using-namespace): the file's format
  const std::shared_ptr<FileMap> m = map_once(path);
  const auto* h = m ? reinterpret_cast<const Header*>(m->base) : nullptr;
  return h != nullptr && std::memcmp(h->magic, kMagic, sizeof kMagic) == 0 ? static_cast<int>(h->consumers) : 0;
}

template std::unique_ptr<BaselineSource<float>> make_baseline_source<float>(const Scenario&, int, const std::string&);
template std::unique_ptr<BaselineSource<double>> make_baseline_source<double>(const Scenario&, int,
                                                                              const std::string&);

}  // namespace parity
