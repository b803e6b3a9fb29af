// GPU twin of src/ops/attention.cpp: causal attention of one sequence, each head owning
// columns [h*Dh, (h+1)*Dh) of the (S, W = H*Dh) buffers. Every sum runs in one thread in the
// CPU's order (scale = 1 / sqrt(Dh) is computed on the host exactly as the CPU does):
//   forward:  one thread per (h, i) row of probs: scores (d order), max, exp, sum (j order),
//             divide, zeros for j > i; then one thread per (i, c) of out: sum_{j<=i} in j order.
//   backward: one thread per (h, i) row of dS (softmax_grad_head: dP in d order, rowdot in j
//             order) into a device scratch (H, S, S); one thread per (i, c) of dq (j from 0);
//             one thread per (j, c) of dk and dv (i from j), each added to its output once.
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

// probs (H, S, S): row i of head h, one thread per (h, i). q, k (S, W).
template <class T>
__global__ void attn_probs_kernel(const T* q, const T* k, int64_t S, int64_t H, int64_t Dh, T scale, T* probs) {
  const int64_t W = H * Dh;
  for (int64_t r = thread_index(); r < H * S; r += thread_count()) {
    const int64_t h = r / S, i = r % S, c0 = h * Dh;
    T* pr = probs + r * S;  // (S), row i of head h
    T mx = T(0);
    for (int64_t j = 0; j <= i; ++j) {
      T dot = T(0);
      for (int64_t d = 0; d < Dh; ++d) dot += q[i * W + c0 + d] * k[j * W + c0 + d];
      pr[j] = dot * scale;
      mx = (j == 0 || pr[j] > mx) ? pr[j] : mx;
    }
    T sum = T(0);
    for (int64_t j = 0; j <= i; ++j) {
      pr[j] = dev_exp(pr[j] - mx);
      sum += pr[j];
    }
    for (int64_t j = 0; j <= i; ++j) pr[j] = pr[j] / sum;
    for (int64_t j = i + 1; j < S; ++j) pr[j] = T(0);
  }
}

// out (S, W)[i][c] = sum_{j <= i} probs[h][i][j] * v[j][c] (j order), h = c / Dh.
template <class T>
__global__ void attn_out_kernel(const T* probs, const T* v, int64_t S, int64_t H, int64_t Dh, T* out) {
  const int64_t W = H * Dh;
  for (int64_t e = thread_index(); e < S * W; e += thread_count()) {
    const int64_t i = e / W, c = e % W, h = c / Dh;
    const T* pr = probs + (h * S + i) * S;  // (S)
    T acc = T(0);
    for (int64_t j = 0; j <= i; ++j) acc += pr[j] * v[j * W + c];
    out[e] = acc;
  }
}

// dS (H, S, S), row i of head h per thread: dP[j] = sum_d dout[i][d] * v[j][d] (d order),
// rowdot = sum_{j<=i} P[i][j] * dP[j] (j order), dS[i][j] = P[i][j] * (dP[j] - rowdot), 0 for j > i.
template <class T>
__global__ void attn_dscores_kernel(const T* probs, const T* v, const T* dout, int64_t S, int64_t H, int64_t Dh,
                                    T* dS) {
  const int64_t W = H * Dh;
  for (int64_t r = thread_index(); r < H * S; r += thread_count()) {
    const int64_t h = r / S, i = r % S, c0 = h * Dh;
    const T* pr = probs + r * S;  // (S)
    T* dsr = dS + r * S;          // (S)
    T rowdot = T(0);
    for (int64_t j = 0; j <= i; ++j) {
      T dp = T(0);
      for (int64_t d = 0; d < Dh; ++d) dp += dout[i * W + c0 + d] * v[j * W + c0 + d];
      dsr[j] = dp;
      rowdot += pr[j] * dp;
    }
    for (int64_t j = 0; j <= i; ++j) dsr[j] = pr[j] * (dsr[j] - rowdot);
    for (int64_t j = i + 1; j < S; ++j) dsr[j] = T(0);
  }
}

// dq (S, W)[i][c] += (sum_{j <= i} dS[h][i][j] * k[j][c]) * scale (j order from 0).
template <class T>
__global__ void attn_dq_kernel(const T* dS, const T* k, int64_t S, int64_t H, int64_t Dh, T scale, T* dq) {
  const int64_t W = H * Dh;
  for (int64_t e = thread_index(); e < S * W; e += thread_count()) {
    const int64_t i = e / W, c = e % W, h = c / Dh;
    const T* dsr = dS + (h * S + i) * S;  // (S)
    T acc = T(0);
    for (int64_t j = 0; j <= i; ++j) acc += dsr[j] * k[j * W + c];
    dq[e] += acc * scale;
  }
}

