#include "ops/attention.h"

#include "core/precision.h"
#include "ops/elementwise.h"

#include "core/device.h"
#if PARITY_HAVE_CUDA
#include "kernels/kernels.h"
#endif

#include <algorithm>
#include <cmath>
#include <vector>

namespace parity {

// Per head h (columns [h*Dh, (h+1)*Dh) of the (S, H*Dh) buffers), per query row i:
//   score[j] = (sum_d q[i][d] * k[j][d]) * (1 / sqrt(Dh))          for j <= i (d order)
//   probs[h][i][j] = exp(score[j] - max_j score) / (sum_{j<=i} exp(...))   (j order)
//   out[i][d] = sum_{j <= i} probs[h][i][j] * v[j][d]                      (j order)
// probs (H, S, S) has 0 where j > i.
template <class T>
void attention_forward(const T* q, const T* k, const T* v, int64_t S, int64_t H, int64_t Dh, T* out, T* probs) {
  attention_forward_rows(q, k, v, S, 0, S, AttnHeads{H, H, Dh}, out, probs);
}

template <class T>
void attention_forward(const T* q, const T* k, const T* v, int64_t S, AttnHeads hd, T* out, T* probs) {
  attention_forward_rows(q, k, v, S, 0, S, hd, out, probs);
}

template <class T>
void attention_forward_rows(const T* q, const T* k, const T* v, int64_t Sq, int64_t q0, int64_t Sk, int64_t H,
                            int64_t Dh, T* out, T* probs) {
  attention_forward_rows(q, k, v, Sq, q0, Sk, AttnHeads{H, H, Dh}, out, probs);
}

// Query row i sits at global position gi = q0 + i and sees keys j <= gi; query head h reads
// the columns ck = (h / group) * Dh of k and v.
template <class T>
void attention_forward_rows(const T* q, const T* k, const T* v, int64_t Sq, int64_t q0, int64_t Sk, AttnHeads hd,
                            T* out, T* probs) {
  const int64_t H = hd.H, Dh = hd.Dh, W = H * Dh, Wk = hd.G * Dh;  // row strides of q, out and of k, v
#if PARITY_HAVE_CUDA
  if (on_cuda()) {
    cuda::attention_forward_rows(q, k, v, Sq, q0, Sk, H, hd.G, Dh, out, probs);
    storage_point(out, Sq * W);  // the kernel has finished: a storage point (on the device)
    return;
  }
#endif
  const T scale = Dh > 0 ? T(1) / std::sqrt(T(Dh)) : T(1);  // Dh = 0: no columns, probs uniform
  for (int64_t h = 0; h < H; ++h) {
    const int64_t c0 = h * Dh, ck = (h / hd.group()) * Dh;
    for (int64_t i = 0; i < Sq; ++i) {
      const int64_t gi = q0 + i;
      T* pr = probs + (h * Sq + i) * Sk;  // (Sk), row i of head h
      T mx = T(0);
      for (int64_t j = 0; j <= gi; ++j) {
        T dot = T(0);
        for (int64_t d = 0; d < Dh; ++d) dot += q[i * W + c0 + d] * k[j * Wk + ck + d];
        pr[j] = dot * scale;
        mx = (j == 0 || pr[j] > mx) ? pr[j] : mx;
      }
      T sum = T(0);
      for (int64_t j = 0; j <= gi; ++j) {
        pr[j] = std::exp(pr[j] - mx);
        sum += pr[j];
      }
      for (int64_t j = 0; j <= gi; ++j) pr[j] = pr[j] / sum;
      for (int64_t j = gi + 1; j < Sk; ++j) pr[j] = T(0);
      for (int64_t d = 0; d < Dh; ++d) {
        T acc = T(0);
        for (int64_t j = 0; j <= gi; ++j) acc += pr[j] * v[j * Wk + ck + d];
        out[i * W + c0 + d] = acc;
      }
    }
  }
  storage_point(out, Sq * W);  // a storage point (core/precision.h); probs stay in the compute dtype
}

namespace {

// dS (Sq, Sk) of one head: with dP[i][j] = sum_d dout[i][d] * v[j][d] (d order) and
// rowdot_i = sum_{j<=gi} P[i][j] * dP[i][j] (j order), dS[i][j] = P[i][j] * (dP[i][j] - rowdot_i)
// for j <= gi = q0 + i, else 0. P is probs of this head (Sq, Sk); columns c0.. of dout (., W), ck.. of
// v (., Wk).
template <class T>
void softmax_grad_head(const T* P, const T* v, const T* dout, int64_t Sq, int64_t q0, int64_t Sk, int64_t W,
                       int64_t c0, int64_t Wk, int64_t ck, int64_t Dh, T* dS) {
  for (int64_t i = 0; i < Sq; ++i) {
    const int64_t gi = q0 + i;
    T* dsr = dS + i * Sk;  // (Sk)
    T rowdot = T(0);
    for (int64_t j = 0; j <= gi; ++j) {
      T dp = T(0);
      for (int64_t d = 0; d < Dh; ++d) dp += dout[i * W + c0 + d] * v[j * Wk + ck + d];
      dsr[j] = dp;
      rowdot += P[i * Sk + j] * dp;
    }
    for (int64_t j = 0; j <= gi; ++j) dsr[j] = P[i * Sk + j] * (dsr[j] - rowdot);
    for (int64_t j = gi + 1; j < Sk; ++j) dsr[j] = T(0);
  }
}

}  // namespace

template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* probs, const T* dout, int64_t S, int64_t H,
                        int64_t Dh, T* dq, T* dk, T* dv) {
  attention_backward_rows(q, k, v, probs, dout, S, 0, S, AttnHeads{H, H, Dh}, dq, dk, dv);
}

