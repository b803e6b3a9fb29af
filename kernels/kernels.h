// The CUDA side of every op in src/ops: the same functions, the same arguments, the same
// summation orders. src/ops calls these when the process runs on the GPU (core/device.h);
// nothing else does. Built only with PARITY_HAVE_CUDA.
//
// Pointers may be device, managed or plain host memory: each entry point stages host
// buffers through device memory (kernels/runtime.cuh, Stage) and returns when the result
// is in the caller's buffer. The model's own buffers are managed memory (core/buffer.h),
// so in a GPU run nothing is staged and tensors stay on the device.
//
// Determinism: one thread computes one output element with the loop of the CPU reference,
// in the same order (no atomics, no tree reductions whose shape depends on the launch), and
// the CUDA build has -fmad=false. So every result is bitwise the same run to run, and
// +, -, *, /, sqrt give the CPU's bits; exp, log and pow are CUDA's (within 2 ulp), and
// matmul is cuBLAS (pedantic math: no TF32, deterministic by construction).
#pragma once
#include <cstdint>

namespace parity::cuda {

// matmul.cu (cuBLAS, loaded on first use): load_blas() loads it now and throws Error when
// the library or one of its entry points is missing (needs no GPU).
void load_blas();
// y (n, m) = x (n, k) · w (k, m); dx (n, k) += dy · w^T; dw (k, m) += x^T · dy.
template <class T> void matmul_forward(const T* x, const T* w, T* y, int64_t n, int64_t k, int64_t m);
template <class T>
void matmul_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, int64_t n, int64_t k, int64_t m);

// attention.cu: causal attention of a block of query rows of ONE sequence (ops/attention.h's
// attention_forward_rows): q, out (Sq, H*Dh) at global positions [q0, q0 + Sq), k, v
// (Sk, G*Dh) with G key / value heads (G divides H; G = H multi-head), probs (H, Sq, Sk); the
// whole sequence is q0 = 0, Sq = Sk = S.
template <class T>
void attention_forward_rows(const T* q, const T* k, const T* v, int64_t Sq, int64_t q0, int64_t Sk, int64_t H,
                            int64_t G, int64_t Dh, T* out, T* probs);
template <class T>
void attention_backward_rows(const T* q, const T* k, const T* v, const T* probs, const T* dout, int64_t Sq, int64_t q0,
                             int64_t Sk, int64_t H, int64_t G, int64_t Dh, T* dq, T* dk, T* dv);

// layernorm.cu
template <class T>
void layernorm_forward(const T* x, const T* w, const T* b, int64_t n, int64_t D, T* y, T* mean, T* rstd);
template <class T>
void layernorm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, int64_t n, int64_t D,
                        T* dx, T* dw, T* db);

// rmsnorm.cu
template <class T> void rmsnorm_forward(const T* x, const T* w, int64_t n, int64_t D, T* y, T* rstd);
template <class T>
void rmsnorm_backward(const T* x, const T* w, const T* rstd, const T* dy, int64_t n, int64_t D, T* dx, T* dw);

// rope.cu (ops/rope.h): x, y (n, H*Dh), cos, sin (n, Dh/2) the host's table; y may be x.
template <class T> void rope_forward(const T* x, const T* cos, const T* sin, int64_t n, int64_t H, int64_t Dh, T* y);
template <class T>
void rope_backward(const T* dy, const T* cos, const T* sin, int64_t n, int64_t H, int64_t Dh, T* dx);

// swiglu.cu
template <class T> void swiglu_forward(const T* a, const T* b, int64_t n, T* h);
template <class T> void swiglu_backward(const T* a, const T* b, const T* dh, int64_t n, T* da, T* db);

// router.cu; score: 0 softmax, 1 sigmoid (ops/router.h's Score).
template <class T> void router_scores_forward(const T* logits, int64_t n, int64_t E, int score, T* s);
template <class T> void router_scores_backward(const T* s, const T* ds, int64_t n, int64_t E, int score, T* dlogits);
template <class T>
void topk_select(const T* s, const T* bias, int64_t n, int64_t E, int64_t K, int64_t* chosen);
template <class T>
void route_weights_forward(const T* s, const int64_t* chosen, int64_t n, int64_t E, int64_t K, bool norm,
                           double scale, T* w);
