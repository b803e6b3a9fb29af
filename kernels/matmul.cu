// matmul on the GPU through cuBLAS (the well-kept library for it). ops/matmul.h's three
// row-major products, written as column-major GEMMs:
//   y  (n, m)  = x · w        ->  y^T  = w^T · x^T       gemm(N, N, m, n, k)
//   dx (n, k) += dy · w^T     ->  dx^T = w · dy^T        gemm(T, N, k, n, m), beta 1
//   dw (k, m) += x^T · dy     ->  dw^T = dy^T · x        gemm(N, T, m, k, n), beta 1
// With alpha 1 and beta 1, cuBLAS adds the product to the gradient once, as the CPU does.
// Pinned: CUBLAS_PEDANTIC_MATH (fp32 never becomes TF32 or any emulation) and atomics not
// allowed, so a product is bitwise the same run to run. cuBLAS sums in its own order (and
// with FMA), so against the CPU reference matmul agrees within the tolerance table, not bitwise.
#include <cublas_v2.h>

#include <climits>
#include <string>

#include "core/error.h"
#include "kernels/kernels.h"
#include "kernels/runtime.cuh"

namespace parity::cuda {

namespace {

void blas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLAS ") + what + ": " + cublasGetStatusString(s));
}

cublasHandle_t handle() {
  thread_local cublasHandle_t h = [] {
    cublasHandle_t made = nullptr;
    blas_check(cublasCreate(&made), "cublasCreate");
    blas_check(cublasSetMathMode(made, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
    blas_check(cublasSetAtomicsMode(made, CUBLAS_ATOMICS_NOT_ALLOWED), "cublasSetAtomicsMode");
    blas_check(cublasSetPointerMode(made, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");
    blas_check(cublasSetStream(made, stream()), "cublasSetStream");
    return made;
  }();
  return h;
}

int dim(int64_t v) {
  if (v > INT_MAX) throw Error("matmul: dimension " + std::to_string(v) + " exceeds cuBLAS's int range");
  return static_cast<int>(v);
}

// C (col-major, rows x cols, ld) = op(A) · op(B) + beta C.
void gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t rows, int64_t cols, int64_t inner, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const float one = 1.0f;
  blas_check(cublasSgemm(handle(), ta, tb, dim(rows), dim(cols), dim(inner), &one, a, dim(lda), b, dim(ldb), &beta,
                         c, dim(ldc)),
             "sgemm");
}
void gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t rows, int64_t cols, int64_t inner, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  const double one = 1.0;
  blas_check(cublasDgemm(handle(), ta, tb, dim(rows), dim(cols), dim(inner), &one, a, dim(lda), b, dim(ldb), &beta,
                         c, dim(ldc)),
             "dgemm");
}

}  // namespace

template <class T> void matmul_forward(const T* x, const T* w, T* y, int64_t n, int64_t k, int64_t m) {
  if (n == 0 || m == 0) return;
  Stage st;
  T* dy = st.out(y, n * m);
  if (k == 0) {
    check(cudaMemsetAsync(dy, 0, static_cast<size_t>(n * m) * sizeof(T), stream()), "matmul_forward (k = 0)");
  } else {
    const T* dx = st.in(x, n * k);
    const T* dw = st.in(w, k * m);
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, dw, m, dx, k, T(0), dy, m);
  }
  st.launched("matmul_forward");
  st.finish();
}

template <class T>
void matmul_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, int64_t n, int64_t k, int64_t m) {
  // An empty sum adds 0: nothing to do when the summed dimension is 0 or an output is empty.
  const bool do_dx = dx && n > 0 && k > 0 && m > 0;
  const bool do_dw = dw && k > 0 && m > 0 && n > 0;
  if (!do_dx && !do_dw) return;
  Stage st;
  const T* ddy = st.in(dy, n * m);
  if (do_dx) {
    const T* dwt = st.in(w, k * m);
    T* ddx = st.out(dx, n * k);
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, k, n, m, dwt, m, ddy, m, T(1), ddx, k);
  }
  if (do_dw) {
    const T* dxin = st.in(x, n * k);
    T* ddw = st.out(dw, k * m);
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, m, k, n, ddy, m, dxin, k, T(1), ddw, m);
  }
  st.launched("matmul_backward");
  st.finish();
}

template void matmul_forward<float>(const float*, const float*, float*, int64_t, int64_t, int64_t);
template void matmul_forward<double>(const double*, const double*, double*, int64_t, int64_t, int64_t);
template void matmul_backward<float>(const float*, const float*, const float*, float*, float*, int64_t, int64_t,
                                     int64_t);
template void matmul_backward<double>(const double*, const double*, const double*, double*, double*, int64_t,
                                      int64_t, int64_t);

}  // namespace parity::cuda
