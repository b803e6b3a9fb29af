#include "model/params.h"

#include "ops/elementwise.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/philox.h"

namespace parity {

std::string_view family_name(Family f) {
  switch (f) {
    case Family::embedding: return "embedding";
    case Family::attention: return "attention";
    case Family::layernorm: return "layernorm";
    case Family::router: return "router";
    case Family::routed_experts: return "routed_experts";
    case Family::shared_experts: return "shared_experts";
    case Family::dense_mlp: return "dense_mlp";
    case Family::head: return "head";
  }
  return "?";
}

namespace {

// A norm's weight, and its bias under LayerNorm (RMSNorm has none); both in the layernorm family.
void add_norm(std::vector<ParamSpec>& out, const ModelConfig& c, const std::string& prefix) {
  out.push_back({prefix + ".weight", {c.dim}, Family::layernorm, 0.0, 1.0});
  if (c.norm == NormKind::layernorm) out.push_back({prefix + ".bias", {c.dim}, Family::layernorm, 0.0, 0.0});
}

// w1, w3 (in, hidden) and w2 (hidden, in), with an optional leading expert dimension.
void add_ffn(std::vector<ParamSpec>& out, const std::string& prefix, Shape lead, int64_t D, int64_t F, Family fam,
             double out_std) {
  auto shape = [&](int64_t a, int64_t b) {
    Shape s = lead;
    s.push_back(a);
    s.push_back(b);
    return s;
  };
  out.push_back({prefix + ".w1", shape(D, F), fam, 0.02});
  out.push_back({prefix + ".w3", shape(D, F), fam, 0.02});
  out.push_back({prefix + ".w2", shape(F, D), fam, out_std});
}

}  // namespace

std::vector<ParamSpec> param_specs(const ModelConfig& c) {
  const int64_t D = c.dim;
  const double out_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers));
  std::vector<ParamSpec> out;
  out.push_back({"embed.weight", {c.vocab, D}, Family::embedding, 0.02});
  out.back().also_head = c.tie_embeddings;
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l);
    add_norm(out, c, p + ".ln1");
    out.push_back({p + ".attn.wq", {D, D}, Family::attention, 0.02});
    for (const char* w : {"wk", "wv"})  // kv_heads key / value heads of head_dim columns (model.kv_heads)
      out.push_back({p + ".attn." + w, {D, c.kv_dim()}, Family::attention, 0.02, 0.0, false, c.kv()});
    out.push_back({p + ".attn.wo", {D, D}, Family::attention, out_std});
    if (c.qk_norm)  // per-head RMSNorm weights (Dh), shared by the heads: norm weights (parallel/param_plan.cpp)
      for (const char* w : {"q_norm", "k_norm"})
        out.push_back({p + ".attn." + w + ".weight", {c.head_dim()}, Family::layernorm, 0.0, 1.0});
    add_norm(out, c, p + ".ln2");
    if (!c.is_moe(l)) {
      add_ffn(out, p + ".mlp", {}, D, c.mlp_hidden, Family::dense_mlp, out_std);
      continue;
    }
    out.push_back({p + ".moe.router.gate", {D, c.experts}, Family::router, 0.02});
    add_ffn(out, p + ".moe.experts", {c.experts}, D, c.expert_hidden, Family::routed_experts, out_std);
    if (c.shared_experts > 0) add_ffn(out, p + ".moe.shared", {}, D, c.shared_hidden, Family::shared_experts, out_std);
  }
  add_norm(out, c, "final_ln");
  if (!c.tie_embeddings) out.push_back({"lm_head.weight", {D, c.vocab}, Family::head, 0.02});
  return out;
}

