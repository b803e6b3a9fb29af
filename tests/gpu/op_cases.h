// The op cases of gpu_ops_test.cpp: one per op (forward and backward separately), each a
// function template that draws its inputs from OpCtx, calls the op on whatever device the
// process runs on, and registers its outputs. Gradients start from random values, so the
// accumulate (+=) contract is checked too.
#pragma once
#include <algorithm>
#include <deque>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "common/random.h"
#include "core/buffer.h"
#include "core/device.h"
#include "model/config.h"
#include "ops/attention.h"
#include "ops/aux_loss.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "ops/matmul.h"
#include "ops/permute.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/router.h"
#include "ops/swiglu.h"
#include "optim/optimizer.h"

namespace parity::test {

// (name, values as double, exact: must be bitwise equal to the CPU's)
using Outputs = std::vector<std::tuple<std::string, std::vector<double>, bool>>;

template <class T> class OpCtx {
 public:
  OpCtx(uint64_t seed, int64_t size, Device alloc) : s(size), rng_(seed), alloc_(alloc) {}
  const int64_t s;  // the size knob: 0, 1, odd, large

  // Inputs: uniform in [lo, hi).
  T* in(int64_t n, double lo = -1, double hi = 1) { return fill(make<T>(n), lo, hi); }
  // Outputs the op overwrites (start at 0) and gradients it accumulates into (start random).
  T* out(const std::string& name, int64_t n) { return reg(name, make<T>(n)); }
  T* grad(const std::string& name, int64_t n) { return reg(name, fill(make<T>(n), -1, 1)); }
  int64_t* ids(int64_t n, int64_t bound) {
    int64_t* p = make<int64_t>(n);
    for (int64_t i = 0; i < n; ++i) p[i] = bound > 0 ? rng_.index(bound) : 0;
    return p;
  }
  // Per row K distinct experts of E: (row + 3k) mod E when 3 and E are coprime, else row + k.
  int64_t* choices(int64_t n, int64_t E, int64_t K) {
    int64_t* p = make<int64_t>(n * K);
    const int64_t step = E % 3 == 0 ? 1 : 3;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < K; ++k) p[i * K + k] = (i + step * k) % E;
    return p;
  }
  int64_t* iout(const std::string& name, int64_t n) {
    int64_t* p = make<int64_t>(n);
    outs_.push_back([=, this] {
      std::vector<double> v(p, p + n);
      return std::make_tuple(name, v, true);
    });
    return p;
  }
  void scalar(const std::string& name, double v) {
    outs_.push_back([=] { return std::make_tuple(name, std::vector<double>{v}, false); });
  }
  Outputs collect() {
    Outputs o;
    for (auto& f : outs_) o.push_back(f());
    return o;
  }

 private:
  // A Buffer allocated under the case's memory device (managed on cuda, host on cpu).
  template <class U> U* make(int64_t n) {
    const Device prev = current_device();
    use_device(alloc_);
    auto& b = store<U>().emplace_back(parity::zeros<U>(n));
    use_device(prev);
    return b.data();
  }
  template <class U> std::deque<Buffer<U>>& store() {
    if constexpr (std::is_same_v<U, int64_t>)
      return ibufs_;
    else
      return bufs_;
  }
  T* fill(T* p, double lo, double hi) {
    // fill on the host; values rounded to T first, so both devices see the same inputs
    const int64_t n = static_cast<int64_t>(bufs_.back().size());
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(rng_.uniform(lo, hi));
    return p;
  }
  T* reg(const std::string& name, T* p) {
    const int64_t n = static_cast<int64_t>(bufs_.back().size());
    outs_.push_back([=] { return std::make_tuple(name, std::vector<double>(p, p + n), false); });
    return p;
  }
  Rng rng_;
  Device alloc_;
  std::deque<Buffer<T>> bufs_;
  std::deque<Buffer<int64_t>> ibufs_;
  std::vector<std::function<std::tuple<std::string, std::vector<double>, bool>()>> outs_;
};