template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* probs, const T* dout, int64_t S, AttnHeads hd,
                        T* dq, T* dk, T* dv) {
  attention_backward_rows(q, k, v, probs, dout, S, 0, S, hd, dq, dk, dv);
}

template <class T>
void attention_backward_rows(const T* q, const T* k, const T* v, const T* probs, const T* dout, int64_t Sq, int64_t q0,
                             int64_t Sk, int64_t H, int64_t Dh, T* dq, T* dk, T* dv) {
  attention_backward_rows(q, k, v, probs, dout, Sq, q0, Sk, AttnHeads{H, H, Dh}, dq, dk, dv);
}

// Per head, with dS as in softmax_grad_head, scale = 1 / sqrt(Dh), gi = q0 + i:
//   dq[i][d] += (sum_{j <= gi} dS[i][j] * k[j][d]) * scale            (j order, from 0)
//   dk[j][d] += (sum_{i: gi >= j} dS[i][j] * q[i][d]) * scale         (i order, ascending)
//   dv[j][d] += sum_{i: gi >= j} P[i][j] * dout[i][d]                 (i order, ascending)
// dk, dv at the head's key / value columns ck: a shared head gets its query heads' sums in h order.
template <class T>
void attention_backward_rows(const T* q, const T* k, const T* v, const T* probs, const T* dout, int64_t Sq, int64_t q0,
                             int64_t Sk, AttnHeads hd, T* dq, T* dk, T* dv) {
  const int64_t H = hd.H, Dh = hd.Dh, W = H * Dh, Wk = hd.G * Dh;
#if PARITY_HAVE_CUDA
  if (on_cuda()) return cuda::attention_backward_rows(q, k, v, probs, dout, Sq, q0, Sk, H, hd.G, Dh, dq, dk, dv);
#endif
  const T scale = Dh > 0 ? T(1) / std::sqrt(T(Dh)) : T(1);  // Dh = 0: no columns, probs uniform
  std::vector<T> dS(static_cast<size_t>(Sq * Sk));  // (Sq, Sk), one head
  for (int64_t h = 0; h < H; ++h) {
    const int64_t c0 = h * Dh, ck = (h / hd.group()) * Dh;
    const T* P = probs + h * Sq * Sk;  // (Sq, Sk)
    softmax_grad_head(P, v, dout, Sq, q0, Sk, W, c0, Wk, ck, Dh, dS.data());
    for (int64_t i = 0; i < Sq; ++i) {
      for (int64_t d = 0; d < Dh; ++d) {
        T acc = T(0);
        for (int64_t j = 0; j <= q0 + i; ++j) acc += dS[i * Sk + j] * k[j * Wk + ck + d];
        dq[i * W + c0 + d] += acc * scale;
      }
    }
    for (int64_t j = 0; j < Sk; ++j) {
      for (int64_t d = 0; d < Dh; ++d) {
        T acc_k = T(0), acc_v = T(0);
        for (int64_t i = std::max<int64_t>(j - q0, 0); i < Sq; ++i) {
          acc_k += dS[i * Sk + j] * q[i * W + c0 + d];
          acc_v += P[i * Sk + j] * dout[i * W + c0 + d];
        }
        dk[j * Wk + ck + d] += acc_k * scale;
        dv[j * Wk + ck + d] += acc_v;
      }
    }
  }
}

template void attention_forward<float>(const float*, const float*, const float*, int64_t, int64_t, int64_t, float*,
                                       float*);
template void attention_forward<double>(const double*, const double*, const double*, int64_t, int64_t, int64_t,
                                        double*, double*);
template void attention_backward<float>(const float*, const float*, const float*, const float*, const float*,
                                        int64_t, int64_t, int64_t, float*, float*, float*);
template void attention_backward<double>(const double*, const double*, const double*, const double*,
                                         const double*, int64_t, int64_t, int64_t, double*, double*, double*);

#define PARITY_INSTANTIATE(T)                                                                                  \
  template void attention_forward<T>(const T*, const T*, const T*, int64_t, AttnHeads, T*, T*);                \
  template void attention_backward<T>(const T*, const T*, const T*, const T*, const T*, int64_t, AttnHeads, T*, \
                                      T*, T*);                                                                 \
  template void attention_forward_rows<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, AttnHeads, T*, \
                                          T*);                                                                   \
  template void attention_backward_rows<T>(const T*, const T*, const T*, const T*, const T*, int64_t, int64_t,    \
                                           int64_t, AttnHeads, T*, T*, T*);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

template void attention_forward_rows<float>(const float*, const float*, const float*, int64_t, int64_t, int64_t,
                                            int64_t, int64_t, float*, float*);
template void attention_forward_rows<double>(const double*, const double*, const double*, int64_t, int64_t, int64_t,
                                             int64_t, int64_t, double*, double*);
template void attention_backward_rows<float>(const float*, const float*, const float*, const float*, const float*,
                                             int64_t, int64_t, int64_t, int64_t, int64_t, float*, float*, float*);
template void attention_backward_rows<double>(const double*, const double*, const double*, const double*,
                                              const double*, int64_t, int64_t, int64_t, int64_t, int64_t, double*,
                                              double*, double*);

}  // namespace parity
