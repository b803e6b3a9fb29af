// The host's shared baseline file, as its producer (shared_baseline.cpp) writes it and its readers
// (shared_baseline_read.cpp) read it: the header page, the sizes of one scenario's records, and the
// helpers that put and get them. Internal to harness/runner.
#pragma once
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <bit>
#include <climits>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "comm/sim/sim_world.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/resources.h"
#include "harness/runner/baseline.h"
#include "harness/scenario/scenario.h"
#include "harness/verdict/bounds.h"
#include "harness/verdict/family_sums.h"
#include "harness/verdict/verdict_detail.h"
#include "model/params.h"
#include "proc/launch.h"

namespace parity::shared_file {

// 2: error_code, 3: the step's sums, 4: readable (what a failure leaves to read)
constexpr char kMagic[8] = {'P', 'A', 'R', 'B', 'A', 'S', 'E', '4'};
// ranks that can share a file: one host's, or a simulated world's
inline constexpr int kMaxConsumers = comm::kMaxSimRanks;
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
  // On failure: the steps published before it (ready's last value; kNotStarted: not the first parameters). A rank
  // still reads those: a baseline that diverged at step t reached a rank still at step t - 2 as the divergence, and
  // that rank left the world while rank 0, the one to say so, waited for it in a collective (issue 26's
  // diverge_baseline: 1 run in 8 said "rank 1 exited during the collective" and not that the baseline diverged).
  int64_t readable;
};
static_assert(sizeof(Header) <= kHeader);

inline size_t pad8(size_t n) { return (n + 7) / 8 * 8; }

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

inline std::atomic_ref<int64_t> ready_of(Header* h) { return std::atomic_ref<int64_t>(h->ready); }

// Readers sleep on the low half of `ready` (a futex on the shared mapping: processes and the
// threads of a simulated world alike) instead of polling it: W pollers every 20-200 us starved
// the producer once W reached the hundreds (--backend sim). The producer wakes them at every
// store; a 50 ms timeout keeps a lost wake-up harmless.
static_assert(std::endian::native == std::endian::little, "the futex word is the low half of Header::ready");
inline uint32_t* ready_word(Header* h) { return reinterpret_cast<uint32_t*>(&h->ready); }
inline void publish(Header* h, int64_t v) {
  ready_of(h).store(v, std::memory_order_release);
  ::syscall(SYS_futex, ready_word(h), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}
inline void wait_change(Header* h, int64_t seen) {
  timespec ts{0, 50'000'000};
  ::syscall(SYS_futex, ready_word(h), FUTEX_WAIT, static_cast<uint32_t>(seen), &ts, nullptr, 0);
}

// Writes n bytes at the file's offset `at`; IoError when it cannot.
inline void write_at(int fd, const void* src, size_t n, size_t at) {
  const auto* p = static_cast<const unsigned char*>(src);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(at));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw IoError("shared baseline: cannot write its file: " + describe_errno(w < 0 ? errno : EIO));
    p += w, n -= static_cast<size_t>(w), at += static_cast<size_t>(w);
  }
}

// Where the producer writes next. Its records go through the file (pwrite), not stores into its mapping, whose
// every first store into a page was a page fault (ext4 page_mkwrite: ~1600 per dim64 step block, issue 43); the
// readers' mappings see the same page-cache pages. Small pieces are gathered into one write of up to kChunk
// (a write per tensor was 2-5% slower at dim64); a piece that large goes as it is. flush() before publishing.
class FileAt {
 public:
  static constexpr size_t kChunk = size_t{4} << 20;
  FileAt(int fd, size_t off) : fd_(fd), off_(off) {}
  void seek(size_t off) { flush(), off_ = off; }
  void write(const void* src, size_t n) {
    if (buf_.size() + n > kChunk) flush();
    if (n >= kChunk) {
      write_at(fd_, src, n, off_), off_ += n;
      return;
    }
    const auto* p = static_cast<const unsigned char*>(src);
    buf_.insert(buf_.end(), p, p + n);
  }
  void skip(size_t n) {  // padding: the file's reserved zeros where nothing is gathered
    if (buf_.empty())
      off_ += n;
    else
      buf_.resize(buf_.size() + n, 0);
  }
  void flush() {
    if (buf_.empty()) return;
    write_at(fd_, buf_.data(), buf_.size(), off_);
    off_ += buf_.size(), buf_.clear();
  }

 private:
  int fd_;
  size_t off_;                        // the file's offset of buf_'s first byte
  std::vector<unsigned char> buf_{};  // gathered, not yet written
};

template <class T> void put(FileAt& at, const T* src, size_t count) {
  at.write(src, count * sizeof(T));
  at.skip(pad8(count * sizeof(T)) - count * sizeof(T));
}
template <class T> void get(const unsigned char*& at, T* dst, size_t count) {
  std::memcpy(dst, at, count * sizeof(T));
  at += pad8(count * sizeof(T));
}

template <class T> void put_tensors(FileAt& at, const std::vector<Tensor<T>>& ts) {
  size_t n = 0;
  for (const auto& t : ts) at.write(t.ptr(), static_cast<size_t>(t.numel()) * sizeof(T)), n += t.numel() * sizeof(T);
  at.skip(pad8(n) - n);
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

template <class T> void put_bias(FileAt& at, const std::vector<Buffer<T>>& bias, const Geometry& g) {
  size_t n = 0;
  for (const auto& b : bias) at.write(b.data(), b.size() * sizeof(T)), n += b.size() * sizeof(T);
  at.skip(g.bias() - n);
}
template <class T> std::vector<Buffer<T>> get_bias(const unsigned char*& at, const Geometry& g) {
  std::vector<Buffer<T>> out;
  const auto* p = reinterpret_cast<const T*>(at);
  for (int64_t l = 0; l < g.L; ++l) out.emplace_back(p + l * g.E, p + (l + 1) * g.E);
  at += g.bias();
  return out;
}

// A step's sums (family_sums.h StepSums): Geometry::sums() bytes, every number as a double.
inline void put_sums(FileAt& at, const family_sums::StepSums& s, const Geometry& g) {
  std::vector<double> v{s.clip, s.wd};
  const size_t P = g.specs.size();
  for (size_t p = 0; p < P; ++p) v.push_back(p < s.group_of.size() ? static_cast<double>(s.group_of[p]) : 1e18);
  for (const auto* x : {&s.grad_sq, &s.param_sq})
    for (size_t p = 0; p < P; ++p) v.push_back(p < x->size() ? (*x)[p] : 0.0);
  for (const auto* x : {&s.update_sq, &s.n, &s.taken_sq})
    for (size_t k = 0; k < g.groups; ++k) v.push_back(k < x->size() ? (*x)[k] : 0.0);
  put(at, v.data(), v.size());
}
inline std::shared_ptr<const family_sums::StepSums> get_sums(const unsigned char*& at, const Geometry& g) {
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

}  // namespace parity::shared_file