template <class T>
void route_weights_backward(const T* s, const int64_t* chosen, int64_t n, int64_t E, int64_t K, bool norm,
                            double scale, const T* dw, T* ds);

// permute.cu. src (rows): grouped row r holds assignment src[r] = token*K + slot; the
// arguments are ops/permute.h's Permutation unpacked (rows = n*K).
template <class T> void permute_forward(const T* x, int64_t D, const int64_t* src, int64_t rows, int64_t K, T* xg);
template <class T>
void permute_backward(const T* dxg, int64_t D, const int64_t* src, int64_t rows, int64_t K, T* dx);
template <class T> void unpermute_forward(const T* yg, int64_t D, const int64_t* src, int64_t rows, T* y);
template <class T> void unpermute_backward(const T* dy, int64_t D, const int64_t* src, int64_t rows, T* dyg);
template <class T> void combine_forward(const T* y, const T* w, int64_t n, int64_t K, int64_t D, T* out);
template <class T>
void combine_backward(const T* y, const T* w, const T* dout, int64_t n, int64_t K, int64_t D, T* dy, T* dw);

// embedding.cu
template <class T>
void embedding_forward(const int64_t* ids, int64_t n, const T* table, int64_t V, int64_t D, T* out);
template <class T>
void embedding_backward(const int64_t* ids, int64_t n, const T* dout, int64_t V, int64_t D, T* dtable);

// cross_entropy.cu
template <class T>
T cross_entropy_forward(const T* logits, const int64_t* targets, int64_t n, int64_t V, T* losses);
template <class T>
void cross_entropy_backward(const T* logits, const int64_t* targets, int64_t n, int64_t V, T scale, T* dlogits);

// aux_loss.cu
template <class T> T aux_loss_forward(const T* s, const int64_t* chosen, int64_t S, int64_t E, int64_t K);
template <class T>
void aux_loss_backward(const T* s, const int64_t* chosen, int64_t S, int64_t E, int64_t K, T dloss, T* ds);

// optimizer.cu: optim/optimizer.cpp's step_buffer, one element per thread.
// sgd: first = (t == 1). adam/adamw: bc1 = 1 - beta1^t, bc2 = 1 - beta2^t (computed by the caller).
template <class T> void sgd_step(T* w, const T* g, T* m, int64_t n, T lr, T wd, T mu, bool first);
template <class T>
void adam_step(T* w, const T* g, T* m, T* v, int64_t n, T lr, T wd, T b1, T b2, T eps, T bc1, T bc2,
               bool decoupled);
// Sum of x[i]^2 in double. Fixed blocking (chunks of kSumChunk summed in order, then the
// chunk sums in order), so the bits depend only on n, not on the launch.
inline constexpr int64_t kSumChunk = 1024;
template <class T> double sum_of_squares(const T* x, int64_t n);
// max |x[i]| in double (a NaN passed over, 0 for n = 0), and sum of (x[i] / d)^2 in double, with
// sum_of_squares' blocking: ops/elementwise.h's max_abs and sum_sq_over.
template <class T> double max_abs(const T* x, int64_t n);
template <class T> double sum_sq_over(const T* x, int64_t n, double d);

// elementwise.cu: ops/elementwise.h.
template <class T> void add_into(T* a, const T* b, int64_t n);
template <class T> void copy_values(T* dst, const T* src, int64_t n);
template <class T> void scale_values(T* x, T c, int64_t n);
// x (n) *= c; whether any result is an inf or a NaN (fp16's unscale and found-inf flag).
template <class T> bool scale_find_non_finite(T* x, T c, int64_t n);
template <class T> void transpose_into(const T* x, int64_t rows, int64_t cols, T* out);
// x (n) rounded in place to bf16 (fp16 false) or IEEE binary16 (fp16 true) with core/precision.h's
// round_bf16 / round_fp16 bits: ops/elementwise.h's storage_point on the GPU.
template <class T> void round_storage(bool fp16, T* x, int64_t n);

}  // namespace parity::cuda
