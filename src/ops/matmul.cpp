#include "ops/matmul.h"

#include <algorithm>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#if PARITY_HAVE_CUDA
#include "kernels/kernels.h"
#endif

#if defined(__x86_64__) || defined(__i386__)
#define PARITY_MATMUL_HAVE_AVX2 1  // an avx2 kernel is compiled; it runs where the CPU has avx2
#endif

// How this stays bitwise equal to the naive triple loop at any vector width:
// every output element is one accumulator that starts at 0 and receives, in index order
// of the summed dimension, `acc = acc + (a * b)` as a separate multiply and add.
// Vectorising over the OUTPUT column only runs many such accumulators side by side, so
// each one sees the same operations in the same order. Blocking the summed dimension
// stores the partial accumulator in the output and reloads it: a stored T is the same T.
// The build has -ffp-contract=off and the avx2 kernel has no FMA, so nothing is fused;
// tests/ops/matmul_test.cpp compares both kernels against naive loops bitwise.
//
// Structure (one routine for all three products): C = A · B with strided operands; B is
// packed into column panels of kNr columns, blocked by kKc along the summed dimension;
// a micro-tile keeps kMr x kNr accumulators in vector registers while it walks q in order.

namespace parity {

namespace {

// Element (i, j) of a strided operand is ptr[i * s0 + j * s1].
template <class T> struct View {
  const T* ptr;
  int64_t s0, s1;
  T at(int64_t i, int64_t j) const { return ptr[i * s0 + j * s1]; }
};

// Vectors of B bytes through GCC's vector extension: an operation on a vector is the same
// IEEE operation on each lane. B = 32 in the avx2 kernel, 16 (SSE2) in the baseline one.
// `Vec<T, B>::type` is unaligned and may alias T, so it loads and stores straight from T arrays.
template <class T, int B> struct Vec {
  typedef T type __attribute__((vector_size(B), aligned(sizeof(T)), may_alias));
};
template <class T, int B> constexpr int64_t kLanes = B / static_cast<int64_t>(sizeof(T));

// Micro-tile: kMr rows of the output by kNv vectors (kNr columns): 12 accumulators + 3
// panel vectors + 1 broadcast = the 16 vector registers of x86-64.
constexpr int64_t kMr = 4;
constexpr int64_t kNv = 3;
template <class T, int B> constexpr int64_t kNr = kNv * kLanes<T, B>;
// Cache blocks: kKc of the summed dimension (a packed panel kKc x kNr stays in L1),
// kMc rows of A per block (kMc x kKc of A stays in L2).
constexpr int64_t kKc = 256;
constexpr int64_t kMc = 64;

// Packs B rows [q0, q0+Q) into panels: panel jp holds columns [jp*nr, (jp+1)*nr) as
// (Q, nr) row-major, columns past M zero-filled. packed (ceil(M/nr), Q, nr).
template <class T, int B>
[[gnu::always_inline]] inline void pack_b(View<T> b, int64_t q0, int64_t Q, int64_t M, T* packed) {
  constexpr int64_t nr = kNr<T, B>;
  for (int64_t j0 = 0, jp = 0; j0 < M; j0 += nr, ++jp) {
    T* panel = packed + jp * Q * nr;  // (Q, nr)
    const int64_t cols = std::min(nr, M - j0);
    for (int64_t q = 0; q < Q; ++q) {
      for (int64_t c = 0; c < cols; ++c) panel[q * nr + c] = b.at(q0 + q, j0 + c);
      for (int64_t c = cols; c < nr; ++c) panel[q * nr + c] = T(0);
    }
  }
}

// R rows x nr columns of C (row stride ldc; only `cols` columns are real):
// acc = (first ? 0 : C), then for q in [q0, q0+Q) in order: acc[r][c] = acc[r][c] + A(r0+r, q) * panel[q-q0][c].
template <class T, int B, int R>
[[gnu::always_inline]] inline void micro_tile(View<T> a, int64_t r0, int64_t q0, int64_t Q, const T* panel, T* c,
                                              int64_t ldc, int64_t cols, bool first) {
  using V = typename Vec<T, B>::type;
  constexpr int64_t nr = kNr<T, B>, lanes = kLanes<T, B>;
  T tile[R][nr];  // (R, nr): staging for the partial accumulators and the tail columns
  for (int r = 0; r < R; ++r)
    for (int64_t j = 0; j < nr; ++j) tile[r][j] = (first || j >= cols) ? T(0) : c[r * ldc + j];
  V acc[R][kNv];  // fully unrolled below, so the accumulators live in registers
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int64_t v = 0; v < kNv; ++v) acc[r][v] = *reinterpret_cast<const V*>(&tile[r][v * lanes]);
  for (int64_t q = 0; q < Q; ++q) {
    V bq[kNv];
#pragma GCC unroll 8
    for (int64_t v = 0; v < kNv; ++v) bq[v] = *reinterpret_cast<const V*>(panel + q * nr + v * lanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const T av = a.at(r0 + r, q0 + q);
#pragma GCC unroll 8
      for (int64_t v = 0; v < kNv; ++v) acc[r][v] += av * bq[v];  // multiply, then add: no FMA
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int64_t v = 0; v < kNv; ++v) *reinterpret_cast<V*>(&tile[r][v * lanes]) = acc[r][v];
  for (int r = 0; r < R; ++r)
    for (int64_t j = 0; j < cols; ++j) c[r * ldc + j] = tile[r][j];
}

// The last rows < kMr of a row block: micro_tile with R = rows.
template <class T, int B, int R>
[[gnu::always_inline]] inline void tail_tile(int64_t rows, View<T> a, int64_t r0, int64_t q0, int64_t Q,
                                             const T* panel, T* c, int64_t ldc, int64_t cols, bool first) {
  if constexpr (R > 0) {
    if (rows == R) {
      micro_tile<T, B, R>(a, r0, q0, Q, panel, c, ldc, cols, first);
    } else {
      tail_tile<T, B, R - 1>(rows, a, r0, q0, Q, panel, c, ldc, cols, first);
    }
  }
}

// C (N, M) row-major = A (N, Q) · B (Q, M): C[i][j] = sum over q = 0..Q-1 in order, from 0.
// packed: scratch of ceil(M/nr) * min(Q, kKc) * nr elements, nr = kNr<T, B>.
template <class T, int B>
[[gnu::always_inline]] inline void gemm_impl(View<T> a, View<T> b, T* c, int64_t N, int64_t Q, int64_t M,
                                             T* packed) {
  constexpr int64_t nr = kNr<T, B>;
  if (Q == 0) std::fill(c, c + N * M, T(0));
  for (int64_t q0 = 0; q0 < Q; q0 += kKc) {
    const int64_t kc = std::min(kKc, Q - q0);
    const bool first = q0 == 0;
    pack_b<T, B>(b, q0, kc, M, packed);
    for (int64_t i0 = 0; i0 < N; i0 += kMc) {
      const int64_t i1 = std::min(N, i0 + kMc);
      for (int64_t j0 = 0, jp = 0; j0 < M; j0 += nr, ++jp) {
        const T* panel = packed + jp * kc * nr;
        const int64_t cols = std::min(nr, M - j0);
        int64_t r = i0;
        for (; r + kMr <= i1; r += kMr)
          micro_tile<T, B, kMr>(a, r, q0, kc, panel, c + r * M + j0, M, cols, first);
        if (r < i1) tail_tile<T, B, kMr - 1>(i1 - r, a, r, q0, kc, panel, c + r * M + j0, M, cols, first);
      }
    }
  }
}

// Non-template entry points, one per instruction set: the avx2 one runs 4 doubles
// (8 floats) per instruction, the baseline (x86-64 SSE2) one 2 (4); both do the same
// operations on each element. avx2 does not imply FMA, and -ffp-contract=off forbids
// fusing anyway. (Explicit dispatch rather than target_clones, so tests can run both.)
#ifdef PARITY_MATMUL_HAVE_AVX2
__attribute__((target("avx2"))) void gemm_avx2(View<double> a, View<double> b, double* c, int64_t N, int64_t Q,
                                               int64_t M, double* packed) {
  gemm_impl<double, 32>(a, b, c, N, Q, M, packed);
}
__attribute__((target("avx2"))) void gemm_avx2(View<float> a, View<float> b, float* c, int64_t N, int64_t Q,
                                               int64_t M, float* packed) {
  gemm_impl<float, 32>(a, b, c, N, Q, M, packed);
}
#endif
template <class T>
void gemm_baseline(View<T> a, View<T> b, T* c, int64_t N, int64_t Q, int64_t M, T* packed) {
  gemm_impl<T, 16>(a, b, c, N, Q, M, packed);
}

MatmulIsa resolve(MatmulIsa isa) {
  if (isa == MatmulIsa::automatic)
    return matmul_isa_available(MatmulIsa::avx2) ? MatmulIsa::avx2 : MatmulIsa::baseline;
  if (!matmul_isa_available(isa)) throw Error("matmul: instruction set not available on this CPU");
  return isa;
}

// C (N, M) = A · B as above with the given instruction set, allocating the packing scratch.
template <class T>
void gemm(View<T> a, View<T> b, T* c, int64_t N, int64_t Q, int64_t M, MatmulIsa isa) {
  isa = resolve(isa);
  if (N == 0 || M == 0) return;
  const int64_t nr = isa == MatmulIsa::avx2 ? kNr<T, 32> : kNr<T, 16>;
  const int64_t panels = (M + nr - 1) / nr;
  std::vector<T> packed(static_cast<size_t>(panels * std::min(Q, kKc) * nr));
#ifdef PARITY_MATMUL_HAVE_AVX2
  if (isa == MatmulIsa::avx2) return gemm_avx2(a, b, c, N, Q, M, packed.data());
#endif
  gemm_baseline(a, b, c, N, Q, M, packed.data());
}

}  // namespace

bool matmul_isa_available(MatmulIsa isa) {
  switch (isa) {
    case MatmulIsa::automatic:
    case MatmulIsa::baseline: return true;
    case MatmulIsa::avx2:
#ifdef PARITY_MATMUL_HAVE_AVX2
      return __builtin_cpu_supports("avx2");
#else
      return false;
#endif
  }
  return false;
}

// y (n, m) = x (n, k) · w (k, m); y[i][j] = sum over p = 0..k-1 in order, from 0.
template <class T>
void matmul_forward(const T* x, const T* w, T* y, int64_t n, int64_t k, int64_t m, MatmulIsa isa) {
  gemm(View<T>{x, k, 1}, View<T>{w, m, 1}, y, n, k, m, isa);
}
template <class T>
void matmul_forward(const T* x, const T* w, T* y, int64_t n, int64_t k, int64_t m) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::matmul_forward(x, w, y, n, k, m);
#endif
  matmul_forward(x, w, y, n, k, m, MatmulIsa::automatic);
}

