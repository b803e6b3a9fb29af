// The greedy covering-array generator behind `parity cover` (harness/scenario/cover_gen.h).
#include "harness/scenario/cover_gen.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/precision.h"
#include "harness/scenario/scenario.h"
#include "mesh/mesh.h"

namespace parity::coverage {

namespace {

constexpr int64_t kTemplateLayers = 2;  // cover_template()'s; interleaved proposals take 4

// Every layout a scenario compares (its own and a resume check's), to set a layout option.
std::vector<LayoutConfig*> layouts_of(Scenario& s) {
  std::vector<LayoutConfig*> out{&s.layout};
  if (s.resume) out.push_back(&s.resume->layout);
  return out;
}

// The chunk order of every context-parallel layout (cp 1 keeps the default: nothing to order).
void set_cp_order(Scenario& s, CpOrder o) {
  for (LayoutConfig* l : layouts_of(s))
    if (l->cp > 1) l->cp_order = o;
}

// The schedule of every pipelined layout; interleaved runs 2 model chunks per stage over 4
// layers (one per chunk under pp 2) and needs micro-batches a multiple of pp (2 in every
// candidate).
void set_schedule(Scenario& s, PpSchedule k) {
  bool pipelined = false;
  for (LayoutConfig* l : layouts_of(s)) {
    if (l->pp <= 1) continue;
    pipelined = true;
    l->pp_schedule = k;
    l->pp_virtual = k == PpSchedule::interleaved ? 2 : 1;
  }
  s.model.layers = pipelined && k == PpSchedule::interleaved ? 4 : kTemplateLayers;
  if (pipelined && k == PpSchedule::interleaved && s.model.microbatches % 2 != 0) s.model.microbatches = 2;
}

void set_sharding(Scenario& s, DpSharding d) {
  for (LayoutConfig* l : layouts_of(s)) l->dp_sharding = l->expert_dp_sharding = d;
}

// The settings the generator may give an option; choice 0 is the template's. A choice is
// a model/optimizer setting, not a value: which value it gives (coverage::option_value)
// can depend on the layout (vocab 61 is uneven only where tp > 1).
struct Choice {
  const char* suffix;  // in the proposal's name; "" for the template's choice
  void (*apply)(Scenario&);
};

const std::vector<Choice>& choices(Option o) {
  static const std::map<Option, std::vector<Choice>> table{
      {Option::shared,
       {{"", [](Scenario& s) { s.model.shared_experts = 1; }},
        {"noshared", [](Scenario& s) { s.model.shared_experts = 0; }}}},
      {Option::aux,
       {{"", [](Scenario& s) { s.model.aux_alpha = 0; }}, {"aux", [](Scenario& s) { s.model.aux_alpha = 0.01; }}}},
      {Option::bias,
       {{"", [](Scenario& s) { s.model.bias_rate = 0; }}, {"bias", [](Scenario& s) { s.model.bias_rate = 0.001; }}}},
      {Option::microbatches,
       {{"", [](Scenario& s) { s.model.microbatches = 1; }}, {"mb2", [](Scenario& s) { s.model.microbatches = 2; }}}},
      {Option::tied,
       {{"", [](Scenario& s) { s.model.tie_embeddings = false; }},
        {"tied", [](Scenario& s) { s.model.tie_embeddings = true; }}}},
      {Option::score,
       {{"", [](Scenario& s) { s.model.score = Score::softmax; }},
        {"sigmoid", [](Scenario& s) { s.model.score = Score::sigmoid; }}}},
      // top_k 1 with route_norm makes every weight 1: without aux loss the router would get
      // no gradient and its check could not fire, so top_k 1 weighs by the score itself
      {Option::top_k,
       {{"", [](Scenario& s) { s.model.top_k = 2, s.model.route_norm = true; }},
        {"topk1", [](Scenario& s) { s.model.top_k = 1, s.model.route_norm = false; }},
        {"topkall", [](Scenario& s) { s.model.top_k = s.model.experts; }}}},
      // sgd and adamw as fsdp2_tp2_sgd and fsdp2_tp2_adamw set them
      {Option::optim,
       {{"", [](Scenario& s) { s.optim = OptimConfig{.kind = OptimKind::adam, .lr = 3e-3}; }},
        {"sgd", [](Scenario& s) { s.optim = OptimConfig{.kind = OptimKind::sgd, .lr = 0.1, .momentum = 0.9}; }},
        {"adamw",
         [](Scenario& s) { s.optim = OptimConfig{.kind = OptimKind::adamw, .lr = 3e-3, .weight_decay = 0.1}; }}}},
      {Option::clip,
       {{"", [](Scenario& s) { s.optim.clip = 0; }},
        {"clip", [](Scenario& s) { s.optim.clip = 0.3; }}}},  // as fsdp2_tp2_clip
      {Option::dtype,
       {{"", [](Scenario& s) { s.model.set_precision(Precision{DType::f64}); }},
        {"fp32", [](Scenario& s) { s.model.set_precision(Precision{DType::f32}); }},
        {"bf16",
         [](Scenario& s) {
           s.model.set_precision(Precision{DType::f32, Low::bf16});
         }}}},
      // prime sizes: uneven under every tp (etp) > 1
      {Option::vocab_uneven,
       {{"", [](Scenario& s) { s.model.vocab = 64; }}, {"vocab61", [](Scenario& s) { s.model.vocab = 61; }}}},
      {Option::mlp_uneven,
       {{"", [](Scenario& s) { s.model.mlp_hidden = 32; }}, {"mlp31", [](Scenario& s) { s.model.mlp_hidden = 31; }}}},
      {Option::expert_uneven,
       {{"", [](Scenario& s) { s.model.expert_hidden = 16; }},
        {"experth17", [](Scenario& s) { s.model.expert_hidden = 17; }}}},
      {Option::shared_uneven,
       {{"", [](Scenario& s) { s.model.shared_hidden = 16; }},
        {"sharedh17", [](Scenario& s) { s.model.shared_hidden = 17; }}}},
      {Option::order, {{"", [](Scenario&) {}}}},   // decided by the candidate layout (ds_ in the name)
      {Option::resume, {{"", [](Scenario&) {}}}},  // decided by the candidate: one layout or two
      {Option::weight_decay,
       {{"", [](Scenario& s) { s.optim.weight_decay = 0; }}, {"wd", [](Scenario& s) { s.optim.weight_decay = 0.1; }}}},
      {Option::route_norm,
       {{"", [](Scenario& s) { s.model.route_norm = s.model.top_k != 1; }},
        {"norm", [](Scenario& s) { s.model.route_norm = s.model.top_k == 1; }}}},
      {Option::route_scale,
       {{"", [](Scenario& s) { s.model.route_scale = 1.0; }},
        {"rscale", [](Scenario& s) { s.model.route_scale = 2.5; }}}},
      {Option::schedule,
       {{"", [](Scenario& s) { set_schedule(s, PpSchedule::one_f_one_b); }},
        {"gpipe", [](Scenario& s) { set_schedule(s, PpSchedule::gpipe); }},
        {"interleaved", [](Scenario& s) { set_schedule(s, PpSchedule::interleaved); }}}},
      {Option::dp_sharding,
       {{"", [](Scenario& s) { set_sharding(s, DpSharding::fsdp); }},
        {"ddp", [](Scenario& s) { set_sharding(s, DpSharding::ddp); }},
        {"zero1", [](Scenario& s) { set_sharding(s, DpSharding::zero1); }},
        {"zero2", [](Scenario& s) { set_sharding(s, DpSharding::zero2); }}}},
      {Option::norm,
       {{"", [](Scenario& s) { s.model.norm = NormKind::layernorm; }},
        {"rmsnorm", [](Scenario& s) { s.model.norm = NormKind::rmsnorm; }}}},
      {Option::qk_norm,
       {{"", [](Scenario& s) { s.model.qk_norm = false; }}, {"qknorm", [](Scenario& s) { s.model.qk_norm = true; }}}},
      {Option::position,
       {{"", [](Scenario& s) { s.model.position = Position::none; }},
        {"rope", [](Scenario& s) { s.model.position = Position::rope; }}}},
      {Option::cp_order,
       {{"", [](Scenario& s) { set_cp_order(s, CpOrder::contiguous); }},
        {"balanced", [](Scenario& s) { set_cp_order(s, CpOrder::balanced); }}}},
      // the template's 4 heads over 2 KV heads (grouped at tp <= 2, replicated at tp 4) or 1 (MQA)
      {Option::kv_heads,
       {{"", [](Scenario& s) { s.model.kv_heads = 0; }}, {"gqa2", [](Scenario& s) { s.model.kv_heads = 2; }},
        {"mqa", [](Scenario& s) { s.model.kv_heads = 1; }}}},
  };
  return table.at(o);
}

struct TensorLayout {
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
// So has top_k 1 with route_norm and no aux loss: every weight is 1, the router gets no gradient.
bool inert(const Scenario& s) {
  return (s.model.top_k == s.model.experts && (s.model.aux_alpha > 0 || s.model.bias_rate > 0)) ||
         (s.model.top_k == 1 && s.model.route_norm && s.model.aux_alpha == 0 && s.model.moe_layers() > 0);
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

// The missing pairs as flags over dense ids, and a count of the distinct ones a trial takes: build()'s inner loop
// looked each pair up in a std::set and inserted it into another, most of `parity cover`'s time (the coverage
// tests took 1-2 minutes each in the ctest). Made once per proposal round, read by every candidate of it.
class MissingFlags {
 public:
  MissingFlags(const std::set<Pair>& missing, const std::set<OptionPair>& omissing)
      : n_opt_(all_options().size()) {
    for (const OptionInfo& o : all_options()) n_val_ = std::max(n_val_, o.values.size());
    pair_.assign(n_opt_ * n_val_ * static_cast<size_t>(kModeCount), 0);
    opair_.assign(n_opt_ * n_val_ * n_opt_ * n_val_, 0);
    for (const Pair& q : missing) pair_[id(q)] = 1;
    for (const OptionPair& q : omissing) opair_[id(q)] = 1;
    seen_pair_.assign(pair_.size(), 0), seen_opair_.assign(opair_.size(), 0);
  }
  // A trial: count each missing pair it takes once, however often it is offered.
  void begin() { ++stamp_, taken_ = 0; }
  void offer(const Pair& q) { take(pair_, seen_pair_, id(q)); }
  void offer(const OptionPair& q) { take(opair_, seen_opair_, id(q)); }
  size_t taken() const { return taken_; }

 private:
  size_t id(const Pair& q) const {
    return (static_cast<size_t>(q.option) * n_val_ + static_cast<size_t>(q.value)) * kModeCount +
           static_cast<size_t>(q.mode);
  }
  size_t id(const OptionPair& q) const {
    return ((static_cast<size_t>(q.a) * n_val_ + static_cast<size_t>(q.va)) * n_opt_ + static_cast<size_t>(q.b)) *
               n_val_ +
           static_cast<size_t>(q.vb);
  }
  void take(const std::vector<char>& missing, std::vector<uint32_t>& seen, size_t i) {
    if (missing[i] && seen[i] != stamp_) seen[i] = stamp_, ++taken_;
  }
  size_t n_opt_, n_val_ = 1;
  std::vector<char> pair_, opair_;
  std::vector<uint32_t> seen_pair_, seen_opair_;
  uint32_t stamp_ = 0;
  size_t taken_ = 0;
};

// The candidate with one layout (or a resume check from layouts[0] to layouts[1]), each
// option at the choice that covers the most missing pairs; gain read back from the result.
// target: an option pair whose two values the candidate must take (when no candidate gains
// by choosing one option at a time, a pair whose two settings differ from the template).
Candidate build(const std::vector<const TensorLayout*>& layouts, MissingFlags& flags,
                const OptionPair* target = nullptr) {
  const std::vector<OptionInfo>& options = all_options();
  Candidate c;
  Scenario& s = c.scenario;
  s = cover_template();
  s.layout = layouts[0]->config;
  if (layouts.size() == 2) {
    s.steps = 6;  // as the shipped resume checks
    s.resume = ResumeConfig{3, layouts[1]->config};
  }
  // Two passes: the first chooses each option against the options chosen before it, the
  // second chooses each again against all the others (a pair whose first option comes
  // early in the list is only seen then).
  c.chosen.assign(options.size(), 0);
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t oi = 0; oi < options.size(); ++oi) {
      const OptionInfo& info = options[oi];
      const std::vector<Choice>& opts = choices(info.option);
      int best = c.chosen[oi];
      size_t best_gain = 0;
      bool have = false;
      for (size_t k = 0; k < opts.size(); ++k) {
        Scenario t = s;
        opts[k].apply(t);
        for (size_t later = oi + 1; pass == 1 && later < options.size(); ++later)  // keep the others' choices
          choices(options[later].option)[static_cast<size_t>(c.chosen[later])].apply(t);
        // a target's own settings may be inert for now: the repair below makes them act
        const bool targeted = target != nullptr && (info.option == target->a || info.option == target->b);
        if (k > 0 && !targeted && inert(t)) continue;
        // the layouts as the choices left them (schedule and sharding are layout options)
        const std::vector<LayoutConfig*> tl = layouts_of(t);
        if (target != nullptr && (info.option == target->a || info.option == target->b) &&
            option_value(info.option, t, *tl[0]) != (info.option == target->a ? target->va : target->vb))
          continue;
        flags.begin();  // the missing pairs this choice takes, each counted once
        for (size_t li = 0; li < layouts.size(); ++li) {
          const LayoutConfig& lc = *tl[li];
          const int v = option_value(info.option, t, lc);
          if (v < 0) continue;
          for (Mode m : layouts[li]->modes) flags.offer(Pair{info.option, v, m});
          for (size_t other = 0; other < options.size(); ++other) {
            if (other == oi || (pass == 0 && other > oi)) continue;
            const Option o2 = options[other].option;
            const int w = option_value(o2, t, lc);
            if (w < 0) continue;
            flags.offer(other < oi ? OptionPair{o2, w, info.option, v} : OptionPair{info.option, v, o2, w});
          }
        }
        if (!have || flags.taken() > best_gain) best = static_cast<int>(k), best_gain = flags.taken(), have = true;
      }
      c.chosen[oi] = best;
      opts[static_cast<size_t>(best)].apply(s);
    }
    if (pass == 0) {  // rebuild from the template with the choices, for the second pass to vary one at a time
      Scenario fresh = cover_template();
      fresh.layout = s.layout, fresh.resume = s.resume, fresh.steps = s.steps;
      s = fresh;
    }
  }
  // the final scenario: the template with every choice applied in order
  {
    Scenario fresh = cover_template();
    fresh.layout = s.layout, fresh.resume = s.resume, fresh.steps = s.steps;
    for (size_t oi = 0; oi < options.size(); ++oi)
      choices(options[oi].option)[static_cast<size_t>(c.chosen[oi])].apply(fresh);
    s = fresh;
  }
  // a target of top_k 1 with route_norm gives the router a gradient only through the aux loss
  const size_t aux = static_cast<size_t>(Option::aux);
  if (target != nullptr && inert(s) && s.model.top_k == 1 && c.chosen[aux] == 0) {
    c.chosen[aux] = 1;
    choices(Option::aux)[1].apply(s);
  }
  for (int k : c.chosen) c.changes += k != 0;
  fit_batch(s);
  flags.begin();  // the missing pairs the result covers, each once
  visit_covered_pairs(s, [&flags](const Pair& p) { flags.offer(p); });
  visit_covered_option_pairs(s, [&flags](const OptionPair& p) { flags.offer(p); });
  c.gain = flags.taken();
  c.pairs = covered_pairs(s).size();
  for (const TensorLayout* l : layouts) c.cost += l->config.world;
  return c;
}

bool better(const Candidate& a, const Candidate& b) {
  if (a.gain != b.gain) return a.gain > b.gain;
  if (a.cost != b.cost) return a.cost < b.cost;
  if (a.pairs != b.pairs) return a.pairs > b.pairs;  // more modes exercised on the way
  return a.changes < b.changes;
}


// A name that would pass $.name's limit (with room for a "_N" to keep it unique) lists the
// layouts and "mixed" instead of every changed option (the file itself says which).
std::string proposal_name(const Candidate& c) {
  const Scenario& s = c.scenario;
  std::string name = "pw_";
  if (s.resume)
    name += "resume_" + describe_layout(s.layout, LayoutText::stem) + "_to_" +
            describe_layout(s.resume->layout, LayoutText::stem);
  else name += describe_layout(s.layout, LayoutText::stem);
  std::string options;
  for (size_t o = 0; o < c.chosen.size(); ++o) {
    const Option opt = all_options()[o].option;
    if (opt == Option::schedule || opt == Option::dp_sharding || opt == Option::cp_order)
      continue;  // the layout's stem says them
    if (c.chosen[o] != 0) options += std::string("_") + choices(opt)[c.chosen[o]].suffix;
  }
  // long lists of options make unreadable file names: past 64 bytes the file says what differs
  return name + (name.size() + options.size() > 64 ? "_mixed" : options);
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
    std::set<OptionPair> oothers;
    for (size_t j = 0; j < props.size(); ++j)
      if (j != i) {
        for (const Pair& q : covered_pairs(props[j].scenario)) others.insert(q);
        for (const OptionPair& q : covered_option_pairs(props[j].scenario)) oothers.insert(q);
      }
    return std::all_of(props[i].covers.begin(), props[i].covers.end(),
                       [&](const Pair& q) { return others.count(q); }) &&
           std::all_of(props[i].option_covers.begin(), props[i].option_covers.end(),
                       [&](const OptionPair& q) { return oothers.count(q); });
  };
  for (size_t i = 0; i < props.size();) {
    if (covered_by_others(i)) {
      std::set<Pair> wanted;
      std::set<OptionPair> owanted;
      for (const Proposal& p : props) {
        wanted.insert(p.covers.begin(), p.covers.end());
        owanted.insert(p.option_covers.begin(), p.option_covers.end());
      }
      props.erase(props.begin() + static_cast<std::ptrdiff_t>(i));
      for (Proposal& p : props) {
        p.covers.clear(), p.option_covers.clear();
        for (const Pair& q : covered_pairs(p.scenario))
          if (wanted.erase(q)) p.covers.push_back(q);
        for (const OptionPair& q : covered_option_pairs(p.scenario))
          if (owanted.erase(q)) p.option_covers.push_back(q);
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
  m.vocab = 64, m.dim = 16, m.layers = kTemplateLayers, m.dense_layers = 1, m.heads = 4;
  m.seq = 8, m.batch = 8, m.microbatches = 1, m.mlp_hidden = 32;
  m.experts = 4, m.top_k = 2, m.expert_hidden = 16, m.shared_experts = 1, m.shared_hidden = 16;
  s.optim.lr = 3e-3;
  return s;
}

std::vector<LayoutConfig> candidate_layouts() {
  const Scenario base = cover_template();
  std::vector<LayoutConfig> out;
  for (int64_t pp : {1, 2})
    for (int64_t dpr : {1, 2, 4, 8})
      for (int64_t dps : {1, 2, 4, 8})
        for (int64_t cp : {1, 2})
          for (int64_t tp : {1, 2, 4})
            for (int64_t ep : {1, 2, 4})
              for (int64_t etp : {1, 2, 4, 8})
                for (bool sp : {false, true})
                  for (RankOrder order : {RankOrder::megatron, RankOrder::deepspeed}) {
                    Scenario s = base;
                    s.layout = LayoutConfig{.world = pp * dpr * dps * cp * tp, .pp = pp, .dp_replicate = dpr,
                                            .dp_shard = dps, .tp = tp, .ep = ep, .etp = etp, .cp = cp, .sp = sp,
                                            .order = order};
                    if (s.layout.world < 2 || s.layout.world > 8) continue;
                    try {
                      validate_scenario(s);  // etp must tile the world; cp (times tp under sp) divide seq
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
  std::set<OptionPair> omissing(report.option_missing.begin(), report.option_missing.end());
  Proposals out;
  out.lower_bound = lower_bound(missing);
  std::vector<TensorLayout> layouts;
  for (const LayoutConfig& l : candidate_layouts()) layouts.push_back({l, modes_of(l)});
  std::set<std::string> names;
  for (const Scenario& s : shipped) names.insert(s.name);
  while (!missing.empty() || !omissing.empty()) {
    const bool resume_missing =
        std::any_of(missing.begin(), missing.end(), [](const Pair& p) { return p.option == Option::resume; }) ||
        std::any_of(omissing.begin(), omissing.end(),
                    [](const OptionPair& p) { return p.a == Option::resume || p.b == Option::resume; });
    std::optional<Candidate> best;
    const OptionPair* target = nullptr;
    MissingFlags flags(missing, omissing);
    auto consider = [&](const std::vector<const TensorLayout*>& ls) {
      Candidate c = build(ls, flags, target);
      if (c.gain == 0 || inert(c.scenario) || (best && !better(c, *best))) return;
      try {
        validate_scenario(c.scenario);
      } catch (const ConfigError&) {
        return;
      }
      best = std::move(c);
    };
    auto consider_all = [&] {
      for (const TensorLayout& a : layouts) {
        consider({&a});
        // a resume check covers cp through the layout it saves under: resuming into a cp layout
        // too would cover no pair that the saving side cannot, and doubles the quadratic search
        if (resume_missing)
          for (const TensorLayout& b : layouts)
            if (b.config.cp == 1) consider({&a, &b});
      }
    };
    consider_all();
    if (!best && !omissing.empty()) {  // two settings that must change together
      const OptionPair first = *omissing.begin();
      target = &first;
      consider_all();
      target = nullptr;
      if (!best) {
        out.option_left.push_back(first);
        omissing.erase(first);
        continue;
      }
    }
    if (!best) break;
    std::string name = proposal_name(*best);
    for (int k = 2; names.count(name); ++k) name = proposal_name(*best) + "_" + std::to_string(k);
    names.insert(name);
    best->scenario.name = name;
    Proposal p{best->scenario, {}, {}};
    for (const Pair& q : covered_pairs(p.scenario))
      if (missing.erase(q)) p.covers.push_back(q);
    for (const OptionPair& q : covered_option_pairs(p.scenario))
      if (omissing.erase(q)) p.option_covers.push_back(q);
    out.scenarios.push_back(std::move(p));
  }
  out.left.assign(missing.begin(), missing.end());
  out.option_left.insert(out.option_left.end(), omissing.begin(), omissing.end());
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
    return in_order(l, {"world", "pp", "pp_schedule", "pp_virtual", "pp_layers", "dp_replicate", "dp_shard", "tp",
                        "ep", "etp", "cp", "cp_order", "sp", "order", "recompute", "fsdp_dim", "dp_sharding",
                        "expert_dp_sharding", "backend", "device"});
  };
  ordered out = in_order(j, {"name", "steps", "seed", "data_seed", "dtype", "precision"});
  out["model"] = in_order(j["model"], {"vocab", "dim", "layers", "dense_layers", "heads", "seq", "batch",
                                       "microbatches", "mlp_hidden", "experts", "top_k", "expert_hidden",
                                       "shared_experts", "shared_hidden", "score", "route_norm", "route_scale",
                                       "aux_alpha", "bias_rate", "tie_embeddings", "norm",
                                       "qk_norm", "position", "rope_theta", "kv_heads"});
  out["optim"] = in_order(j["optim"], {"kind", "lr", "momentum", "beta1", "beta2", "eps", "weight_decay", "clip"});
  out["layout"] = layout(j["layout"]);
  if (j.contains("resume"))
    out["resume"] = ordered{{"save_at", j["resume"]["save_at"]}, {"layout", layout(j["resume"]["layout"])}};
  return out.dump(2) + "\n";
}

}  // namespace parity::coverage