// ---- the cases (dimensions scale with c.s; every one of them is 0 when s is 0) ----
template <class T> void matmul_fwd(OpCtx<T>& c) {
  const int64_t n = c.s, k = c.s + 2, m = c.s + 1;
  const T *x = c.in(n * k), *w = c.in(k * m);
  matmul_forward(x, w, c.out("y", n * m), n, k, m);
}
template <class T> void matmul_bwd(OpCtx<T>& c) {
  const int64_t n = c.s + 1, k = c.s, m = c.s + 2;
  const T *x = c.in(n * k), *w = c.in(k * m), *dy = c.in(n * m);
  matmul_backward(x, w, dy, c.grad("dx", n * k), c.grad("dw", k * m), n, k, m);
}
template <class T> void attention_fwd(OpCtx<T>& c) {
  const int64_t S = c.s, H = 2, Dh = c.s % 4 + 1, W = H * Dh;
  const T *q = c.in(S * W), *k = c.in(S * W), *v = c.in(S * W);
  attention_forward(q, k, v, S, H, Dh, c.out("out", S * W), c.out("probs", H * S * S));
}
template <class T> void attention_bwd(OpCtx<T>& c) {
  const int64_t S = c.s, H = 2, Dh = c.s % 4 + 1, W = H * Dh;
  const T *q = c.in(S * W), *k = c.in(S * W), *v = c.in(S * W), *dout = c.in(S * W);
  T* out = c.out("out", S * W);
  T* probs = c.out("probs", H * S * S);
  attention_forward(q, k, v, S, H, Dh, out, probs);
  attention_backward(q, k, v, probs, dout, S, H, Dh, c.grad("dq", S * W), c.grad("dk", S * W), c.grad("dv", S * W));
}
// Context parallel's block of query rows: the last Sq = S - q0 of S positions.
template <class T> void attention_rows_fwd(OpCtx<T>& c) {
  const int64_t S = c.s + 1, q0 = c.s / 2, Sq = S - q0, H = 2, Dh = c.s % 4 + 1, W = H * Dh;
  const T *q = c.in(Sq * W), *k = c.in(S * W), *v = c.in(S * W);
  attention_forward_rows(q, k, v, Sq, q0, S, H, Dh, c.out("out", Sq * W), c.out("probs", H * Sq * S));
}
template <class T> void attention_rows_bwd(OpCtx<T>& c) {
  const int64_t S = c.s + 1, q0 = c.s / 2, Sq = S - q0, H = 2, Dh = c.s % 4 + 1, W = H * Dh;
  const T *q = c.in(Sq * W), *k = c.in(S * W), *v = c.in(S * W), *dout = c.in(Sq * W);
  T* out = c.out("out", Sq * W);
  T* probs = c.out("probs", H * Sq * S);
  attention_forward_rows(q, k, v, Sq, q0, S, H, Dh, out, probs);
  attention_backward_rows(q, k, v, probs, dout, Sq, q0, S, H, Dh, c.grad("dq", Sq * W), c.grad("dk", S * W),
                          c.grad("dv", S * W));
}
// Grouped-query attention (model.kv_heads): 4 query heads over 2 key / value heads, a block of
// query rows as context parallel runs it (the whole sequence at c.s = 0 is q0 = 0).
template <class T> void attention_gqa_fwd(OpCtx<T>& c) {
  const int64_t S = c.s + 1, q0 = c.s / 2, Sq = S - q0, Dh = c.s % 4 + 1, W = 4 * Dh, Wk = 2 * Dh;
  const AttnHeads hd{4, 2, Dh};
  const T *q = c.in(Sq * W), *k = c.in(S * Wk), *v = c.in(S * Wk);
  attention_forward_rows(q, k, v, Sq, q0, S, hd, c.out("out", Sq * W), c.out("probs", 4 * Sq * S));
}
template <class T> void attention_gqa_bwd(OpCtx<T>& c) {
  const int64_t S = c.s + 1, q0 = c.s / 2, Sq = S - q0, Dh = c.s % 4 + 1, W = 4 * Dh, Wk = 2 * Dh;
  const AttnHeads hd{4, 2, Dh};
  const T *q = c.in(Sq * W), *k = c.in(S * Wk), *v = c.in(S * Wk), *dout = c.in(Sq * W);
  T* out = c.out("out", Sq * W);
  T* probs = c.out("probs", 4 * Sq * S);
  attention_forward_rows(q, k, v, Sq, q0, S, hd, out, probs);
  attention_backward_rows(q, k, v, probs, dout, Sq, q0, S, hd, c.grad("dq", Sq * W), c.grad("dk", S * Wk),
                          c.grad("dv", S * Wk));
}
template <class T> void layernorm_fwd(OpCtx<T>& c) {
  const int64_t n = c.s, D = c.s + 3;
  const T *x = c.in(n * D), *w = c.in(D), *b = c.in(D);
  layernorm_forward(x, w, b, n, D, c.out("y", n * D), c.out("mean", n), c.out("rstd", n));
}
template <class T> void layernorm_bwd(OpCtx<T>& c) {
  const int64_t n = c.s, D = c.s + 3;
  const T *x = c.in(n * D), *w = c.in(D), *b = c.in(D), *dy = c.in(n * D);
  T *y = c.out("y", n * D), *mean = c.out("mean", n), *rstd = c.out("rstd", n);
  layernorm_forward(x, w, b, n, D, y, mean, rstd);
  layernorm_backward(x, w, mean, rstd, dy, n, D, c.grad("dx", n * D), c.grad("dw", D), c.grad("db", D));
}
template <class T> void rmsnorm_fwd(OpCtx<T>& c) {
  const int64_t n = c.s, D = c.s + 3;
  const T *x = c.in(n * D), *w = c.in(D);
  rmsnorm_forward(x, w, n, D, c.out("y", n * D), c.out("rstd", n));
}
template <class T> void rmsnorm_bwd(OpCtx<T>& c) {
  const int64_t n = c.s, D = c.s + 3;
  const T *x = c.in(n * D), *w = c.in(D), *dy = c.in(n * D);
  T *y = c.out("y", n * D), *rstd = c.out("rstd", n);
  rmsnorm_forward(x, w, n, D, y, rstd);
  rmsnorm_backward(x, w, rstd, dy, n, D, c.grad("dx", n * D), c.grad("dw", D));
}
// rope: the table is the host's (ops/rope.h), read by both sides; positions 0, 2, 4, ...
template <class T> void rope_fwd(OpCtx<T>& c) {
  const int64_t n = c.s, H = 2, Dh = 2 * c.s + 2, F = Dh / 2;
  const T* x = c.in(n * H * Dh);
  const auto pos = rope_positions(1, n, 0);
  T *cs = c.out("cos", n * F), *sn = c.out("sin", n * F);
  rope_table(pos.data(), n, Dh, 7.0, cs, sn);
  rope_forward(x, cs, sn, n, H, Dh, c.out("y", n * H * Dh));
}
template <class T> void rope_bwd(OpCtx<T>& c) {
  const int64_t n = c.s, H = 2, Dh = 2 * c.s + 2, F = Dh / 2;
  const T* dy = c.in(n * H * Dh);
  const auto pos = rope_positions(1, n, 3);
  T *cs = c.out("cos", n * F), *sn = c.out("sin", n * F);
  rope_table(pos.data(), n, Dh, 7.0, cs, sn);
  rope_backward(dy, cs, sn, n, H, Dh, c.grad("dx", n * H * Dh));
}
template <class T> void swiglu_fwd(OpCtx<T>& c) {
  const int64_t n = 5 * c.s;
  const T *a = c.in(n, -8, 8), *b = c.in(n);
  swiglu_forward(a, b, n, c.out("h", n));
}
template <class T> void swiglu_bwd(OpCtx<T>& c) {
  const int64_t n = 5 * c.s;
  const T *a = c.in(n, -8, 8), *b = c.in(n), *dh = c.in(n);
  swiglu_backward(a, b, dh, n, c.grad("da", n), c.grad("db", n));
}
template <class T, Score kScore> void scores_fwd(OpCtx<T>& c) {
  const int64_t n = c.s, E = c.s % 7 + 2;
  router_scores_forward(c.in(n * E, -4, 4), n, E, kScore, c.out("s", n * E));
}
template <class T, Score kScore> void scores_bwd(OpCtx<T>& c) {
  const int64_t n = c.s, E = c.s % 7 + 2;
  T* s = c.out("s", n * E);
  router_scores_forward(c.in(n * E, -4, 4), n, E, kScore, s);
  router_scores_backward(s, c.in(n * E), n, E, kScore, c.grad("dlogits", n * E));
}
template <class T> void topk(OpCtx<T>& c) {
  const int64_t n = c.s, E = c.s % 7 + 2, K = std::min<int64_t>(2, E);
  const T *s = c.in(n * E, 0, 1), *bias = c.in(E, -0.1, 0.1);
  topk_select(s, bias, n, E, K, c.iout("chosen", n * K));
  topk_select(s, static_cast<const T*>(nullptr), n, E, K, c.iout("chosen_nobias", n * K));
}
template <class T> void route_fwd(OpCtx<T>& c) {
  const int64_t n = c.s, E = c.s % 7 + 2, K = std::min<int64_t>(2, E);
  const T* s = c.in(n * E, 0.05, 1);
  const int64_t* ch = c.choices(n, E, K);
  route_weights_forward(s, ch, n, E, K, true, 1.5, c.out("w_norm", n * K));
  route_weights_forward(s, ch, n, E, K, false, 2.0, c.out("w", n * K));
}
template <class T> void route_bwd(OpCtx<T>& c) {
  const int64_t n = c.s, E = c.s % 7 + 2, K = std::min<int64_t>(2, E);
  const T *s = c.in(n * E, 0.05, 1), *dw = c.in(n * K);
  const int64_t* ch = c.choices(n, E, K);
  route_weights_backward(s, ch, n, E, K, true, 1.5, dw, c.grad("ds_norm", n * E));
  route_weights_backward(s, ch, n, E, K, false, 2.0, dw, c.grad("ds", n * E));
}
template <class T> void permute_all(OpCtx<T>& c) {
  const int64_t n = c.s, E = c.s % 5 + 3, K = 2, D = c.s % 6 + 1;
  const Permutation p = make_permutation(c.choices(n, E, K), n, E, K);
  permute_forward(c.in(n * D), D, p, c.out("xg", n * K * D));
  permute_backward(c.in(n * K * D), D, p, c.grad("dx", n * D));
  unpermute_forward(c.in(n * K * D), D, p, c.out("y", n * K * D));
  unpermute_backward(c.in(n * K * D), D, p, c.grad("dyg", n * K * D));
}
template <class T> void combine_all(OpCtx<T>& c) {
  const int64_t n = c.s, K = 2, D = c.s % 6 + 1;
  const T *y = c.in(n * K * D), *w = c.in(n * K), *dout = c.in(n * D);
  combine_forward(y, w, n, K, D, c.grad("out", n * D));  // accumulates
  combine_backward(y, w, dout, n, K, D, c.grad("dy", n * K * D), c.grad("dw", n * K));
}
template <class T> void embedding_all(OpCtx<T>& c) {
  const int64_t n = 2 * c.s, V = c.s + 5, D = c.s % 5 + 2;
  const int64_t* ids = c.ids(n, V);  // repeats: the backward is a scatter-add
  embedding_forward(ids, n, c.in(V * D), V, D, c.out("out", n * D));
  embedding_backward(ids, n, c.in(n * D), V, D, c.grad("dtable", V * D));
}
template <class T> void cross_entropy_all(OpCtx<T>& c) {
  const int64_t n = c.s, V = c.s + 4;
  const T* logits = c.in(n * V, -5, 5);
  const int64_t* targets = c.ids(n, V);
  c.scalar("sum", static_cast<double>(cross_entropy_forward(logits, targets, n, V, c.out("losses", n))));
  cross_entropy_backward(logits, targets, n, V, T(0.25), c.grad("dlogits", n * V));
}
template <class T> void aux_loss_all(OpCtx<T>& c) {
  const int64_t S = c.s, E = c.s % 5 + 3, K = 2;
  const T* s = c.in(S * E, 0.05, 1);
  const int64_t* ch = c.choices(S, E, K);
  c.scalar("loss", static_cast<double>(aux_loss_forward(s, ch, S, E, K)));
  aux_loss_backward(s, ch, S, E, K, T(0.7), c.grad("ds", S * E));
}
template <class T, OptimKind kKind> void optimizer_step(OpCtx<T>& c) {
  const int64_t n = 13 * c.s;
  OptimConfig cfg;
  cfg.kind = kKind, cfg.lr = 0.01, cfg.weight_decay = 0.1, cfg.momentum = 0.9;
  Optimizer<T> opt(cfg, {});
  T *w = c.grad("w", n), *m = c.grad("m", n), *v = c.out("v", n);
  const T* g = c.in(n);
  for (int t = 0; t < 2; ++t) {  // two steps: sgd's first-step rule and the moments' update
    opt.begin_step();
    opt.step_buffer(w, g, m, kKind == OptimKind::sgd ? nullptr : v, n);
  }
}
template <class T> void sum_squares(OpCtx<T>& c) {
  const int64_t n = 300 * c.s;  // crosses kSumChunk boundaries at the large size
  c.scalar("sum", sum_of_squares(c.in(n), n));
}
template <class T> void elementwise_all(OpCtx<T>& c) {
  const int64_t rows = c.s, cols = c.s + 3, n = rows * cols;
  T* a = c.grad("a", n);
  add_into(a, c.in(n), n);
  copy_values(c.out("copy", n), c.in(n), n);
  T* x = c.grad("x", n);
  scale_values(x, T(0.375), n);
  zero_values(c.grad("zeroed", n), n);
  transpose_into(c.in(n), rows, cols, c.out("transposed", n));
}

