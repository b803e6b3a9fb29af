// matmul on the GPU through cuBLAS (the well-kept library for it). ops/matmul.h's three
// row-major products, written as column-major GEMMs:
//   y  (n, m)  = x · w        ->  y^T  = w^T · x^T       gemm(N, N, m, n, k)
//   dx (n, k) += dy · w^T     ->  dx^T = w · dy^T        gemm(T, N, k, n, m), beta 1
//   dw (k, m) += x^T · dy     ->  dw^T = dy^T · x        gemm(N, T, m, k, n), beta 1
// With alpha 1 and beta 1, cuBLAS adds the product to the gradient once, as the CPU does.
// Pinned: CUBLAS_PEDANTIC_MATH (fp32 never becomes TF32 or any emulation) and atomics not
// allowed, so a product is bitwise the same run to run. cuBLAS sums in its own order (and
// with FMA), so against the CPU reference matmul agrees within the tolerance table, not bitwise.
//
// cuBLAS is loaded on the first GPU matmul (dlopen), not linked: linking it costs every
// parity process ~65 ms of start-up (its libraries' relocations), CPU runs included, and a
// CPU matrix starts ~300 rank processes.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <climits>
#include <mutex>
#include <type_traits>
#include <string>

#include "core/error.h"
#include "kernels/kernels.h"
#include "kernels/runtime.cuh"

namespace parity::cuda {

namespace {

// The cuBLAS entry points parity uses, resolved from the library at first use.
struct Blas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSetAtomicsMode) set_atomics_mode = nullptr;
  decltype(&cublasSetPointerMode_v2) set_pointer_mode = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasDgemm_v2) dgemm = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

const Blas& blas() {
  static Blas b;
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    const std::string lib = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    Dl_info cudart{};
    if (h == nullptr && dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &cudart) != 0 && cudart.dli_fname) {
      const std::string dir = cudart.dli_fname;  // the toolkit's lib directory: cuBLAS sits beside cudart
      h = dlopen((dir.substr(0, dir.rfind('/') + 1) + lib).c_str(), RTLD_NOW | RTLD_LOCAL);
    }
    if (h == nullptr) {
      error = "cannot load " + lib + ": " + dlerror();
      return;
    }
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (fn == nullptr && error.empty()) error = lib + " has no " + name;
    };
    get(b.create, "cublasCreate_v2");
    get(b.set_math_mode, "cublasSetMathMode");
    get(b.set_atomics_mode, "cublasSetAtomicsMode");
    get(b.set_pointer_mode, "cublasSetPointerMode_v2");
    get(b.set_stream, "cublasSetStream_v2");
    get(b.sgemm, "cublasSgemm_v2");
    get(b.dgemm, "cublasDgemm_v2");
    get(b.status_string, "cublasGetStatusString");
  });
  if (!error.empty()) throw Error("matmul on the GPU: " + error);
  return b;
}

void blas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLAS ") + what + ": " + blas().status_string(s));
}

cublasHandle_t handle() {
  thread_local cublasHandle_t h = [] {
    const Blas& b = blas();
    cublasHandle_t made = nullptr;
    blas_check(b.create(&made), "cublasCreate");
    blas_check(b.set_math_mode(made, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
    blas_check(b.set_atomics_mode(made, CUBLAS_ATOMICS_NOT_ALLOWED), "cublasSetAtomicsMode");
    blas_check(b.set_pointer_mode(made, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");
    blas_check(b.set_stream(made, stream()), "cublasSetStream");
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
  blas_check(blas().sgemm(handle(), ta, tb, dim(rows), dim(cols), dim(inner), &one, a, dim(lda), b, dim(ldb), &beta,
                         c, dim(ldc)),
             "sgemm");
}
void gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t rows, int64_t cols, int64_t inner, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  const double one = 1.0;
  blas_check(blas().dgemm(handle(), ta, tb, dim(rows), dim(cols), dim(inner), &one, a, dim(lda), b, dim(ldb), &beta,
                         c, dim(ldc)),
             "dgemm");
}

}  // namespace

void load_blas() { (void)blas(); }

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
