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

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <tuple>
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

// Every layout of `world` ranks in folding mode `f`, simplest first (tp, then replication,
// then ep ascending), so that elementOf shrinks towards the plainest layout of the mode.
// FOLDINGS.md: dense only has ep 1 (etp 1 or tp); dp2ep has etp = tp and ep | dp_shard;
// tp2ep has etp 1 and ep = tp; cross-lane has tp > 1, etp 1 and ep | world / dp_replicate
// with ep not in {1, tp}.
inline std::vector<LayoutConfig> layouts_in_mode(int64_t world, Folding f) {
  std::vector<LayoutConfig> out;
  for (int64_t tp : divisors_of(world))
    for (int64_t dpr : divisors_of(world / tp)) {
      LayoutConfig l;
      l.world = world, l.tp = tp, l.dp_replicate = dpr, l.dp_shard = world / (tp * dpr);
      const int64_t per_replica = world / dpr;
      const auto add = [&](int64_t ep, int64_t etp) {
        LayoutConfig x = l;
        x.ep = ep, x.etp = etp;
        out.push_back(x);
      };
      if (f == Folding::dense) {
        add(1, 1);
        if (tp > 1) add(1, tp);
      } else if (f == Folding::dp2ep) {
        for (int64_t ep : divisors_of(l.dp_shard))
          if (ep > 1) add(ep, tp);
      } else if (f == Folding::tp2ep) {
        if (tp > 1) add(tp, 1);
      } else if (tp > 1) {  // with tp 1, etp 1 = tp: that is dp2ep
        for (int64_t ep : divisors_of(per_replica))
          if (ep > 1 && ep != tp) add(ep, 1);
      }
    }
  std::stable_sort(out.begin(), out.end(), [](const LayoutConfig& a, const LayoutConfig& b) {
    return std::tie(a.tp, a.dp_replicate, a.ep, a.etp) < std::tie(b.tp, b.dp_replicate, b.ep, b.etp);
  });
  return out;
}

// A layout in mode `f` on 2..8 ranks (1..8 with `allow_one`), or its dense view for W = 1:
// the world is drawn among the sizes that can hold the mode, so every mode is drawn as
// often as the others and none silently falls back to another. With `want_tp`, tp > 1 in
// four draws of five where the world allows it.
inline LayoutConfig draw_layout(Folding f, bool want_tp, bool allow_one = false) {
  std::vector<int64_t> worlds;
  for (int64_t w = allow_one ? 1 : 2; w <= 8; ++w)
    if (!layouts_in_mode(w, f).empty()) worlds.push_back(w);
  // One inRange over the feasible sizes: RapidCheck shrinks it step by step to the smallest.
  const int64_t world = worlds[static_cast<size_t>(*rc::gen::inRange<size_t>(0, worlds.size()))];
  std::vector<LayoutConfig> ls = layouts_in_mode(world, f);
  if (want_tp && *rc::gen::weightedOneOf<bool>({{1, rc::gen::just(false)}, {4, rc::gen::just(true)}})) {
    std::vector<LayoutConfig> tps;
    for (const LayoutConfig& l : ls)
      if (l.tp > 1) tps.push_back(l);
    if (!tps.empty()) ls = tps;
  }
  // Replication (HSDP) in about one draw of four: three in four keep dp_replicate 1.
  std::vector<LayoutConfig> flat;
  for (const LayoutConfig& l : ls)
    if (l.dp_replicate == 1) flat.push_back(l);
  if (flat.empty()) flat = ls;
  LayoutConfig l = *rc::gen::weightedOneOf<LayoutConfig>({{3, rc::gen::elementOf(flat)}, {1, rc::gen::elementOf(ls)}});
  l.sp = l.tp > 1 && draw_bool();
  return l;
}