struct OpCase {
  const char* name;
  void (*f32)(OpCtx<float>&);
  void (*f64)(OpCtx<double>&);
};
#define PARITY_CASE(name, ...) OpCase{name, &__VA_ARGS__<float>, &__VA_ARGS__<double>}
#define PARITY_CASE2(name, fn, arg) OpCase{name, &fn<float, arg>, &fn<double, arg>}

inline const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = {
      PARITY_CASE("matmul_forward", matmul_fwd),
      PARITY_CASE("matmul_backward", matmul_bwd),
      PARITY_CASE("attention_forward", attention_fwd),
      PARITY_CASE("attention_backward", attention_bwd),
      PARITY_CASE("attention_rows_forward", attention_rows_fwd),
      PARITY_CASE("attention_rows_backward", attention_rows_bwd),
      PARITY_CASE("attention_gqa_forward", attention_gqa_fwd),
      PARITY_CASE("attention_gqa_backward", attention_gqa_bwd),
      PARITY_CASE("layernorm_forward", layernorm_fwd),
      PARITY_CASE("layernorm_backward", layernorm_bwd),
      PARITY_CASE("rmsnorm_forward", rmsnorm_fwd),
      PARITY_CASE("rmsnorm_backward", rmsnorm_bwd),
      PARITY_CASE("rope_forward", rope_fwd),
      PARITY_CASE("rope_backward", rope_bwd),
      PARITY_CASE("swiglu_forward", swiglu_fwd),
      PARITY_CASE("swiglu_backward", swiglu_bwd),
      PARITY_CASE2("router_softmax_forward", scores_fwd, Score::softmax),
      PARITY_CASE2("router_softmax_backward", scores_bwd, Score::softmax),
      PARITY_CASE2("router_sigmoid_forward", scores_fwd, Score::sigmoid),
      PARITY_CASE2("router_sigmoid_backward", scores_bwd, Score::sigmoid),
      PARITY_CASE("topk_select", topk),
      PARITY_CASE("route_weights_forward", route_fwd),
      PARITY_CASE("route_weights_backward", route_bwd),
      PARITY_CASE("permute_unpermute", permute_all),
      PARITY_CASE("combine", combine_all),
      PARITY_CASE("embedding", embedding_all),
      PARITY_CASE("cross_entropy", cross_entropy_all),
      PARITY_CASE("aux_loss", aux_loss_all),
      PARITY_CASE2("sgd_step", optimizer_step, OptimKind::sgd),
      PARITY_CASE2("adam_step", optimizer_step, OptimKind::adam),
      PARITY_CASE2("adamw_step", optimizer_step, OptimKind::adamw),
      PARITY_CASE("sum_of_squares", sum_squares),
      PARITY_CASE("elementwise", elementwise_all),
  };
  return cases;
}
#undef PARITY_CASE
#undef PARITY_CASE2

