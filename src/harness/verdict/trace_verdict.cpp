#include "harness/verdict/trace_verdict.h"

#include <cmath>
#include <cstdio>

#include "model/batch_split.h"
#include "model/params.h"

namespace parity::trace_verdict {

void Sums::add(double x, double ref, int64_t index) {
  // fp16: an overflow to the same infinity, or a NaN it made, on both sides is equal (a step both skip)
  const double d = x == ref || (std::isnan(x) && std::isnan(ref)) ? 0.0 : x - ref;
  diff2 += d * d, ref2 += ref * ref, xr += x * ref, count += 1;
  const double a = std::isnan(d) ? INFINITY : std::abs(d);
  if (a > worst) worst = a, worst_index = static_cast<double>(index), worst_got = x, worst_ref = ref;
}

void Sums::pack(std::vector<double>& out) const {
  out.insert(out.end(), {diff2, ref2, xr, count, worst, worst_index, worst_got, worst_ref});
}

Sums Sums::unpack(const double* p) { return {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]}; }

namespace {

std::string num(const char* fmt, double x) {
  char buf[48];
  std::snprintf(buf, sizeof buf, fmt, x);
  return buf;
}

// The world's sums of one key, and the rank that holds its worst element.
struct Folded {
  Sums sum;
  int worst_rank = -1;
  double rel() const { return sum.ref2 > 0 ? std::sqrt(sum.diff2 / sum.ref2) : std::sqrt(sum.diff2); }
  double scale() const { return sum.ref2 > 0 ? sum.xr / sum.ref2 : NAN; }
};

Folded fold(const std::vector<double>& all, size_t k, size_t n_keys, int world) {
  Folded f;
  for (int r = 0; r < world; ++r) {
    const Sums s = Sums::unpack(all.data() + (static_cast<size_t>(r) * n_keys + k) * Sums::kWidth);
    f.sum.diff2 += s.diff2, f.sum.ref2 += s.ref2, f.sum.xr += s.xr, f.sum.count += s.count;
    if (s.worst > f.sum.worst)
      f.sum.worst = s.worst, f.sum.worst_index = s.worst_index, f.sum.worst_got = s.worst_got,
      f.sum.worst_ref = s.worst_ref, f.worst_rank = r;
  }
  return f;
}

// A column in words: an MoE block's router and scores name the expert, route_w and experts the
// token's routing slot (experts: the slot's output column too).
std::string column(trace::Site s, int64_t col, const StepShape& shape) {
  using trace::Site;
  if (s == Site::router || s == Site::scores) return "expert " + std::to_string(col);
  if (s == Site::route_w) return "slot " + std::to_string(col);
  if (s == Site::experts)
    return "slot " + std::to_string(col / shape.dim) + ", column " + std::to_string(col % shape.dim);
  return "column " + std::to_string(col);
}

// "micro-batch 0, rank 3 (tp 1): ... at sequence 2 position 5 column 3 (1.25 against 0.625)"
std::string where(const Folded& f, const trace::Key& key, const StepShape& shape,
                  const std::vector<std::string>& coords) {
  const auto idx = static_cast<int64_t>(f.sum.worst_index);
  const int64_t C = shape.cols(key.site), token = idx / C, g = token / shape.seq;
  int64_t mb = 0;
  while (mb + 1 < shape.microbatches && micro_batch_sequences(shape.batch, shape.microbatches, mb).end <= g) ++mb;
  const std::string rank = "rank " + std::to_string(f.worst_rank) +
                           (static_cast<size_t>(f.worst_rank) < coords.size() && !coords[f.worst_rank].empty()
                                ? " (" + coords[f.worst_rank] + ")"
                                : "");
  return "micro-batch " + std::to_string(mb) + ", " + rank + ", element [sequence " + std::to_string(g) +
         ", position " + std::to_string(token % shape.seq) + ", " + column(key.site, idx % C, shape) + "] " +
         num("%.6g", f.sum.worst_got) + " against " + num("%.6g", f.sum.worst_ref);
}

}  // namespace