// dk (S, W)[j][c] += (sum_{i >= j} dS[h][i][j] * q[i][c]) * scale;
// dv (S, W)[j][c] += sum_{i >= j} P[h][i][j] * dout[i][c]   (i order from j).
template <class T>
__global__ void attn_dkdv_kernel(const T* q, const T* probs, const T* dout, const T* dS, int64_t S, int64_t H,
                                 int64_t Dh, T scale, T* dk, T* dv) {
  const int64_t W = H * Dh;
  for (int64_t e = thread_index(); e < S * W; e += thread_count()) {
    const int64_t j = e / W, c = e % W, h = c / Dh;
    const T* P = probs + h * S * S;  // (S, S)
    const T* dSh = dS + h * S * S;   // (S, S)
    T acc_k = T(0), acc_v = T(0);
    for (int64_t i = j; i < S; ++i) {
      acc_k += dSh[i * S + j] * q[i * W + c];
      acc_v += P[i * S + j] * dout[i * W + c];
    }
    dk[e] += acc_k * scale;
    dv[e] += acc_v;
  }
}

}  // namespace

// q, k, v, out (S, H*Dh), probs (H, S, S).
template <class T>
void attention_forward(const T* q, const T* k, const T* v, int64_t S, int64_t H, int64_t Dh, T* out, T* probs) {
  if (S <= 0 || H <= 0) return;  // Dh = 0 still writes probs (uniform over j <= i)
  const int64_t SW = S * H * Dh;
  Stage st;
  const T* d_q = stage_in(st, q, SW);
  const T* d_k = stage_in(st, k, SW);
  const T* d_v = stage_in(st, v, SW);
  T* d_out = stage_out(st, out, SW);
  T* d_probs = st.out(probs, H * S * S);
  attn_probs_kernel<<<blocks_for(H * S), kThreads, 0, stream()>>>(d_q, d_k, S, H, Dh, attention_scale<T>(Dh),
                                                                  d_probs);
  st.launched("attention_forward");
  if (SW > 0) {
    attn_out_kernel<<<blocks_for(SW), kThreads, 0, stream()>>>(d_probs, d_v, S, H, Dh, d_out);
    st.launched("attention_forward");
  }
  st.finish();
}

// q, k, v, dout, dq, dk, dv (S, H*Dh), probs (H, S, S); dq, dk, dv +=.
template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* probs, const T* dout, int64_t S, int64_t H,
                        int64_t Dh, T* dq, T* dk, T* dv) {
  const int64_t SW = S * H * Dh;
  if (SW <= 0) return;  // no gradient element to write
  const T scale = attention_scale<T>(Dh);
  Stage st;
  const T* d_q = st.in(q, SW);
  const T* d_k = st.in(k, SW);
  const T* d_v = st.in(v, SW);
  const T* d_probs = st.in(probs, H * S * S);
  const T* d_dout = st.in(dout, SW);
  T* d_dq = st.out(dq, SW);
  T* d_dk = st.out(dk, SW);
  T* d_dv = st.out(dv, SW);
  T* dS = st.scratch<T>(H * S * S);  // (H, S, S)
  attn_dscores_kernel<<<blocks_for(H * S), kThreads, 0, stream()>>>(d_probs, d_v, d_dout, S, H, Dh, dS);
  st.launched("attention_backward");
  attn_dq_kernel<<<blocks_for(SW), kThreads, 0, stream()>>>(dS, d_k, S, H, Dh, scale, d_dq);
  st.launched("attention_backward");
  attn_dkdv_kernel<<<blocks_for(SW), kThreads, 0, stream()>>>(d_q, d_probs, d_dout, dS, S, H, Dh, scale, d_dk,
                                                               d_dv);
  st.launched("attention_backward");
  st.finish();
}

template void attention_forward<float>(const float*, const float*, const float*, int64_t, int64_t, int64_t, float*,
                                       float*);
template void attention_forward<double>(const double*, const double*, const double*, int64_t, int64_t, int64_t,
                                        double*, double*);
template void attention_backward<float>(const float*, const float*, const float*, const float*, const float*,
                                        int64_t, int64_t, int64_t, float*, float*, float*);
template void attention_backward<double>(const double*, const double*, const double*, const double*,
                                         const double*, int64_t, int64_t, int64_t, double*, double*, double*);

}  // namespace parity::cuda