namespace {
// Every element is a pure function of (seed, name, index), so a large tensor is drawn by several
// threads, each a contiguous part, with the same bits as one thread: the large model's 240M
// parameters took 23 s in one thread (a GPU run's set-up); small tensors stay on this thread.
constexpr int64_t kThreadedInitElements = int64_t{1} << 20;
template <class Fn> void for_parts(int64_t n, const Fn& fn) {
  // asked only for a tensor that could be split: hardware_concurrency reads a file of /sys at each call, and a
  // rank's set-up drew every one of its small shards through here (0.5% of a W = 8 run's CPU, issue 43)
  if (n < 2 * kThreadedInitElements) return fn(int64_t{0}, n);
  const int64_t hw = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
  const int64_t parts = std::min<int64_t>({hw, 16, std::max<int64_t>(1, n / kThreadedInitElements)});
  if (parts <= 1) return fn(int64_t{0}, n);
  std::vector<std::thread> threads;
  for (int64_t p = 1; p < parts; ++p) threads.emplace_back(fn, n * p / parts, n * (p + 1) / parts);
  fn(int64_t{0}, n / parts);
  for (auto& t : threads) t.join();
}
// Values drawn on the host; on cuda into host memory first, then copied to the device in one
// transfer (writing managed memory from the host moves each page to the host and back).
template <class T, class Draw> void fill_drawn(T* out, int64_t n, const Draw& draw) {
  std::vector<T> staged(on_cuda() ? static_cast<size_t>(n) : 0);
  T* dst = on_cuda() ? staged.data() : out;
  for_parts(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = draw(i);
  });
  if (on_cuda()) copy_values(out, staged.data(), n);
}
}  // namespace

template <class T>
void init_elements(const ParamSpec& spec, uint64_t seed, const int64_t* index, int64_t n, T* out) {
  const uint64_t key = name_hash(spec.name);
  fill_drawn(out, n, [&](int64_t i) {
    const auto g = static_cast<uint64_t>(index[i]);
    const double v = spec.init_std > 0.0 ? spec.init_std * philox_normal_keyed(seed, key, g) : spec.init_value;
    return static_cast<T>(v);
  });
}

template <class T>
void init_range(const ParamSpec& spec, uint64_t seed, int64_t begin, int64_t end, T* out) {
  const uint64_t key = name_hash(spec.name);
  fill_drawn(out, end - begin, [&](int64_t i) {
    const auto g = static_cast<uint64_t>(begin + i);
    const double v = spec.init_std > 0.0 ? spec.init_std * philox_normal_keyed(seed, key, g) : spec.init_value;
    return static_cast<T>(v);
  });
}

template <class T>
ParamSet<T> ParamSet<T>::zeros(const std::vector<ParamSpec>& specs) {
  ParamSet<T> s;
  s.specs = specs;
  for (const auto& sp : specs) s.tensors.emplace_back(sp.shape);
  return s;
}

template <class T>
ParamSet<T> ParamSet<T>::initialised(const std::vector<ParamSpec>& specs, uint64_t seed) {
  ParamSet<T> s = zeros(specs);
  for (size_t i = 0; i < specs.size(); ++i) init_range(specs[i], seed, 0, s.tensors[i].numel(), s.tensors[i].ptr());
  return s;
}

template <class T>
int64_t ParamSet<T>::index(std::string_view name) const {
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name == name) return static_cast<int64_t>(i);
  throw Error("no parameter named '" + std::string(name) + "'");
}

template <class T>
void ParamSet<T>::zero() {
  for (auto& t : tensors) zero_values(t.ptr(), t.numel());  // on the GPU in a cuda run
}

#define PARITY_INSTANTIATE(T)                                                                       \
  template void init_elements<T>(const ParamSpec&, uint64_t, const int64_t*, int64_t, T*);          \
  template void init_range<T>(const ParamSpec&, uint64_t, int64_t, int64_t, T*);                    \
  template struct ParamSet<T>;
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

int64_t fp8_weight_blocks(const ParamSpec& p) {
  const auto ends = [&](std::string_view tail) { return std::string_view(p.name).ends_with(tail); };
  const bool linear = ends(".attn.wq") || ends(".attn.wk") || ends(".attn.wv") || ends(".attn.wo") ||
                      ends(".w1") || ends(".w2") || ends(".w3");  // mlp, shared and routed experts
  if (!linear) return 0;
  return p.family == Family::routed_experts ? p.shape[0] : 1;
}

std::vector<Fp8Module> fp8_modules(const ModelConfig& c) {
  std::vector<Fp8Module> out;
  for (const ParamSpec& p : param_specs(c)) {
    const int64_t blocks = fp8_weight_blocks(p);
    if (blocks == 0) continue;
    const std::string prefix = p.name.substr(0, p.name.rfind('.'));
    if (out.empty() || out.back().prefix != prefix) out.push_back({prefix, blocks, {}});
    out.back().weights.push_back(p.name);
  }
  return out;
}

Fp8Delayed fp8_delayed_state(const ModelConfig& c) {
  if (!c.fp8 || !c.fp8_delayed) return {};
  return Fp8Delayed(fp8_modules(c), c.amax_history_len, c.amax_most_recent);
}

}  // namespace parity
