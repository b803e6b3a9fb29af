// GPU twin of src/ops/attention.cpp: causal attention of a block of query rows of one
// sequence (attention_forward_rows: queries at global positions [q0, q0 + Sq), keys and
// values at [0, Sk); q0 = 0, Sq = Sk = S is the whole sequence), each head owning columns
// [h*Dh, (h+1)*Dh) of the (., W = H*Dh) buffers of q, out and reading key / value head
// g = h / (H / G), columns [g*Dh, (g+1)*Dh) of the (., Wk = G*Dh) buffers of k, v (G = H:
// multi-head; model.kv_heads). Every sum runs in one thread in the CPU's
// order (scale = 1 / sqrt(Dh) is computed on the host exactly as the CPU does); gi = q0 + i:
//   forward:  one block per (h, i) row of probs: scores (a thread per j, d order), max, exp,
//             sum (thread 0 alone, j order, j <= gi), divide, zeros for j > gi; then one thread
//             per (i, c) of out: sum_{j<=gi} in j order.
//   backward: one block per (h, i) row of dS (softmax_grad_head: dP a thread per j in d order,
//             rowdot by thread 0 in j order) into a device scratch (H, Sq, Sk); one thread per
//             (i, c) of dq (j from 0);
//             one thread per (j, c) of dk and dv: per query head of the key head's group, in
//             head order, the sum over block rows i with gi >= j (ascending) added once.
// exp is CUDA's (within 2 ulp): probs, and so out and every gradient, are close to, not
// bitwise equal to, the CPU's. Everything else is the CPU's arithmetic with -fmad=false.
#include <cmath>
#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/device_math.cuh"
#include "kernels/runtime.cuh"