// dx (n, k) += P, P[i][p] = sum over j = 0..m-1 in order, from 0, of dy[i][j] * w[p][j].
// dw (k, m) += G, G[p][j] = sum over i = 0..n-1 in order, from 0, of x[i][p] * dy[i][j].
// P and G are computed into scratch and then added, so the result is grad + (sum).
template <class T>
void matmul_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, int64_t n, int64_t k, int64_t m,
                     MatmulIsa isa) {
  if (dx != nullptr && n * k > 0) {
    std::vector<T> prod(static_cast<size_t>(n * k));  // (n, k)
    // A = dy (n, m); B = w^T (m, k): B(j, p) = w[p * m + j].
    gemm(View<T>{dy, m, 1}, View<T>{w, 1, m}, prod.data(), n, m, k, isa);
    for (int64_t e = 0; e < n * k; ++e) dx[e] += prod[e];
  }
  if (dw != nullptr && k * m > 0) {
    std::vector<T> prod(static_cast<size_t>(k * m));  // (k, m)
    // A = x^T (k, n): A(p, i) = x[i * k + p]; B = dy (n, m).
    gemm(View<T>{x, 1, k}, View<T>{dy, m, 1}, prod.data(), k, n, m, isa);
    for (int64_t e = 0; e < k * m; ++e) dw[e] += prod[e];
  }
}
template <class T>
void matmul_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, int64_t n, int64_t k, int64_t m) {
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::matmul_backward(x, w, dy, dx, dw, n, k, m);
#endif
  matmul_backward(x, w, dy, dx, dw, n, k, m, MatmulIsa::automatic);
}

template void matmul_forward<float>(const float*, const float*, float*, int64_t, int64_t, int64_t, MatmulIsa);
template void matmul_forward<double>(const double*, const double*, double*, int64_t, int64_t, int64_t,
                                     MatmulIsa);
template void matmul_backward<float>(const float*, const float*, const float*, float*, float*, int64_t, int64_t,
                                     int64_t, MatmulIsa);
template void matmul_backward<double>(const double*, const double*, const double*, double*, double*, int64_t,
                                      int64_t, int64_t, MatmulIsa);
template void matmul_forward<float>(const float*, const float*, float*, int64_t, int64_t, int64_t);
template void matmul_forward<double>(const double*, const double*, double*, int64_t, int64_t, int64_t);
template void matmul_backward<float>(const float*, const float*, const float*, float*, float*, int64_t, int64_t,
                                     int64_t);
template void matmul_backward<double>(const double*, const double*, const double*, double*, double*, int64_t,
                                      int64_t, int64_t);

}  // namespace parity