// Uniform over the four modes at every size: RapidCheck scales elementOf / inRange with the
// case's size (0 at the first case), which would draw "dense only" for all the small early
// cases and leave cross-lane to the last few of a short CI run. Shrinking still goes to dense.
inline Folding draw_folding() {
  return *rc::gen::resize(
      100, rc::gen::elementOf(std::vector<Folding>{Folding::dense, Folding::dp2ep, Folding::tp2ep, Folding::cross_lane}));
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

// The multiples a model needs to fit every layout of `ls` (a checkpoint's saving and
// loading layouts, say): heads of tp, seq of tp under SP, batch of microbatches x dp,
// experts of ep.
struct Fit {
  int64_t tp = 1, sp_tp = 1, dp = 1, ep = 1;
  bool sp = false;
};

inline Fit fit_of(const std::vector<LayoutConfig>& ls) {
  Fit f;
  for (const LayoutConfig& l : ls) {
    f.tp = std::lcm(f.tp, l.tp), f.dp = std::lcm(f.dp, l.dp_replicate * l.dp_shard), f.ep = std::lcm(f.ep, l.ep);
    if (l.sp) f.sp = true, f.sp_tp = std::lcm(f.sp_tp, l.tp);
  }
  return f;
}

// A model sized to the layouts: heads % tp == 0, seq % tp == 0 under SP, batch divisible by
// microbatches x dp; vocab and hidden sizes free (uneven vocab-parallel and MLP shards).
inline ModelConfig draw_model(const std::vector<LayoutConfig>& ls, const CaseSpec& spec) {
  const Fit fit = fit_of(ls);
  ModelConfig m;
  m.heads = fit.tp * *rc::gen::inRange<int64_t>(1, 3);
  // dim >= 2: with dim 1 every LayerNorm output is exactly 0, the gradients are pure
  // cancellation noise (norm ~1e-11 in fp32) and no relative comparison means anything
  // (a case found by this suite: grad norm 5.8e-11 vs 2.9e-11).
  m.dim = m.heads * *rc::gen::inRange<int64_t>(m.heads == 1 ? 2 : 1, 4);
  m.vocab = *rc::gen::inRange<int64_t>(2, 40);
  m.seq = fit.sp ? fit.sp_tp * *rc::gen::inRange<int64_t>(1, 3) : *rc::gen::inRange<int64_t>(1, 9);
  m.microbatches = *rc::gen::weightedOneOf<int64_t>({{3, rc::gen::just<int64_t>(1)}, {1, rc::gen::inRange<int64_t>(2, 4)}});
  m.batch = m.microbatches * fit.dp * *rc::gen::weightedOneOf<int64_t>({{3, rc::gen::just<int64_t>(1)}, {1, rc::gen::just<int64_t>(2)}});
  m.mlp_hidden = draw_hidden();
  draw_moe(m, fit.ep, spec.need_moe);
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

// The backend: gloo mostly, mpi in one case of ten when allowed.
inline std::string draw_backend(bool allow_mpi) {
  if (!allow_mpi) return "gloo";
  return *rc::gen::weightedOneOf<std::string>({{9, rc::gen::just<std::string>("gloo")}, {1, rc::gen::just<std::string>("mpi")}});
}

// One whole case: folding mode and layout first (so that shrinking keeps the layout that
// exposes a bug), then the model, optimizer, steps and seeds.
inline Scenario draw_case(const CaseSpec& spec) {
  Scenario s;
  s.name = "property_case";
  s.layout = draw_layout(draw_folding(), spec.want_tp);
  s.layout.backend = draw_backend(spec.allow_mpi);
  s.model = draw_model({s.layout}, spec);
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

// Property 7: a case trained and saved under one layout, and the layout (any folding mode,
// world 1..8, the one-device baseline included) that loads its checkpoint; the model fits both.
struct CkptCase {
  Scenario save;       // trained save.steps steps, then saved
  LayoutConfig load;   // loads the checkpoint, then saves it again
};

inline rc::Gen<CkptCase> gen_ckpt_case() {
  return rc::gen::exec([] {
    CkptCase c;
    Scenario& s = c.save;
    s.name = "property_ckpt_case";
    s.layout = draw_layout(draw_folding(), false);
    s.layout.backend = draw_backend(true);
    c.load = draw_layout(draw_folding(), false, /*allow_one=*/true);
    c.load.backend = draw_backend(c.load.world > 1);
    s.model = draw_model({s.layout, c.load}, CaseSpec{});
    s.optim = draw_optim(CaseSpec{});
    s.steps = *rc::gen::inRange<int64_t>(1, 3);
    s.seed = *rc::gen::inRange<uint64_t>(0, 1u << 20);
    s.data_seed = *rc::gen::inRange<uint64_t>(0, 1u << 20);
    return c;
  });
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