namespace parity::cuda {
namespace {

// The CPU's scale, on the host: 1 / sqrt(Dh), or 1 when Dh = 0.
template <class T> T attention_scale(int64_t Dh) { return Dh > 0 ? T(1) / std::sqrt(T(Dh)) : T(1); }

// Rows (h, i) of (H, Sq, Sk) buffers are spread one per block (grid-stride over rows); the
// block's threads split a row's j, and thread 0 does each of the row's sums alone, in j order.
// Every value is computed by the same expression, in the same order, as by one thread per row:
// the bits do not depend on the launch.
__device__ inline int64_t row_first() { return blockIdx.x; }
__device__ inline int64_t row_stride() { return gridDim.x; }
constexpr int kRowThreads = 128;
inline unsigned row_blocks(int64_t rows) {
  constexpr int64_t most = int64_t(1) << 30;
  return static_cast<unsigned>(rows < 1 ? 1 : rows > most ? most : rows);
}

// probs (H, Sq, Sk): row i of head h per block. q (Sq, W), k (Sk, Wk). Thread j: the score
// (d order) times scale; thread 0: the max (j order); thread j: exp(score - max); thread 0:
// their sum (j order); thread j: the division, and the zeros for j > gi.
template <class T>
__global__ void attn_probs_kernel(const T* q, const T* k, int64_t Sq, int64_t q0, int64_t Sk, int64_t H, int64_t G,
                                  int64_t Dh, T scale, T* probs) {
  __shared__ T row_max, row_sum;
  const int64_t W = H * Dh, Wk = G * Dh;
  for (int64_t r = row_first(); r < H * Sq; r += row_stride()) {
    const int64_t h = r / Sq, i = r % Sq, gi = q0 + i, c0 = h * Dh, ck = h / (H / G) * Dh;
    T* pr = probs + r * Sk;  // (Sk), row i of head h
    for (int64_t j = threadIdx.x; j <= gi; j += blockDim.x) {
      T dot = T(0);
      for (int64_t d = 0; d < Dh; ++d) dot += q[i * W + c0 + d] * k[j * Wk + ck + d];
      pr[j] = dot * scale;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      T mx = T(0);
      for (int64_t j = 0; j <= gi; ++j) mx = (j == 0 || pr[j] > mx) ? pr[j] : mx;
      row_max = mx;
    }
    __syncthreads();
    const T mx = row_max;
    for (int64_t j = threadIdx.x; j <= gi; j += blockDim.x) pr[j] = dev_exp(pr[j] - mx);
    __syncthreads();
    if (threadIdx.x == 0) {
      T sum = T(0);
      for (int64_t j = 0; j <= gi; ++j) sum += pr[j];
      row_sum = sum;
    }
    __syncthreads();
    const T sum = row_sum;
    for (int64_t j = threadIdx.x; j <= gi; j += blockDim.x) pr[j] = pr[j] / sum;
    for (int64_t j = gi + 1 + threadIdx.x; j < Sk; j += blockDim.x) pr[j] = T(0);
    __syncthreads();  // row_max and row_sum are the next row's
  }
}

// out (Sq, W)[i][c] = sum_{j <= gi} probs[h][i][j] * v[j][cv] (j order), h = c / Dh, cv the
// same column of h's key / value head.
template <class T>
__global__ void attn_out_kernel(const T* probs, const T* v, int64_t Sq, int64_t q0, int64_t Sk, int64_t H, int64_t G,
                                int64_t Dh, T* out) {
  const int64_t W = H * Dh, Wk = G * Dh;
  for (int64_t e = thread_index(); e < Sq * W; e += thread_count()) {
    const int64_t i = e / W, c = e % W, h = c / Dh, cv = h / (H / G) * Dh + c % Dh;  // v's column
    const T* pr = probs + (h * Sq + i) * Sk;  // (Sk)
    T acc = T(0);
    for (int64_t j = 0; j <= q0 + i; ++j) acc += pr[j] * v[j * Wk + cv];
    out[e] = acc;
  }
}

// dS (H, Sq, Sk), row i of head h per block: thread j: dP[j] = sum_d dout[i][d] * v[j][d]
// (d order); thread 0: rowdot = sum_{j<=gi} P[i][j] * dP[j] (j order); thread j:
// dS[i][j] = P[i][j] * (dP[j] - rowdot), 0 for j > gi.
template <class T>
__global__ void attn_dscores_kernel(const T* probs, const T* v, const T* dout, int64_t Sq, int64_t q0, int64_t Sk,
                                    int64_t H, int64_t G, int64_t Dh, T* dS) {
  __shared__ T row_dot;
  const int64_t W = H * Dh, Wk = G * Dh;
  for (int64_t r = row_first(); r < H * Sq; r += row_stride()) {
    const int64_t h = r / Sq, i = r % Sq, gi = q0 + i, c0 = h * Dh, ck = h / (H / G) * Dh;
    const T* pr = probs + r * Sk;  // (Sk)
    T* dsr = dS + r * Sk;          // (Sk)
    for (int64_t j = threadIdx.x; j <= gi; j += blockDim.x) {
      T dp = T(0);
      for (int64_t d = 0; d < Dh; ++d) dp += dout[i * W + c0 + d] * v[j * Wk + ck + d];
      dsr[j] = dp;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      T rowdot = T(0);
      for (int64_t j = 0; j <= gi; ++j) rowdot += pr[j] * dsr[j];
      row_dot = rowdot;
    }
    __syncthreads();
    const T rowdot = row_dot;
    for (int64_t j = threadIdx.x; j <= gi; j += blockDim.x) dsr[j] = pr[j] * (dsr[j] - rowdot);
    for (int64_t j = gi + 1 + threadIdx.x; j < Sk; j += blockDim.x) dsr[j] = T(0);
    __syncthreads();  // row_dot is the next row's
  }
}

// dq (Sq, W)[i][c] += (sum_{j <= gi} dS[h][i][j] * k[j][ck]) * scale (j order from 0), ck the
// same column of h's key head.
template <class T>
__global__ void attn_dq_kernel(const T* dS, const T* k, int64_t Sq, int64_t q0, int64_t Sk, int64_t H, int64_t G,
                               int64_t Dh, T scale, T* dq) {
  const int64_t W = H * Dh, Wk = G * Dh;
  for (int64_t e = thread_index(); e < Sq * W; e += thread_count()) {
    const int64_t i = e / W, c = e % W, h = c / Dh, ck = h / (H / G) * Dh + c % Dh;  // k's column
    const T* dsr = dS + (h * Sq + i) * Sk;  // (Sk)
    T acc = T(0);
    for (int64_t j = 0; j <= q0 + i; ++j) acc += dsr[j] * k[j * Wk + ck];
    dq[e] += acc * scale;
  }
}

// dk (Sk, Wk)[j][c] += (sum_{i: gi >= j} dS[h][i][j] * q[i][hc]) * scale;
// dv (Sk, Wk)[j][c] += sum_{i: gi >= j} P[h][i][j] * dout[i][hc]   (block rows i ascending),
// once per query head h of key head c / Dh, in head order (hc: the same column of head h).
template <class T>
__global__ void attn_dkdv_kernel(const T* q, const T* probs, const T* dout, const T* dS, int64_t Sq, int64_t q0,
                                 int64_t Sk, int64_t H, int64_t G, int64_t Dh, T scale, T* dk, T* dv) {
  const int64_t W = H * Dh, Wk = G * Dh, group = H / G;
  for (int64_t e = thread_index(); e < Sk * Wk; e += thread_count()) {
    const int64_t j = e / Wk, c = e % Wk, g = c / Dh;
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const int64_t hc = h * Dh + c % Dh;
      const T* P = probs + h * Sq * Sk;  // (Sq, Sk)
      const T* dSh = dS + h * Sq * Sk;   // (Sq, Sk)
      T acc_k = T(0), acc_v = T(0);
      for (int64_t i = j - q0 > 0 ? j - q0 : 0; i < Sq; ++i) {
        acc_k += dSh[i * Sk + j] * q[i * W + hc];
        acc_v += P[i * Sk + j] * dout[i * W + hc];
      }
      dk[e] += acc_k * scale;
      dv[e] += acc_v;
    }
  }
}

}  // namespace