Result first_diverging(const std::vector<trace::Key>& keys, const std::vector<double>& all, int world,
                       const std::vector<double>& bounds, const std::vector<std::string>& coords,
                       const StepShape& shape, const LayoutDegrees& degrees) {
  Result out;
  std::vector<std::string> unmapped;
  double worst_ok = 0;  // the largest error / bound of the keys within their bounds
  for (size_t k = 0; k < keys.size(); ++k) {
    const Folded f = fold(all, k, keys.size(), world);
    const std::string name = trace::key_name(keys[k], shape.layers);
    if (f.sum.count < shape.elements(keys[k].site)) {  // no rank placed every element: never a pass
      unmapped.push_back(name + " (" + num("%.0f", f.sum.count) + " of " +
                         num("%.0f", shape.elements(keys[k].site)) + " elements traced)");
      continue;
    }
    const double rel = f.rel();
    if (!(rel <= bounds[k])) {
      if (out.found) continue;
      const double scale = f.scale();
      out.found = true;
      out.root = name + ", " + where(f, keys[k], shape, coords) + ": error " + num("%.3g", rel) + " over its bound " +
                 num("%.3g", bounds[k]) + ", scale " + (std::isnan(scale) ? "-" : num("%.6f", scale)) + " -> " +
                 factor_meaning(scale, degrees);
      out.lines.push_back("  first diverging: " + out.root);
      continue;
    }
    if (!out.found) worst_ok = std::max(worst_ok, bounds[k] > 0 ? rel / bounds[k] : 0.0);
  }
  out.lines.insert(out.lines.begin(), "trace: " + std::to_string(keys.size()) +
                                          " traced tensors in data-flow order (forward, then the gradients "
                                          "arriving at each); before the first diverging, the largest error was " +
                                          num("%.2g", worst_ok) + " of its bound");
  if (!out.found) out.lines.push_back("  no traced tensor over its bound");
  for (const std::string& u : unmapped) out.lines.push_back("  not mapped: " + u);
  return out;
}

StepShape step_shape(const ModelConfig& c) {
  return {c.batch, c.microbatches, c.seq, c.dim, c.vocab, c.layers, c.moe_layers(), c.experts, c.top_k, c.kv_dim()};
}

std::vector<trace::Key> trace_keys(const ModelConfig& c) {
  return trace::flow_keys(c.layers, {c.moe_layers() > 0 ? c.dense_layers : -1, c.shared_experts > 0});
}

std::vector<trace::Key> grad_sources(std::string_view param, const ModelConfig& c) {
  using trace::Dir, trace::Site;
  const auto key = [](Site s, int64_t l) { return trace::Key{s, l, Dir::bwd}; };
  const auto starts = [&](std::string_view p) { return param.substr(0, p.size()) == p; };
  if (param == "embed.weight")
    return c.tie_embeddings ? std::vector{key(Site::logits, c.layers), key(Site::embed, -1)}
                            : std::vector{key(Site::embed, -1)};
  if (param == "lm_head.weight") return {key(Site::logits, c.layers)};
  if (starts("final_ln.")) return {key(Site::final_ln, c.layers)};
  if (!starts("layers.")) return {};
  const std::string_view rest = param.substr(7);
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return {};
  int64_t l = 0;
  for (char ch : rest.substr(0, dot)) {
    if (ch < '0' || ch > '9') return {};
    l = l * 10 + (ch - '0');
  }
  const std::string_view tail = rest.substr(dot + 1);
  const auto is = [&](std::string_view p) { return tail.substr(0, p.size()) == p; };
  if (is("ln1.")) return {key(Site::ln1, l)};
  if (is("ln2.")) return {key(Site::ln2, l)};
  if (is("attn.wq") || is("attn.q_norm.")) return {key(Site::q, l)};
  if (is("attn.wk") || is("attn.k_norm.")) return {key(Site::k, l)};
  if (is("attn.wv")) return {key(Site::v, l)};
  if (is("attn.wo")) return {key(Site::h_mid, l)};  // attn_out's gradient is h_mid's
  if (is("moe.router.")) return {key(Site::router, l)};
  if (is("moe.experts.")) return {key(Site::experts, l)};
  if (is("mlp.") || is("moe.shared.")) return {key(Site::h_out, l)};  // ffn_out's gradient is h_out's
  return {};
}

std::vector<std::pair<std::string, std::string>> reduced_after(
    const ModelConfig& c, const std::vector<std::pair<std::string, std::string>>& plan) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const ParamSpec& p : param_specs(c)) {
    const std::vector<trace::Key> from = grad_sources(p.name, c);
    if (from.empty()) continue;
    std::string ops;
    for (size_t i = 0; i < from.size(); ++i)
      ops += (i == 0 ? "" : " and ") + ("`" + trace::key_name(from[i], c.layers) + "`");
    std::string words = ops + (from.size() > 1 ? " (within their bounds)" : " (within its bound)") +
                        ", in the partial sums of " + p.name + "'s gradient computed from " +
                        (from.size() > 1 ? "them" : "it") + " or in their reduction";
    for (const auto& [name, how] : plan)
      if (name == p.name) words += " (the plan: " + how + ")";
    out.emplace_back(p.name, std::move(words));
  }
  return out;
}

std::string tensor_name(const trace::Key& k, int64_t layers) {
  const bool in_layer = k.layer >= 0 && k.layer < layers;
  return std::string(k.dir == trace::Dir::fwd ? "trace.fwd." : "trace.bwd.") +
         (in_layer ? "layers." + std::to_string(k.layer) + "." : std::string()) + trace::site_name(k.site);
}

}  // namespace parity::trace_verdict
