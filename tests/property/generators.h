// RapidCheck generators for the property-based parity suite (issue 8): a valid layout for
// W = 2..8 in every folding mode of shared/design/FOLDINGS.md, a model sized to it (sizes
// that do not divide, experts that get no tokens, top_k 1..E, dense and MoE layers, tied
// head, aux loss / bias update, softmax / sigmoid), the optimizer, dtype, steps and seeds.
//
// Everything is drawn inside `rc::gen::exec`, so RapidCheck shrinks the whole case: every
// choice is ordered simplest first (elementOf / inRange shrink towards the first element
// and the low end), so a failure shrinks towards W = 2, one step, one layer, fp64, adam.
// Header-only like tests/mesh/mesh_gen.h: tests/CMakeLists.txt compiles *_test.cpp only.
#pragma once
#include <rapidcheck.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mesh/mesh.h"
#include "mesh/param_layout.h"
#include "mesh/placement.h"
#include "model/config.h"
#include "model/params.h"

namespace parity::property {

// What a property needs from the drawn case (the rest is drawn freely).
struct CaseSpec {
  bool need_moe = false;       // at least one MoE layer
  bool want_tp = false;        // tp > 1 in most cases (LayerNorm under SP)
  bool sgd_lr1_one_step = false;  // one plain sgd step at lr 1 (property 4)
  bool adam_family = false;    // adam or adamw, 2..3 steps (property 5)
  bool draw_clip = false;      // clipping that clips, that does not, or none (property 6)
  bool allow_mpi = true;       // backend mpi sometimes
};

enum class Folding { dense, dp2ep, tp2ep, cross_lane };

inline std::string_view folding_name(Folding f) {
  switch (f) {
    case Folding::dense: return "dense only";
    case Folding::dp2ep: return "dp2ep";
    case Folding::tp2ep: return "tp2ep";
    case Folding::cross_lane: return "cross-lane";
  }
  return "?";
}

// FOLDINGS.md: ep 1 is the dense view only; etp = tp keeps EP inside the dense DP groups
// (dp2ep); ep = tp with etp 1 puts EP on the TP ranks (tp2ep); any other etp-1 EP spans
// TP lanes and DP ranks (cross-lane).
inline Folding folding_of(const LayoutConfig& l) {
  if (l.ep == 1) return Folding::dense;
  if (l.etp == l.tp) return Folding::dp2ep;
  if (l.ep == l.tp) return Folding::tp2ep;
  return Folding::cross_lane;
}

// false first, so that shrinking turns options off (not elementOf(vector<bool>): its
// elements are proxies).
inline bool draw_bool() { return *rc::gen::inRange(0, 2) == 1; }

inline std::vector<int64_t> divisors_of(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// (dp_replicate, dp_shard, tp) of W; tp > 1 when asked and possible.
inline LayoutConfig draw_dense_view(bool want_tp) {
  LayoutConfig l;
  // One inRange (not a weighted choice of ranges): RapidCheck shrinks it step by step to 2.
  l.world = *rc::gen::inRange<int64_t>(2, 9);
  std::vector<int64_t> tps = divisors_of(l.world);
  if (want_tp && *rc::gen::weightedOneOf<bool>({{1, rc::gen::just(false)}, {4, rc::gen::just(true)}}))
    tps.erase(tps.begin());
  // tp first among the degrees so that shrinking keeps a needed tp and drops replication.
  l.tp = *rc::gen::elementOf(tps);
  const std::vector<int64_t> rest = divisors_of(l.world / l.tp);
  l.dp_replicate = *rc::gen::weightedOneOf<int64_t>(
      {{3, rc::gen::just<int64_t>(1)}, {1, rc::gen::elementOf(rest)}});
  l.dp_shard = l.world / (l.tp * l.dp_replicate);
  return l;
}

// (ep, etp) for the drawn folding mode; falls back to dense when the mode cannot exist.
inline void draw_expert_view(LayoutConfig& l, Folding want) {
  const int64_t per_replica = l.world / l.dp_replicate;  // ep * etp * edp_shard
  l.ep = 1, l.etp = *rc::gen::elementOf(std::vector<int64_t>{1, l.tp});
  if (want == Folding::dp2ep) {
    std::vector<int64_t> eps;
    for (int64_t e : divisors_of(l.dp_shard))
      if (e > 1) eps.push_back(e);
    if (!eps.empty()) l.etp = l.tp, l.ep = *rc::gen::elementOf(eps);
  } else if (want == Folding::tp2ep && l.tp > 1) {
    l.etp = 1, l.ep = l.tp;
  } else if (want == Folding::cross_lane && l.tp > 1) {
    std::vector<int64_t> eps;  // EP over more than one TP lane but not just the TP group
    for (int64_t e : divisors_of(per_replica))
      if (e > 1 && e != l.tp) eps.push_back(e);
    if (!eps.empty()) l.etp = 1, l.ep = *rc::gen::elementOf(eps);
  }
}

// Hidden sizes from 1 to 12, often not a multiple of tp (uneven or empty shards).
inline int64_t draw_hidden() { return *rc::gen::inRange<int64_t>(1, 13); }

inline void draw_moe(ModelConfig& m, int64_t ep, bool need_moe) {
  m.layers = *rc::gen::inRange<int64_t>(1, 4);
  const int64_t max_dense = need_moe ? m.layers - 1 : m.layers;
  m.dense_layers = *rc::gen::weightedOneOf<int64_t>(
      {{3, rc::gen::inRange<int64_t>(0, max_dense + 1)}, {1, rc::gen::just(max_dense)}});
  // Experts: a multiple of ep, sometimes more experts than routed token copies (empty ones).
  m.experts = ep * *rc::gen::weightedOneOf<int64_t>({{4, rc::gen::inRange<int64_t>(1, 3)},
                                                      {1, rc::gen::inRange<int64_t>(3, 9)}});
  m.top_k = *rc::gen::weightedOneOf<int64_t>({{3, rc::gen::inRange<int64_t>(1, m.experts + 1)},
                                               {1, rc::gen::just(m.experts)}});
  m.expert_hidden = draw_hidden();
  m.shared_experts = *rc::gen::inRange<int64_t>(0, 2);
  m.shared_hidden = draw_hidden();
  m.score = *rc::gen::elementOf(std::vector<Score>{Score::softmax, Score::sigmoid});
  m.route_norm = !draw_bool();
  m.route_scale = *rc::gen::elementOf(std::vector<double>{1.0, 2.5});
  m.aux_alpha = *rc::gen::elementOf(std::vector<double>{0.0, 0.01});
  m.bias_rate = *rc::gen::elementOf(std::vector<double>{0.0, 0.001});
}

// A model sized to the layout: heads % tp == 0, seq % tp == 0 under SP, batch divisible by
// microbatches x dp; vocab and hidden sizes free (uneven vocab-parallel and MLP shards).
inline ModelConfig draw_model(const LayoutConfig& l, const CaseSpec& spec) {
  ModelConfig m;
  m.heads = l.tp * *rc::gen::inRange<int64_t>(1, 3);
  // dim >= 2: with dim 1 every LayerNorm output is exactly 0, the gradients are pure
  // cancellation noise (norm ~1e-11 in fp32) and no relative comparison means anything
  // (a case found by this suite: grad norm 5.8e-11 vs 2.9e-11).
  m.dim = m.heads * *rc::gen::inRange<int64_t>(m.heads == 1 ? 2 : 1, 4);
  m.vocab = *rc::gen::inRange<int64_t>(2, 40);
  m.seq = l.sp ? l.tp * *rc::gen::inRange<int64_t>(1, 3) : *rc::gen::inRange<int64_t>(1, 9);
  m.microbatches = *rc::gen::weightedOneOf<int64_t>({{3, rc::gen::just<int64_t>(1)}, {1, rc::gen::inRange<int64_t>(2, 4)}});
  const int64_t dp = l.dp_replicate * l.dp_shard;
  m.batch = m.microbatches * dp * *rc::gen::weightedOneOf<int64_t>({{3, rc::gen::just<int64_t>(1)}, {1, rc::gen::just<int64_t>(2)}});
  m.mlp_hidden = draw_hidden();
  draw_moe(m, l.ep, spec.need_moe);
  m.tie_embeddings = draw_bool();
  m.dtype = *rc::gen::weightedOneOf<DType>({{4, rc::gen::just(DType::f64)}, {1, rc::gen::just(DType::f32)}});
  return m;
}

inline OptimConfig draw_optim(const CaseSpec& spec) {
  OptimConfig o;
  if (spec.sgd_lr1_one_step) {
    o.kind = OptimKind::sgd, o.lr = 1.0;
    return o;
  }
  o.kind = spec.adam_family ? *rc::gen::elementOf(std::vector<OptimKind>{OptimKind::adam, OptimKind::adamw})
                            : *rc::gen::elementOf(std::vector<OptimKind>{OptimKind::adam, OptimKind::sgd, OptimKind::adamw});
  o.lr = *rc::gen::elementOf(std::vector<double>{3e-3, 0.1});
  if (o.kind == OptimKind::sgd) o.momentum = *rc::gen::elementOf(std::vector<double>{0.0, 0.9});
  if (o.kind != OptimKind::sgd) o.weight_decay = *rc::gen::elementOf(std::vector<double>{0.0, 0.1});
  // The tiny models' grad norms are about 0.3..3: 0.01 always clips, 100 never does.
  if (spec.draw_clip) o.clip = *rc::gen::elementOf(std::vector<double>{0.0, 0.01, 0.5, 100.0});
  return o;
}

// One whole case: layout first (so that shrinking keeps the layout that exposes a bug),
// then the model, optimizer, steps and seeds.
inline Scenario draw_case(const CaseSpec& spec) {
  Scenario s;
  s.name = "property_case";
  const Folding want = *rc::gen::elementOf(
      std::vector<Folding>{Folding::dense, Folding::dp2ep, Folding::tp2ep, Folding::cross_lane});
  s.layout = draw_dense_view(spec.want_tp || want == Folding::tp2ep || want == Folding::cross_lane);
  // A mode this dense view cannot hold (dp2ep with dp_shard 1, say) gives way to the next.
  const Folding modes[4] = {Folding::dense, Folding::dp2ep, Folding::tp2ep, Folding::cross_lane};
  if (want == Folding::dense) draw_expert_view(s.layout, want);
  for (int k = 0; k < 3 && want != Folding::dense && s.layout.ep == 1; ++k)
    draw_expert_view(s.layout, modes[(static_cast<int>(want) - 1 + k) % 3 + 1]);
  s.layout.sp = s.layout.tp > 1 && draw_bool();
  if (spec.allow_mpi)
    s.layout.backend = *rc::gen::weightedOneOf<std::string>({{9, rc::gen::just<std::string>("gloo")},
                                                             {1, rc::gen::just<std::string>("mpi")}});
  s.model = draw_model(s.layout, spec);
  s.optim = draw_optim(spec);
  s.steps = spec.sgd_lr1_one_step ? 1
            : spec.adam_family    ? *rc::gen::inRange<int64_t>(2, 4)
                                  : *rc::gen::inRange<int64_t>(1, 3);
  s.seed = *rc::gen::inRange<uint64_t>(0, 1u << 20);
  s.data_seed = *rc::gen::inRange<uint64_t>(0, 1u << 20);
  return s;
}

inline rc::Gen<Scenario> gen_case(CaseSpec spec) {
  return rc::gen::exec([spec] { return draw_case(spec); });
}

// Whether some parameter of the model has an uneven (or empty) shard under the layout.
struct ShardShape {
  bool uneven = false, empty = false;
};

inline ShardShape shard_shape(const Scenario& s) {
  const mesh::Mesh m(s.layout);
  ShardShape out;
  for (const ParamSpec& p : param_specs(s.model)) {
    const mesh::Layout l = mesh::param_layout(m, p);
    out.uneven = out.uneven || mesh::has_uneven_shards(m, l, p.shape);
    out.empty = out.empty || mesh::has_empty_shards(m, l, p.shape);
  }
  return out;
}

}  // namespace parity::property