// q, out (Sq, H*Dh); k, v (Sk, G*Dh); probs (H, Sq, Sk).
template <class T>
void attention_forward_rows(const T* q, const T* k, const T* v, int64_t Sq, int64_t q0, int64_t Sk, int64_t H,
                            int64_t G, int64_t Dh, T* out, T* probs) {
  if (Sq <= 0 || H <= 0) return;  // Dh = 0 still writes probs (uniform over j <= gi)
  const int64_t W = H * Dh, Wk = G * Dh;
  Stage st;
  const T* d_q = stage_in(st, q, Sq * W);
  const T* d_k = stage_in(st, k, Sk * Wk);
  const T* d_v = stage_in(st, v, Sk * Wk);
  T* d_out = stage_out(st, out, Sq * W);
  T* d_probs = st.out(probs, H * Sq * Sk);
  attn_probs_kernel<<<row_blocks(H * Sq), kRowThreads, 0, stream()>>>(d_q, d_k, Sq, q0, Sk, H, G, Dh,
                                                                   attention_scale<T>(Dh), d_probs);
  st.launched("attention_forward");
  if (Sq * W > 0) {
    attn_out_kernel<<<blocks_for(Sq * W), kThreads, 0, stream()>>>(d_probs, d_v, Sq, q0, Sk, H, G, Dh, d_out);
    st.launched("attention_forward");
  }
  st.finish();
}

// q, dout, dq (Sq, H*Dh); k, v, dk, dv (Sk, G*Dh); probs (H, Sq, Sk); dq, dk, dv +=.
template <class T>
void attention_backward_rows(const T* q, const T* k, const T* v, const T* probs, const T* dout, int64_t Sq, int64_t q0,
                             int64_t Sk, int64_t H, int64_t G, int64_t Dh, T* dq, T* dk, T* dv) {
  const int64_t W = H * Dh, Wk = G * Dh;
  if (Sq <= 0 || W <= 0) return;  // no gradient element to write
  const T scale = attention_scale<T>(Dh);
  Stage st;
  const T* d_q = st.in(q, Sq * W);
  const T* d_k = st.in(k, Sk * Wk);
  const T* d_v = st.in(v, Sk * Wk);
  const T* d_probs = st.in(probs, H * Sq * Sk);
  const T* d_dout = st.in(dout, Sq * W);
  T* d_dq = st.out(dq, Sq * W);
  T* d_dk = st.out(dk, Sk * Wk);
  T* d_dv = st.out(dv, Sk * Wk);
  T* dS = st.scratch<T>(H * Sq * Sk);  // (H, Sq, Sk)
  attn_dscores_kernel<<<row_blocks(H * Sq), kRowThreads, 0, stream()>>>(d_probs, d_v, d_dout, Sq, q0, Sk, H, G, Dh,
                                                                        dS);
  st.launched("attention_backward");
  attn_dq_kernel<<<blocks_for(Sq * W), kThreads, 0, stream()>>>(dS, d_k, Sq, q0, Sk, H, G, Dh, scale, d_dq);
  st.launched("attention_backward");
  attn_dkdv_kernel<<<blocks_for(Sk * Wk), kThreads, 0, stream()>>>(d_q, d_probs, d_dout, dS, Sq, q0, Sk, H, G, Dh,
                                                                   scale, d_dk, d_dv);
  st.launched("attention_backward");
  st.finish();
}

#define PARITY_INSTANTIATE(T)                                                                                      \
  template void attention_forward_rows<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                          int64_t, T*, T*);                                                       \
  template void attention_backward_rows<T>(const T*, const T*, const T*, const T*, const T*, int64_t, int64_t,       \
                                           int64_t, int64_t, int64_t, int64_t, T*, T*, T*);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity::cuda
