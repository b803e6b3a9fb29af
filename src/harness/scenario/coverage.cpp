// Pairwise coverage: the features of a scenario, the pairs they make, and the check of a
// scenario set (docs/coverage.md).
#include "harness/scenario/coverage.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>

#include "core/precision.h"
#include "mesh/mesh.h"

namespace parity::coverage {

std::string_view mode_name(Mode m) {
  switch (m) {
    case Mode::fsdp: return "fsdp";
    case Mode::hsdp: return "hsdp";
    case Mode::tp: return "tp";
    case Mode::sp: return "sp";
    case Mode::dp2ep: return "dp2ep";
    case Mode::tp2ep: return "tp2ep";
    case Mode::cross_lane: return "cross-lane";
    case Mode::etp: return "etp";
    case Mode::pp: return "pp";
    case Mode::cp: return "cp";
  }
  return "?";
}

const std::vector<Mode>& all_modes() {
  static const std::vector<Mode> modes{Mode::fsdp,  Mode::hsdp,       Mode::tp,  Mode::sp, Mode::dp2ep,
                                       Mode::tp2ep, Mode::cross_lane, Mode::etp, Mode::pp, Mode::cp};
  return modes;
}

std::vector<Mode> modes_of(const LayoutConfig& l) {
  std::vector<Mode> out;
  if (l.world <= 1) return out;
  if (l.dp_shard > 1) out.push_back(Mode::fsdp);
  if (l.dp_replicate > 1) out.push_back(Mode::hsdp);
  if (l.tp > 1) out.push_back(l.sp ? Mode::sp : Mode::tp);
  switch (mesh::folding(mesh::Mesh(l))) {
    case mesh::Folding::none: break;
    case mesh::Folding::dp2ep: out.push_back(Mode::dp2ep); break;
    case mesh::Folding::tp2ep: out.push_back(Mode::tp2ep); break;
    case mesh::Folding::cross_lane: out.push_back(Mode::cross_lane); break;
  }
  if (l.etp > 1) out.push_back(Mode::etp);
  if (l.pp > 1) out.push_back(Mode::pp);
  if (l.cp > 1) out.push_back(Mode::cp);
  std::sort(out.begin(), out.end());
  return out;
}

const std::vector<OptionInfo>& all_options() {
  static const std::vector<OptionInfo> options{
      {Option::shared, "shared", {"off", "on"}, true},
      {Option::aux, "aux", {"off", "on"}, true},
      {Option::bias, "bias", {"off", "on"}, true},
      {Option::microbatches, "microbatches", {"1", ">1"}, false},
      {Option::tied, "tied", {"off", "on"}, false},
      {Option::score, "score", {"softmax", "sigmoid"}, true},
      {Option::top_k, "top_k", {"1", "all", "other"}, true},
      {Option::optim, "optim", {"sgd", "adam", "adamw"}, false},
      {Option::clip, "clip", {"off", "on"}, false},
      {Option::dtype, "precision", {"fp32", "fp64", "bf16"}, false},
      {Option::vocab_uneven, "vocab%tp", {"uneven"}, false},
      {Option::mlp_uneven, "mlp_hidden%tp", {"uneven"}, false},
      {Option::expert_uneven, "expert_hidden%etp", {"uneven"}, true},
      {Option::shared_uneven, "shared_hidden%tp", {"uneven"}, true},
      {Option::order, "order", {"deepspeed"}, true},
      {Option::resume, "resume", {"yes"}, false},
      {Option::weight_decay, "weight_decay", {"off", "on"}, false},
      {Option::route_norm, "route_norm", {"off", "on"}, true},
      {Option::route_scale, "route_scale", {"1", "other"}, true},
      {Option::schedule, "schedule", {"gpipe", "1f1b", "interleaved"}, false},
      {Option::dp_sharding, "dp_sharding", {"ddp", "zero1", "zero2"}, false},
      {Option::norm, "norm", {"layernorm", "rmsnorm"}, false},
      {Option::qk_norm, "qk_norm", {"off", "rmsnorm"}, false},
      {Option::position, "position", {"none", "rope"}, false},
      {Option::cp_order, "cp_order", {"contiguous", "balanced"}, false},
      {Option::kv_heads, "kv_heads", {"heads", "grouped", "replicated"}, false},
  };
  return options;
}

namespace {

// layout.order deepspeed acts only where it puts other ranks into an expert group than
// megatron does (docs/mesh.md: with tp = 1 or dp_shard = 1 the two coincide), read from the
// groups themselves, as sets.
bool deepspeed_differs_uncached(const LayoutConfig& l) {
  LayoutConfig megatron = l;
  megatron.order = RankOrder::megatron;
  const mesh::Mesh a(l), b(megatron);
  for (mesh::GroupKind k : {mesh::GroupKind::ep, mesh::GroupKind::etp, mesh::GroupKind::edp_shard}) {
    std::vector<mesh::Group> ga = a.groups(k), gb = b.groups(k);
    for (auto* gs : {&ga, &gb}) {
      for (mesh::Group& g : *gs) std::sort(g.begin(), g.end());
      std::sort(gs->begin(), gs->end());
    }
    if (ga != gb) return true;
  }
  return false;
}

// The generator asks this for every choice of every option of every candidate (tens of
// thousands of times per proposal) and each answer builds two meshes: remembered per layout.
bool deepspeed_differs(const LayoutConfig& l) {
  if (l.order != RankOrder::deepspeed) return false;
  using Key = std::vector<int64_t>;  // every degree of the table (the groups depend on nothing else)
  static std::mutex mu;
  static std::map<Key, bool> known;
  Key k;
  for (const Degree& d : layout_degrees()) k.push_back(l.*d.field);
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(k);
  if (it == known.end()) it = known.emplace(k, deepspeed_differs_uncached(l)).first;
  return it->second;
}

}  // namespace

const OptionInfo& option_info(Option o) { return all_options()[static_cast<size_t>(o)]; }

int option_value(Option o, const Scenario& s, const LayoutConfig& l) {
  const ModelConfig& m = s.model;
  if (m.moe_layers() == 0 && option_info(o).moe) return -1;
  auto flag = [](bool on) { return on ? 0 : -1; };
  switch (o) {
    case Option::shared: return m.shared_experts > 0 ? 1 : 0;
    case Option::aux: return m.aux_alpha > 0 ? 1 : 0;
    // top_k == experts: every expert gets every token, so d_e = u * sign(0) = 0 and the
    // bias never moves: a bias_rate > 0 there is not the update, and counts for neither value
    case Option::bias: return m.bias_rate == 0 ? 0 : m.top_k < m.experts ? 1 : -1;
    case Option::microbatches: return m.microbatches > 1 ? 1 : 0;
    case Option::tied: return m.tie_embeddings ? 1 : 0;
    case Option::score: return m.score == Score::sigmoid ? 1 : 0;
    case Option::top_k: return m.top_k == 1 ? 0 : m.top_k == m.experts ? 1 : 2;
    case Option::optim: return s.optim.kind == OptimKind::sgd ? 0 : s.optim.kind == OptimKind::adam ? 1 : 2;
    case Option::clip: return s.optim.clip > 0 ? 1 : 0;
    case Option::dtype: return m.store == Low::bf16 ? 2 : m.dtype == DType::f32 ? 0 : 1;
    case Option::vocab_uneven: return flag(m.vocab % l.tp != 0);
    case Option::mlp_uneven: return flag(m.dense_layers > 0 && m.mlp_hidden % l.tp != 0);
    case Option::expert_uneven: return flag(m.expert_hidden % l.etp != 0);
    case Option::shared_uneven: return flag(m.shared_experts > 0 && m.shared_hidden % l.tp != 0);
    case Option::order: return flag(deepspeed_differs(l));
    case Option::resume: return flag(s.resume.has_value());
    case Option::weight_decay: return s.optim.weight_decay > 0 ? 1 : 0;
    case Option::route_norm: return m.route_norm ? 1 : 0;
    case Option::route_scale: return m.route_scale == 1.0 ? 0 : 1;
    case Option::schedule:
      if (l.pp <= 1) return -1;
      return l.pp_schedule == PpSchedule::gpipe ? 0 : l.pp_schedule == PpSchedule::one_f_one_b ? 1 : 2;
    case Option::dp_sharding:
      if (l.dp_shard <= 1 || l.dp_sharding == DpSharding::fsdp) return -1;
      return l.dp_sharding == DpSharding::ddp ? 0 : l.dp_sharding == DpSharding::zero1 ? 1 : 2;
    case Option::norm: return m.norm == NormKind::rmsnorm ? 1 : 0;
    case Option::qk_norm: return m.qk_norm ? 1 : 0;
    case Option::position: return m.position == Position::rope ? 1 : 0;
    case Option::cp_order:
      if (l.cp <= 1) return -1;
      return l.cp_order == CpOrder::balanced ? 1 : 0;
    // the KV heads' TP regime (mesh/param_layout.cpp): all heads, fewer split over the lanes, or
    // fewer than the lanes, each replicated over tp / kv_heads of them
    case Option::kv_heads: return m.kv() == m.heads ? 0 : m.kv() >= l.tp ? 1 : 2;
  }
  return -1;
}

std::string pair_name(const Pair& p) {
  const OptionInfo& info = option_info(p.option);
  return std::string(info.name) + "=" + std::string(info.values[static_cast<size_t>(p.value)]) + " x " +
         std::string(mode_name(p.mode));
}

std::vector<Pair> all_pairs() {
  std::vector<Pair> out;
  for (const OptionInfo& info : all_options())
    for (size_t v = 0; v < info.values.size(); ++v)
      for (Mode m : all_modes()) out.push_back({info.option, static_cast<int>(v), m});
  return out;
}

std::vector<LayoutConfig> compared_layouts(const Scenario& s) {
  std::vector<LayoutConfig> out;
  if (s.layout.world > 1) out.push_back(s.layout);
  if (s.resume) out.push_back(s.resume->layout);
  return out;
}

void visit_covered_pairs(const Scenario& s, const std::function<void(const Pair&)>& f) {
  for (const LayoutConfig& l : compared_layouts(s)) {
    const std::vector<Mode> modes = modes_of(l);
    for (const OptionInfo& info : all_options()) {
      const int v = option_value(info.option, s, l);
      if (v < 0) continue;
      for (Mode m : modes) f({info.option, v, m});
    }
  }
}

std::vector<Pair> covered_pairs(const Scenario& s) {
  std::vector<Pair> out;
  visit_covered_pairs(s, [&out](const Pair& p) { out.push_back(p); });
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string option_pair_name(const OptionPair& p) {
  auto one = [](Option o, int v) {
    const OptionInfo& info = option_info(o);
    return std::string(info.name) + "=" + std::string(info.values[static_cast<size_t>(v)]);
  };
  return one(p.a, p.va) + " x " + one(p.b, p.vb);
}

bool possible(const OptionPair& p) {
  // top_k=all: every expert takes every token, so the aux loss is a constant (no gradient)
  // and the bias update is 0: bias=on means top_k < experts, and aux=on there cannot act
  if ((p.a == Option::bias || p.a == Option::aux) && p.va == 1 && p.b == Option::top_k && p.vb == 1) return false;
  if (p.a == Option::shared && p.va == 0 && p.b == Option::shared_uneven) return false;  // needs a shared expert
  // interleaved needs micro-batches a multiple of pp (> 1)
  if (p.a == Option::microbatches && p.va == 0 && p.b == Option::schedule && p.vb == 2) return false;
  return true;
}

std::vector<OptionPair> all_option_pairs() {
  std::vector<OptionPair> out;
  const auto& opts = all_options();
  for (size_t i = 0; i < opts.size(); ++i)
    for (size_t j = i + 1; j < opts.size(); ++j)
      for (size_t vi = 0; vi < opts[i].values.size(); ++vi)
        for (size_t vj = 0; vj < opts[j].values.size(); ++vj) {
          const OptionPair p{opts[i].option, static_cast<int>(vi), opts[j].option, static_cast<int>(vj)};
          if (possible(p)) out.push_back(p);
        }
  return out;
}

void visit_covered_option_pairs(const Scenario& s, const std::function<void(const OptionPair&)>& f) {
  const std::vector<OptionInfo>& options = all_options();
  for (const LayoutConfig& l : compared_layouts(s)) {
    std::vector<int> v;
    for (const OptionInfo& info : options) v.push_back(option_value(info.option, s, l));
    for (size_t i = 0; i < v.size(); ++i)
      for (size_t j = i + 1; j < v.size(); ++j)
        if (v[i] >= 0 && v[j] >= 0) f({options[i].option, v[i], options[j].option, v[j]});
  }
}

std::vector<OptionPair> covered_option_pairs(const Scenario& s) {
  std::vector<OptionPair> out;
  visit_covered_option_pairs(s, [&out](const OptionPair& p) { out.push_back(p); });
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

CoverageReport check_coverage(const std::vector<Scenario>& scenarios) {
  CoverageReport r;
  std::map<Pair, size_t> index;
  r.pairs = all_pairs();
  for (size_t i = 0; i < r.pairs.size(); ++i) index[r.pairs[i]] = i;
  r.cover.resize(r.pairs.size());
  for (size_t i = 0; i < scenarios.size(); ++i)
    for (const Pair& p : covered_pairs(scenarios[i])) {
      const auto it = index.find(p);
      if (it != index.end()) r.cover[it->second].push_back(static_cast<int>(i));
    }
  for (size_t i = 0; i < r.pairs.size(); ++i)
    if (r.cover[i].empty()) r.missing.push_back(r.pairs[i]);
  r.option_pairs = all_option_pairs();
  std::map<OptionPair, size_t> oindex;
  for (size_t i = 0; i < r.option_pairs.size(); ++i) oindex[r.option_pairs[i]] = i;
  r.option_cover.assign(r.option_pairs.size(), 0);
  for (const Scenario& s : scenarios)
    for (const OptionPair& p : covered_option_pairs(s))
      if (const auto it = oindex.find(p); it != oindex.end()) ++r.option_cover[it->second];
  for (size_t i = 0; i < r.option_pairs.size(); ++i)
    if (r.option_cover[i] == 0) r.option_missing.push_back(r.option_pairs[i]);
  return r;
}

std::string format_coverage(const CoverageReport& r) {
  std::map<Pair, size_t> count;
  for (size_t i = 0; i < r.pairs.size(); ++i) count[r.pairs[i]] = r.cover[i].size();
  std::string out;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%-24s", "option=value");
  out += buf;
  for (Mode m : all_modes()) std::snprintf(buf, sizeof buf, " %10s", std::string(mode_name(m)).c_str()), out += buf;
  out += "\n";
  for (const OptionInfo& info : all_options())
    for (size_t v = 0; v < info.values.size(); ++v) {
      const std::string row = std::string(info.name) + "=" + std::string(info.values[v]);
      std::snprintf(buf, sizeof buf, "%-24s", row.c_str());
      out += buf;
      for (Mode m : all_modes()) {
        const size_t n = count.at({info.option, static_cast<int>(v), m});
        const std::string cell = n == 0 ? "MISSING" : std::to_string(n);
        std::snprintf(buf, sizeof buf, " %10s", cell.c_str());
        out += buf;
      }
      out += "\n";
    }
  for (const Pair& p : r.missing) out += "missing: " + pair_name(p) + "\n";
  // every pair is possible (docs/coverage.md, "What can co-occur"); the wording is the
  // one the ctest coverage.* tests match
  for (const OptionPair& p : r.option_missing) out += "missing: " + option_pair_name(p) + "\n";
  // whole lines of any length (a fixed buffer cut the option line's newline at 1290 pairs, and the
  // verdict line ran on after it)
  const auto counts = [](const char* what, size_t all, size_t missing) {
    return std::string(what) + ": " + std::to_string(all - missing) + " of " + std::to_string(all) +
           " possible pairs covered, " + std::to_string(missing) + " missing\n";
  };
  out += counts("coverage", r.pairs.size(), r.missing.size());
  out += counts("option x option", r.option_pairs.size(), r.option_missing.size());
  return out;
}

}  // namespace parity::coverage
