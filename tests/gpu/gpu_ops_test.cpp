// Every op on every device against the CPU reference (ARCHITECTURE.md 3, the pattern of
// ggml's test-backend-ops): each case draws its inputs, runs on the CPU and on cuda, and
// every output must agree within the one tolerance table (Quantity::op_result, keyed by
// dtype); integer outputs (top-k choices) must be equal. Sizes 0, 1, odd (7) and large (67)
// scale every dimension of a case. The cuda side runs twice: on managed memory (the model's
// own buffers, core/buffer.h) and on plain host memory (staged through the device), and the
// managed run is repeated to show the GPU is bitwise reproducible run to run.
// Adding an op means adding a case to kCases. Without a CUDA device every test skips,
// visibly (never a pass). PARITY_GPU_OPS_TABLE=FILE writes the max error of every op.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/random.h"
#include "common/tolerance.h"
#include "core/buffer.h"
#include "core/device.h"
#include "core/error.h"
#include "core/precision.h"
#include "gpu/op_cases.h"
#include "ops/elementwise.h"
#if PARITY_HAVE_CUDA
#include "kernels/kernels.h"
#endif

namespace parity {
namespace {

using test::OpCase;
using test::OpCtx;
using test::Outputs;

// Runs a case with buffers allocated under `alloc` and the op computed under `compute`.
template <class T> Outputs run_case(const OpCase& c, int64_t s, Device alloc, Device compute) {
  use_device(compute);
  OpCtx<T> ctx(0x5eed0000ULL + static_cast<uint64_t>(s) * 977 + std::hash<std::string>{}(c.name) % 1000, s, alloc);
  if constexpr (std::is_same_v<T, float>)
    c.f32(ctx);
  else
    c.f64(ctx);
  Outputs out = ctx.collect();
  use_device(Device::cpu);
  return out;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

struct Worst {
  double rel = 0, abs = 0;
};
std::map<std::string, Worst>& worst_table() {
  static std::map<std::string, Worst> t;
  return t;
}

// `policy` names a precision policy (core/precision.h) whose storage points round the ops'
// outputs on both devices; bf16's bound is one bf16 rounding (2^-8): where CUDA's exp moves
// an fp32 value across a bf16 rounding boundary, that element differs by one bf16 ulp.
template <class T> void check_all_ops(const char* policy) {
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "no GPU to run the kernels on: " << why;
  const Precision p = parse_precision(policy, "test");
  PrecisionScope scope(p);
  const double tol = p.store == Low::none ? test::Tolerance<T>::rel : unit_roundoff(p);
  const char* dt = policy;
  for (const OpCase& c : test::op_cases()) {
    for (int64_t s : {0, 1, 7, 67}) {
      SCOPED_TRACE(std::string(c.name) + " " + dt + " size " + std::to_string(s));
      const Outputs cpu = run_case<T>(c, s, Device::cpu, Device::cpu);
      const Outputs gpu = run_case<T>(c, s, Device::cuda, Device::cuda);
      const Outputs staged = run_case<T>(c, s, Device::cpu, Device::cuda);
      const Outputs again = run_case<T>(c, s, Device::cuda, Device::cuda);
      ASSERT_EQ(cpu.size(), gpu.size());
      for (size_t i = 0; i < cpu.size(); ++i) {
        const auto& [name, want, exact] = cpu[i];
        const auto& got = std::get<1>(gpu[i]);
        SCOPED_TRACE("output " + name);
        if (exact)
          EXPECT_TRUE(test::bitwise_equal(got, want));
        else
          EXPECT_TRUE(test::close_normwise(got, want, tol));
        EXPECT_TRUE(test::bitwise_equal(std::get<1>(staged[i]), got)) << "host memory staged vs managed";
        EXPECT_TRUE(same_bits(std::get<1>(again[i]), got)) << "two GPU runs differ bitwise";
        Worst& w = worst_table()[std::string(c.name) + " " + dt];
        w.rel = std::max(w.rel, test::normwise_rel_err(got, want));
        for (size_t e = 0; e < want.size(); ++e) w.abs = std::max(w.abs, std::fabs(got[e] - want[e]));
      }
    }
  }
}

// cuBLAS is loaded at the first GPU matmul, not linked (start-up cost of every process):
// the library and each entry point it uses resolve, checked where no GPU is needed.
TEST(GpuOps, CublasLoadsOnDemand) {
#if PARITY_HAVE_CUDA
  EXPECT_NO_THROW(cuda::load_blas());
#else
  GTEST_SKIP() << "this build has no CUDA";
#endif
}

TEST(GpuOps, EveryOpMatchesTheCpuReferenceFp64) { check_all_ops<double>("fp64"); }
TEST(GpuOps, EveryOpMatchesTheCpuReferenceFp32) { check_all_ops<float>("fp32"); }
TEST(GpuOps, EveryOpMatchesTheCpuReferenceBf16) { check_all_ops<float>("bf16"); }
TEST(GpuOps, EveryOpMatchesTheCpuReferenceFp16) { check_all_ops<float>("fp16"); }

// n float bit patterns of a linear congruential sequence from `state` (NaNs, infinities, subnormals).
std::vector<float> random_bit_patterns(int n, uint32_t state) {
  std::vector<float> out;
  for (int i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    float f;
    std::memcpy(&f, &state, sizeof f);
    out.push_back(f);
  }
  return out;
}

// How many of the GPU's results differ from the host's in their bits (any NaN is one: a NaN's payload
// may differ after a double -> float conversion on the GPU); the first 5 reported with their input v.
template <class T> int64_t bits_differ(const std::vector<T>& host, const Buffer<T>& dev, const std::vector<float>& v) {
  int64_t differ = 0;
  for (size_t i = 0; i < host.size(); ++i) {
    const bool same = (std::isnan(host[i]) && std::isnan(dev[i])) || std::memcmp(&host[i], &dev[i], sizeof(T)) == 0;
    if (!same && differ++ < 5) ADD_FAILURE() << "value " << v[i] << ": host " << host[i] << ", GPU " << dev[i];
  }
  return differ;
}

// A storage point on the GPU (ops/elementwise.h's storage_point: a kernel over the managed
// buffer) gives the host's bits (core/precision.h's to_storage) for every float: random bit
// patterns (NaNs, infinities, subnormals of every kind) and the edges by hand (ties, fp16's
// overflow at 65520, its subnormal quantum 2^-24, signed zeros), as float and as double.
template <class T> void storage_point_matches_host(const char* policy, const std::vector<float>& v) {
  SCOPED_TRACE(std::string(policy) + (sizeof(T) == 8 ? " double" : " float"));
  PrecisionScope scope(parse_precision(policy, "test"));
  const int64_t n = static_cast<int64_t>(v.size());
  std::vector<T> host(v.begin(), v.end());
  to_storage(host.data(), n);
  use_device(Device::cuda);
  Buffer<T> dev = zeros<T>(n);
  for (int64_t i = 0; i < n; ++i) dev[i] = static_cast<T>(v[i]);
  storage_point(dev.data(), n);
  use_device(Device::cpu);
  int64_t moved = 0;
  for (int64_t i = 0; i < n; ++i) moved += !(static_cast<float>(host[i]) == v[i]);  // NaN counts: the bits decide
  EXPECT_EQ(bits_differ(host, dev, v), 0);
  EXPECT_GT(moved, n / 2) << "the rounding changed too few values to test anything";
}

TEST(GpuOps, StoragePointsRoundWithTheHostsBits) {
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "no GPU: " << why;
  std::vector<float> v = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 0x1p-24f, 0x1p-25f, 0x3p-26f,
                          0x1p-14f, 0x1.ffcp-15f, 1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 1.0f + 0x1p-11f, 1.0f + 0x3p-11f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min()};
  const std::vector<float> random = random_bit_patterns(200000, 0x9e3779b9u);
  v.insert(v.end(), random.begin(), random.end());
  for (const char* policy : {"bf16", "fp16"}) {
    storage_point_matches_host<float>(policy, v);
    storage_point_matches_host<double>(policy, v);
  }
}

// fp16's unscale (optim/loss_scaler.h) on the GPU: x *= c with the host's bits and the same
// found-inf flag, over random bit patterns (NaNs, infinities) and over finite values, one
// overflow (a finite value times c) and one NaN at the last index.
template <class T> void unscale_matches_host(const std::vector<float>& v, T c) {
  SCOPED_TRACE(std::string(sizeof(T) == 8 ? "double" : "float") + " c " + std::to_string(static_cast<double>(c)));
  const int64_t n = static_cast<int64_t>(v.size());
  std::vector<T> host(v.begin(), v.end());
  const bool host_found = scale_find_non_finite(host.data(), c, n);
  use_device(Device::cuda);
  Buffer<T> dev = zeros<T>(n);
  for (int64_t i = 0; i < n; ++i) dev[i] = static_cast<T>(v[i]);
  const bool dev_found = scale_find_non_finite(dev.data(), c, n);
  use_device(Device::cpu);
  EXPECT_EQ(dev_found, host_found);
  EXPECT_EQ(bits_differ(host, dev, v), 0);
}

TEST(GpuOps, UnscaleFlagsNonFiniteAsTheHostDoes) {
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "no GPU: " << why;
  std::vector<float> bits = random_bit_patterns(100000, 0x2545f491u);
  std::vector<float> finite;
  for (float f : bits) finite.push_back(std::isfinite(f) ? std::fmod(f, 1e4f) : 0.5f);
  std::vector<float> last_nan = finite;
  last_nan.back() = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> overflow = finite;
  overflow[4242] = 3e38f;
  for (const auto* v : {&bits, &finite, &last_nan, &overflow}) {
    unscale_matches_host<float>(*v, 1.0f / 65536.0f);
    unscale_matches_host<float>(*v, 4.0f);
    unscale_matches_host<double>(*v, 1.0 / 3.0);
  }
  std::vector<float> h = finite;  // the flag itself: none in finite values, one at the end, one by overflow
  EXPECT_FALSE(scale_find_non_finite(h.data(), 1.0f / 65536.0f, static_cast<int64_t>(h.size())));
  h = last_nan;
  EXPECT_TRUE(scale_find_non_finite(h.data(), 1.0f, static_cast<int64_t>(h.size())));
  h = overflow;
  EXPECT_TRUE(scale_find_non_finite(h.data(), 4.0f, static_cast<int64_t>(h.size())));
}

// The saturated-softmax floor's reductions (ops/elementwise.h max_abs, sum_sq_over) on the GPU: the
// largest |x| exactly the host's (a NaN passed over), the sum of squares within 1e-12 (its chunks are
// summed in another order), for sizes around the chunk of 1024.
TEST(GpuOps, LogitReductionsMatchTheHost) {
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "no GPU: " << why;
  std::vector<float> all;
  for (float f : random_bit_patterns(5000, 0x1b873593u)) all.push_back(std::isfinite(f) ? std::fmod(f, 64.0f) : 1.0f);
  all[4000] = -77.5f;                                  // the largest |x|, negative
  all[17] = std::numeric_limits<float>::quiet_NaN();  // passed over, as the host's loop does
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1024}, int64_t{1025}, int64_t{5000}}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<float> host(all.begin(), all.begin() + n);
    std::vector<float> finite = host;
    if (n > 17) finite[17] = 0.25f;
    const double want_max = max_abs(host.data(), n), want_sq = sum_sq_over(finite.data(), n, 0.125);
    use_device(Device::cuda);
    Buffer<float> dev = zeros<float>(n), dev_finite = zeros<float>(n);
    for (int64_t i = 0; i < n; ++i) {
      dev[i] = host[static_cast<size_t>(i)];
      dev_finite[i] = finite[static_cast<size_t>(i)];
    }
    const double got_max = max_abs(dev.data(), n), got_sq = sum_sq_over(dev_finite.data(), n, 0.125);
    use_device(Device::cpu);
    EXPECT_EQ(got_max, want_max);
    EXPECT_NEAR(got_sq, want_sq, 1e-12 * want_sq);
    if (n == 5000) {
      EXPECT_EQ(want_max, 77.5);
    }
  }
}

