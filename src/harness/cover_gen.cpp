// The greedy covering-array generator behind `parity cover` (harness/cover_gen.h).
#include "harness/cover_gen.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "harness/scenario.h"
#include "mesh/mesh.h"

namespace parity::coverage {

namespace {

// The settings the generator may give an option; choice 0 is the template's. A choice is
// a model/optimizer setting, not a value: which value it gives (coverage::option_value)
// can depend on the layout (vocab 61 is uneven only where tp > 1).
struct Choice {
  const char* suffix;  // in the proposal's name; "" for the template's choice
  void (*apply)(Scenario&);
};

const std::vector<Choice>& choices(Option o) {
  static const std::map<Option, std::vector<Choice>> table{
      {Option::shared, {{"", [](Scenario& s) { s.model.shared_experts = 1; }},
                        {"noshared", [](Scenario& s) { s.model.shared_experts = 0; }}}},
      {Option::aux, {{"", [](Scenario& s) { s.model.aux_alpha = 0; }},
                     {"aux", [](Scenario& s) { s.model.aux_alpha = 0.01; }}}},
      {Option::bias, {{"", [](Scenario& s) { s.model.bias_rate = 0; }},
                      {"bias", [](Scenario& s) { s.model.bias_rate = 0.001; }}}},
      {Option::microbatches, {{"", [](Scenario& s) { s.model.microbatches = 1; }},
                              {"mb2", [](Scenario& s) { s.model.microbatches = 2; }}}},
      {Option::tied, {{"", [](Scenario& s) { s.model.tie_embeddings = false; }},
                      {"tied", [](Scenario& s) { s.model.tie_embeddings = true; }}}},
      {Option::score, {{"", [](Scenario& s) { s.model.score = Score::softmax; }},
                       {"sigmoid", [](Scenario& s) { s.model.score = Score::sigmoid; }}}},
      // top_k 1 with route_norm makes every weight 1: without aux loss the router would get
      // no gradient and its check could not fire, so top_k 1 weighs by the score itself
      {Option::top_k, {{"", [](Scenario& s) { s.model.top_k = 2, s.model.route_norm = true; }},
                       {"topk1", [](Scenario& s) { s.model.top_k = 1, s.model.route_norm = false; }},
                       {"topkall", [](Scenario& s) { s.model.top_k = s.model.experts; }}}},
      // sgd and adamw as fsdp2_tp2_sgd and fsdp2_tp2_adamw set them
      {Option::optim, {{"", [](Scenario& s) { s.optim = OptimConfig{.kind = OptimKind::adam, .lr = 3e-3}; }},
                       {"sgd", [](Scenario& s) { s.optim = OptimConfig{.kind = OptimKind::sgd, .lr = 0.1, .momentum = 0.9}; }},
                       {"adamw", [](Scenario& s) {
                          s.optim = OptimConfig{.kind = OptimKind::adamw, .lr = 3e-3, .weight_decay = 0.1};
                        }}}},
      {Option::clip, {{"", [](Scenario& s) { s.optim.clip = 0; }},
                      {"clip", [](Scenario& s) { s.optim.clip = 0.3; }}}},  // as fsdp2_tp2_clip
      {Option::dtype, {{"", [](Scenario& s) { s.model.dtype = DType::f64; }},
                       {"fp32", [](Scenario& s) { s.model.dtype = DType::f32; }}}},
      // prime sizes: uneven under every tp (etp) > 1
      {Option::vocab_uneven, {{"", [](Scenario& s) { s.model.vocab = 64; }},
                              {"vocab61", [](Scenario& s) { s.model.vocab = 61; }}}},
      {Option::mlp_uneven, {{"", [](Scenario& s) { s.model.mlp_hidden = 32; }},
                            {"mlp31", [](Scenario& s) { s.model.mlp_hidden = 31; }}}},
      {Option::expert_uneven, {{"", [](Scenario& s) { s.model.expert_hidden = 16; }},
                               {"experth17", [](Scenario& s) { s.model.expert_hidden = 17; }}}},
      {Option::shared_uneven, {{"", [](Scenario& s) { s.model.shared_hidden = 16; }},
                               {"sharedh17", [](Scenario& s) { s.model.shared_hidden = 17; }}}},
      {Option::order, {{"", [](Scenario&) {}}}},   // decided by the candidate layout (ds_ in the name)
      {Option::resume, {{"", [](Scenario&) {}}}},  // decided by the candidate: one layout or two
  };
  return table.at(o);
}

struct Layout {
  LayoutConfig config;
  std::vector<Mode> modes;
};

struct Candidate {
  Scenario scenario;
  std::vector<int> chosen;  // per option, the choice index
  size_t gain = 0;          // missing pairs covered
  size_t pairs = 0;         // pairs covered, missing or not
  int64_t cost = 0;         // sum of the compared worlds
  int changes = 0;          // options not at the template's choice
};

// A combination in which an option has no effect, which a proposal avoids: with top_k ==
// experts every expert takes every token, so the aux loss is the constant aux_alpha (f_e = 1,
// sum p_e = 1: no gradient) and the bias update is 0.
bool inert(const Scenario& s) {
  return s.model.top_k == s.model.experts && (s.model.aux_alpha > 0 || s.model.bias_rate > 0);
}

// Proposals keep the batch even over micro-batches x data parallel (any batch >= microbatches
// runs, model/batch_split.h, but an uneven batch is not an option of the pairs: the shipped
// *uneven* scenarios cover it). Degrees are powers of two, so the largest product is
// divisible by every other.
void fit_batch(Scenario& s) {
  int64_t b = 8;
  for (const LayoutConfig& l : compared_layouts(s))
    b = std::max(b, s.model.microbatches * l.dp_replicate * l.dp_shard);
  s.model.batch = b;
}

// The candidate with one layout (or a resume check from layouts[0] to layouts[1]), each
// option at the choice that covers the most missing pairs; gain read back from the result.
Candidate build(const std::vector<const Layout*>& layouts, const std::set<Pair>& missing) {
  Candidate c;
  Scenario& s = c.scenario;
  s = cover_template();
  s.layout = layouts[0]->config;
  if (layouts.size() == 2) {
    s.steps = 6;  // as the shipped resume checks
    s.resume = ResumeConfig{3, layouts[1]->config};
  }
  for (const OptionInfo& info : all_options()) {
    const std::vector<Choice>& opts = choices(info.option);
    int best = 0;
    size_t best_gain = 0;
    for (size_t k = 0; k < opts.size(); ++k) {
      Scenario t = s;
      opts[k].apply(t);
      if (k > 0 && inert(t)) continue;
      std::set<Pair> got;
      for (const Layout* l : layouts) {
        const int v = option_value(info.option, t, l->config);
        if (v < 0) continue;
        for (Mode m : l->modes)
          if (missing.count({info.option, v, m})) got.insert({info.option, v, m});
      }
      if (got.size() > best_gain) best = static_cast<int>(k), best_gain = got.size();
    }
    opts[static_cast<size_t>(best)].apply(s);
    c.chosen.push_back(best);
    c.changes += best != 0;
  }
  fit_batch(s);
  const std::vector<Pair> covered = covered_pairs(s);
  for (const Pair& p : covered) c.gain += missing.count(p);
  c.pairs = covered.size();
  for (const Layout* l : layouts) c.cost += l->config.world;
  return c;
}

bool better(const Candidate& a, const Candidate& b) {
  if (a.gain != b.gain) return a.gain > b.gain;
  if (a.cost != b.cost) return a.cost < b.cost;
  if (a.pairs != b.pairs) return a.pairs > b.pairs;  // more modes exercised on the way
  return a.changes < b.changes;
}

std::string layout_name(const LayoutConfig& l) {
  std::vector<std::string> parts;
  if (l.dp_replicate > 1)
    parts.push_back("hsdp" + std::to_string(l.dp_replicate) + "x" + std::to_string(l.dp_shard));
  else if (l.dp_shard > 1)
    parts.push_back("fsdp" + std::to_string(l.dp_shard));
  if (l.tp > 1) parts.push_back("tp" + std::to_string(l.tp));
  if (l.sp) parts.push_back("sp");
  if (l.ep > 1) parts.push_back("ep" + std::to_string(l.ep));
  // shipped names leave out etp where it is the usual one: tp without EP, 1 with EP
  if (l.etp != (l.ep > 1 ? 1 : l.tp)) parts.push_back("etp" + std::to_string(l.etp));
  std::string out = l.order == RankOrder::deepspeed ? "ds" : "";  // as the shipped ds_* files
  for (const std::string& p : parts) out += (out.empty() ? "" : "_") + p;
  return out;
}

// A name that would pass $.name's limit (with room for a "_N" to keep it unique) lists the
// layouts and "mixed" instead of every changed option (the file itself says which).
std::string proposal_name(const Candidate& c) {
  const Scenario& s = c.scenario;
  std::string name = "pw_";
  if (s.resume) name += "resume_" + layout_name(s.layout) + "_to_" + layout_name(s.resume->layout);
  else name += layout_name(s.layout);
  std::string options;
  for (size_t o = 0; o < c.chosen.size(); ++o)
    if (c.chosen[o] != 0) options += std::string("_") + choices(all_options()[o].option)[c.chosen[o]].suffix;
  return name + (name.size() + options.size() + 4 > kMaxNameBytes ? "_mixed" : options);
}

// Each scenario gives an option one value, whatever its layouts, so it covers at most one
// missing value of an option with a given mode: the most missing values of one option with
// one mode is a lower bound on the number of scenarios.
size_t lower_bound(const std::set<Pair>& missing) {
  std::map<std::pair<Option, Mode>, size_t> values;
  size_t most = 0;
  for (const Pair& p : missing) most = std::max(most, ++values[{p.option, p.mode}]);
  return most;
}

// A later proposal can cover every pair an earlier one was chosen for: such a proposal is
// dropped, and what each covers is recounted in order.
void drop_redundant(std::vector<Proposal>& props) {
  auto covered_by_others = [&](size_t i) {
    std::set<Pair> others;
    for (size_t j = 0; j < props.size(); ++j)
      if (j != i)
        for (const Pair& q : covered_pairs(props[j].scenario)) others.insert(q);
    return std::all_of(props[i].covers.begin(), props[i].covers.end(), [&](const Pair& q) { return others.count(q); });
  };
  for (size_t i = 0; i < props.size();) {
    if (covered_by_others(i)) {
      std::set<Pair> wanted;
      for (const Proposal& p : props) wanted.insert(p.covers.begin(), p.covers.end());
      props.erase(props.begin() + static_cast<std::ptrdiff_t>(i));
      for (Proposal& p : props) {
        p.covers.clear();
        for (const Pair& q : covered_pairs(p.scenario))
          if (wanted.erase(q)) p.covers.push_back(q);
      }
      i = 0;
    } else {
      ++i;
    }
  }
}

}  // namespace

Scenario cover_template() {
  Scenario s;
  s.steps = 10;
  ModelConfig& m = s.model;
  m.vocab = 64, m.dim = 16, m.layers = 2, m.dense_layers = 1, m.heads = 4;
  m.seq = 8, m.batch = 8, m.microbatches = 1, m.mlp_hidden = 32;
  m.experts = 4, m.top_k = 2, m.expert_hidden = 16, m.shared_experts = 1, m.shared_hidden = 16;
  s.optim.lr = 3e-3;
  return s;
}

std::vector<LayoutConfig> candidate_layouts() {
  const Scenario base = cover_template();
  std::vector<LayoutConfig> out;
  for (int64_t dpr : {1, 2, 4, 8})
    for (int64_t dps : {1, 2, 4, 8})
      for (int64_t tp : {1, 2, 4})
        for (int64_t ep : {1, 2, 4})
          for (int64_t etp : {1, 2, 4, 8})
            for (bool sp : {false, true})
              for (RankOrder order : {RankOrder::megatron, RankOrder::deepspeed}) {
                Scenario s = base;
                s.layout = LayoutConfig{.world = dpr * dps * tp, .dp_replicate = dpr, .dp_shard = dps, .tp = tp,
                                        .ep = ep, .etp = etp, .sp = sp, .order = order};
                if (s.layout.world < 2 || s.layout.world > 8) continue;
                try {
                  validate_scenario(s);  // etp must tile the world
                } catch (const ConfigError&) {
                  continue;
                }
                // deepspeed only where its expert groups differ from megatron's: elsewhere
                // it is the same layout
                if (order == RankOrder::deepspeed && option_value(Option::order, s, s.layout) < 0) continue;
                out.push_back(s.layout);
              }
  return out;
}

Proposals propose(const std::vector<Scenario>& shipped) {
  const CoverageReport report = check_coverage(shipped);
  std::set<Pair> missing(report.missing.begin(), report.missing.end());
  Proposals out;
  out.lower_bound = lower_bound(missing);
  std::vector<Layout> layouts;
  for (const LayoutConfig& l : candidate_layouts()) layouts.push_back({l, modes_of(l)});
  std::set<std::string> names;
  for (const Scenario& s : shipped) names.insert(s.name);
  while (!missing.empty()) {
    const bool resume_missing = std::any_of(missing.begin(), missing.end(),
                                            [](const Pair& p) { return p.option == Option::resume; });
    std::optional<Candidate> best;
    auto consider = [&](const std::vector<const Layout*>& ls) {
      Candidate c = build(ls, missing);
      if (c.gain == 0 || (best && !better(c, *best))) return;
      try {
        validate_scenario(c.scenario);
      } catch (const ConfigError&) {
        return;
      }
      best = std::move(c);
    };
    for (const Layout& a : layouts) {
      consider({&a});
      if (resume_missing)
        for (const Layout& b : layouts) consider({&a, &b});
    }
    if (!best) break;
    std::string name = proposal_name(*best);
    for (int k = 2; names.count(name); ++k) name = proposal_name(*best) + "_" + std::to_string(k);
    names.insert(name);
    best->scenario.name = name;
    Proposal p{best->scenario, {}};
    for (const Pair& q : covered_pairs(p.scenario))
      if (missing.erase(q)) p.covers.push_back(q);
    out.scenarios.push_back(std::move(p));
  }
  out.left.assign(missing.begin(), missing.end());
  drop_redundant(out.scenarios);
  return out;
}

std::string scenario_file_text(const Scenario& s) {
  const nlohmann::json j = scenario_to_json(s);
  using ordered = nlohmann::ordered_json;
  auto in_order = [](const nlohmann::json& from, std::initializer_list<const char*> keys) {
    ordered o = ordered::object();
    for (const char* k : keys)
      if (from.contains(k)) o[k] = from.at(k);
    return o;
  };
  auto layout = [&](const nlohmann::json& l) {
    return in_order(l, {"world", "dp_replicate", "dp_shard", "tp", "ep", "etp", "sp", "order", "fsdp_dim", "backend",
                        "device"});
  };
  ordered out = in_order(j, {"name", "steps", "seed", "data_seed", "dtype"});
  out["model"] = in_order(j["model"], {"vocab", "dim", "layers", "dense_layers", "heads", "seq", "batch",
                                       "microbatches", "mlp_hidden", "experts", "top_k", "expert_hidden",
                                       "shared_experts", "shared_hidden", "score", "route_norm", "route_scale",
                                       "aux_alpha", "bias_rate", "tie_embeddings"});
  out["optim"] = in_order(j["optim"], {"kind", "lr", "momentum", "beta1", "beta2", "eps", "weight_decay", "clip"});
  out["layout"] = layout(j["layout"]);
  if (j.contains("resume"))
    out["resume"] = ordered{{"save_at", j["resume"]["save_at"]}, {"layout", layout(j["resume"]["layout"])}};
  return out.dump(2) + "\n";
}

}  // namespace parity::coverage