// Inputs every device must refuse with the CPU's error.
struct BadIndexCase {
  std::string name;
  std::function<void()> run;
};
inline std::vector<BadIndexCase> bad_index_cases() {
  return {
      {"embedding id >= V",
       [] {
         Buffer<double> table = parity::zeros<double>(6), out = parity::zeros<double>(6);
         Buffer<int64_t> ids = to_buffer(std::vector<int64_t>{0, 3, 1});
         embedding_forward(ids.data(), 3, table.data(), 3, 2, out.data());
       }},
      {"cross_entropy target < 0",
       [] {
         Buffer<double> logits = parity::zeros<double>(8), losses = parity::zeros<double>(2);
         Buffer<int64_t> t = to_buffer(std::vector<int64_t>{1, -1});
         cross_entropy_forward(logits.data(), t.data(), 2, 4, losses.data());
       }},
      {"topk K > E",
       [] {
         Buffer<double> s = parity::zeros<double>(4);
         Buffer<int64_t> ch = parity::zeros<int64_t>(6);
         topk_select(s.data(), static_cast<const double*>(nullptr), 2, 2, 3, ch.data());
       }},
      {"aux_loss expert >= E",
       [] {
         Buffer<double> s = parity::zeros<double>(6);
         Buffer<int64_t> ch = to_buffer(std::vector<int64_t>{0, 5});
         aux_loss_forward(s.data(), ch.data(), 2, 3, 1);
       }},
  };
}

}  // namespace parity::test
