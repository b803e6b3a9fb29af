// GPU twin of src/ops/swiglu.cpp (swiglu_forward, swiglu_backward): one thread per element,
// the CPU's expression for that element. No reductions; with -fmad=false the only bits that
// may differ from the CPU are those of exp inside the stable sigmoid.
#include <cstdint>

#include "kernels/kernels.h"
#include "kernels/device_math.cuh"
#include "kernels/runtime.cuh"

namespace parity::cuda {
namespace {

// h[i] = (a[i] * sigmoid(a[i])) * b[i].  a, b, h (n).
template <class T>
__global__ void swiglu_forward_kernel(const T* a, const T* b, int64_t n, T* h) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) h[i] = (a[i] * stable_sigmoid(a[i])) * b[i];
}

// sg = sigmoid(a); da[i] += (dh[i] * b[i]) * (sg * (1 + a * (1 - sg))); db[i] += dh[i] * (a * sg).
// a, b, dh, da, db (n).
template <class T>
__global__ void swiglu_backward_kernel(const T* a, const T* b, const T* dh, int64_t n, T* da, T* db) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    const T sg = stable_sigmoid(a[i]);
    const T silu = a[i] * sg;
    const T dsilu = sg * (T(1) + a[i] * (T(1) - sg));
    da[i] += (dh[i] * b[i]) * dsilu;
    db[i] += dh[i] * silu;
  }
}

}  // namespace

template <class T>
void swiglu_forward(const T* a, const T* b, int64_t n, T* h) {
  if (n <= 0) return;
  Stage st;
  const T* da = st.in(a, n);
  const T* db = st.in(b, n);
  T* dh = st.out(h, n);
  swiglu_forward_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(da, db, n, dh);
  st.launched("swiglu_forward");
  st.finish();
}

template <class T>
void swiglu_backward(const T* a, const T* b, const T* dh, int64_t n, T* da, T* db) {
  if (n <= 0) return;
  Stage st;
  const T* d_a = st.in(a, n);
  const T* d_b = st.in(b, n);
  const T* d_dh = st.in(dh, n);
  T* d_da = st.out(da, n);
  T* d_db = st.out(db, n);
  swiglu_backward_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(d_a, d_b, d_dh, n, d_da, d_db);
  st.launched("swiglu_backward");
  st.finish();
}

template void swiglu_forward<float>(const float*, const float*, int64_t, float*);
template void swiglu_forward<double>(const double*, const double*, int64_t, double*);
template void swiglu_backward<float>(const float*, const float*, const float*, int64_t, float*, float*);
template void swiglu_backward<double>(const double*, const double*, const double*, int64_t, double*, double*);

}  // namespace parity::cuda