// The same invalid index the CPU refuses is refused on the GPU, with the CPU's message.
TEST(GpuOps, InvalidIndicesThrowTheCpuError) {
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "no GPU: " << why;
  for (const auto& bad : test::bad_index_cases()) {
    std::string msg[2];
    for (int d = 0; d < 2; ++d) {
      use_device(d == 0 ? Device::cpu : Device::cuda);
      try {
        bad.run();
      } catch (const Error& e) {
        msg[d] = e.what();
      }
    }
    use_device(Device::cpu);
    EXPECT_FALSE(msg[0].empty()) << bad.name << ": the CPU did not throw";
    EXPECT_EQ(msg[1], msg[0]) << bad.name;
  }
}

// Prints (and with PARITY_GPU_OPS_TABLE writes) the worst error of every op, per dtype.
TEST(GpuOps, ZZErrorTable) {
  if (worst_table().empty()) GTEST_SKIP() << "no GPU op ran";
  const char* path = std::getenv("PARITY_GPU_OPS_TABLE");
  std::string text = "op dtype max_normwise_rel max_abs\n";
  for (const auto& [k, w] : worst_table()) {
    char line[160];
    std::snprintf(line, sizeof line, "%s %.3e %.3e\n", k.c_str(), w.rel, w.abs);
    text += line;
  }
  std::fputs(text.c_str(), stdout);
  if (path != nullptr) std::ofstream(path) << text;
  EXPECT_GT(worst_table().size(), 3 * test::op_cases().size() - 1);  // every case ran in every policy
}

}  // namespace
}  // namespace parity
