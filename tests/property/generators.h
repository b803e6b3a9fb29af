// RapidCheck generators for the property-based parity suite (issue 8): a valid layout for
// W = 2..8 in every folding mode of docs/design/foldings.md (doubled by two pipeline stages in
// some cases, under every data-parallel sharding), a model sized to it (sizes
// that do not divide, experts that get no tokens, top_k 1..E, dense and MoE layers, tied
// head, aux loss / bias update, softmax / sigmoid), the optimizer, dtype, steps and seeds.
//
// Everything is drawn inside `rc::gen::exec`, so RapidCheck shrinks the whole case: every
// choice is ordered simplest first (pick shrinks towards the first element, inRange towards
// the low end), so a failure shrinks towards W = 2, one step, one layer, fp64, adam.
// Header-only like tests/mesh/mesh_gen.h: tests/CMakeLists.txt compiles *_test.cpp only.
#pragma once
#include <cstdlib>
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
#include "model/batch_split.h"
#include "mesh/run_config.h"
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

// The folding mode as the mesh reads it from the groups (mesh::folding): ep 1 is the dense
// view only; EP groups inside the dense DP groups are dp2ep, EP groups that are the TP
// groups tp2ep, anything else cross-lane. Read from the groups, not the degrees, because
// the rank order and an etp outside {1, tp} change which groups the degrees give.
inline Folding folding_of(const LayoutConfig& l) {
  switch (mesh::folding(mesh::Mesh(l))) {
    case mesh::Folding::none: return Folding::dense;
    case mesh::Folding::dp2ep: return Folding::dp2ep;
    case mesh::Folding::tp2ep: return Folding::tp2ep;
    case mesh::Folding::cross_lane: return Folding::cross_lane;
  }
  return Folding::dense;
}

// etp outside {1, tp}: expert tensor parallel of its own degree (Megatron's etp).
inline bool free_etp(const LayoutConfig& l) { return l.etp != 1 && l.etp != l.tp; }

// A choice among `v`, uniform at every case size and shrinking towards v[0]. RapidCheck's
// own generators each miss one of the two: elementOf is uniform but never shrinks, and
// sizedElementOf / inRange shrink but scale with the case's size (0 at the first case, so
// inRange(0, 2) gives 0 in every case of the first half of a run). Sizes and counts are
// drawn with inRange on purpose (small cases first); choices go through pick.
template <class T> T pick(const std::vector<T>& v) { return *rc::gen::resize(100, rc::gen::sizedElementOf(v)); }

// false first, so that shrinking turns options off.
inline bool draw_bool() { return pick<int>({0, 1}) == 1; }

inline std::vector<int64_t> divisors_of(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Every layout of `world` ranks in folding mode `f`, simplest first (tp, then replication,
// then ep, etp and the rank order ascending): every ep and every etp with
// dp_replicate·ep·etp | world, under megatron's order and, where it gives other groups
// (tp > 1 and dp_shard > 1), DeepSpeed's; each kept when the mesh reads it as mode `f`.
inline std::vector<LayoutConfig> layouts_in_mode(int64_t world, Folding f) {
  std::vector<LayoutConfig> out;
  for (int64_t tp : divisors_of(world))
    for (int64_t dpr : divisors_of(world / tp)) {
      LayoutConfig l;
      l.world = world, l.tp = tp, l.dp_replicate = dpr, l.dp_shard = world / (tp * dpr);
      const int64_t per_replica = world / dpr;
      for (int64_t ep : divisors_of(per_replica))
        for (int64_t etp : divisors_of(per_replica / ep))
          for (RankOrder order : {RankOrder::megatron, RankOrder::deepspeed}) {
            if (order == RankOrder::deepspeed && (tp == 1 || l.dp_shard == 1)) continue;  // the same groups
            LayoutConfig x = l;
            x.ep = ep, x.etp = etp, x.order = order;
            if (folding_of(x) == f) out.push_back(x);
          }
    }
  std::stable_sort(out.begin(), out.end(), [](const LayoutConfig& a, const LayoutConfig& b) {
    return std::tie(a.tp, a.dp_replicate, a.ep, a.etp, a.order) < std::tie(b.tp, b.dp_replicate, b.ep, b.etp, b.order);
  });
  return out;
}

// Keeps the layouts of `ls` whose `key` is the `raw`-th smallest value among them (the
// largest when raw is past the end): a raw index that shrinks towards 0 picks ever smaller
// values, and keeps a meaning when the list changes under it (another mode, another W).
template <class Key> std::vector<LayoutConfig> keep_rank(std::vector<LayoutConfig> ls, Key key, int64_t raw) {
  std::vector<int64_t> vals;
  for (const LayoutConfig& l : ls) vals.push_back(key(l));
  std::sort(vals.begin(), vals.end());
  vals.erase(std::unique(vals.begin(), vals.end()), vals.end());
  const int64_t v = vals[static_cast<size_t>(std::min<int64_t>(raw, static_cast<int64_t>(vals.size()) - 1))];
  std::erase_if(ls, [&](const LayoutConfig& l) { return key(l) != v; });
  return ls;
}

// Context parallel taken out of dp_shard: cp = the cp_raw-th smallest divisor > 1 of
// dp_shard (none for cp_raw 0, or when dp_shard is 1), dp_shard / cp left. The world, the
// expert view, the TP groups and the dense DP groups (dp_replicate x dp_shard x cp) are
// those of the layout it came from, so the folding mode is too.
inline LayoutConfig with_cp(LayoutConfig l, int64_t cp_raw) {
  std::vector<int64_t> cps;
  for (int64_t c = 2; c <= l.dp_shard; ++c)
    if (l.dp_shard % c == 0) cps.push_back(c);
  if (cp_raw == 0 || cps.empty()) return l;
  l.cp = cps[static_cast<size_t>(std::min<int64_t>(cp_raw, static_cast<int64_t>(cps.size())) - 1)];
  l.dp_shard /= l.cp;
  return l;
}

// A layout in mode `f` on 2..8 ranks (1..8 with `allow_one`). Every choice is a raw number
// drawn independently of the mode and mapped onto what the mode allows: the world is the
// smallest size >= the raw one that can hold the mode (so every mode is drawn as often as
// the others and none falls back to another), then tp, dp_replicate and ep by rank among
// that world's layouts of the mode. Shrinking any raw number, or the mode, keeps the others'
// meaning, so a failure shrinks towards W 2 even when the mode has to change on the way.
// With `want_tp`, tp > 1 in four draws of five where the world allows it; dp_replicate > 1
// (HSDP) in about one draw of four.
inline LayoutConfig draw_layout(Folding f, bool want_tp, bool allow_one = false) {
  const int64_t lo = allow_one ? 1 : 2;
  const int64_t w_raw = *rc::gen::inRange<int64_t>(lo, 9), tp_raw = *rc::gen::inRange<int64_t>(0, 4);
  const bool tp_needed =
      want_tp && *rc::gen::weightedOneOf<bool>({{1, rc::gen::just(false)}, {4, rc::gen::just(true)}});
  const int64_t dpr_raw =
      *rc::gen::weightedOneOf<int64_t>({{3, rc::gen::just<int64_t>(0)}, {1, rc::gen::inRange<int64_t>(0, 4)}});
  const int64_t ep_raw = *rc::gen::inRange<int64_t>(0, 4), etp_raw = pick<int64_t>({0, 1, 2});
  const int64_t order_raw = pick<int64_t>({0, 1});
  const bool sp = draw_bool();
  const int64_t cp_raw =
      *rc::gen::weightedOneOf<int64_t>({{3, rc::gen::just<int64_t>(0)}, {1, rc::gen::inRange<int64_t>(1, 3)}});
  std::vector<int64_t> feasible;
  for (int64_t w = lo; w <= 8; ++w)
    if (!layouts_in_mode(w, f).empty()) feasible.push_back(w);
  int64_t world = feasible.back();
  for (int64_t w : feasible)
    if (w >= w_raw) {
      world = w;
      break;
    }
  std::vector<LayoutConfig> ls = layouts_in_mode(world, f);
  if (tp_needed) {
    std::vector<LayoutConfig> tps = ls;
    std::erase_if(tps, [](const LayoutConfig& l) { return l.tp == 1; });
    if (!tps.empty()) ls = tps;
  }
  ls = keep_rank(ls, [](const LayoutConfig& l) { return l.tp; }, tp_raw);
  ls = keep_rank(ls, [](const LayoutConfig& l) { return l.dp_replicate; }, dpr_raw);
  ls = keep_rank(ls, [](const LayoutConfig& l) { return l.ep; }, ep_raw);
  ls = keep_rank(ls, [](const LayoutConfig& l) { return l.etp; }, etp_raw);
  ls = keep_rank(ls, [](const LayoutConfig& l) { return static_cast<int64_t>(l.order); }, order_raw);
  LayoutConfig l = ls.front();
  l.sp = l.tp > 1 && sp;
  l = with_cp(l, cp_raw);
  if (l.cp > 1 && draw_bool()) l.cp_order = CpOrder::balanced;  // issue 47: Megatron's load-balanced chunks
  return l;
}

// Uniform over the four modes at every size (pick), so that the first cases of a short CI
// run are not all "dense only"; a failure shrinks towards dense where it still fails.
inline Folding draw_folding() {
  return pick<Folding>({Folding::dense, Folding::dp2ep, Folding::tp2ep, Folding::cross_lane});
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
  m.shared_experts = pick<int64_t>({0, 1});
  m.shared_hidden = draw_hidden();
  m.score = pick<Score>({Score::softmax, Score::sigmoid});
  m.route_norm = !draw_bool();
  m.route_scale = pick<double>({1.0, 2.5});
  m.aux_alpha = pick<double>({0.0, 0.01});
  m.bias_rate = pick<double>({0.0, 0.001});
}

// The multiples a model needs to fit every layout of `ls` (a checkpoint's saving and
// loading layouts, say): heads of tp, seq of tp under SP, batch of microbatches x dp,
// experts of ep.
struct Fit {
  int64_t tp = 1, sp_tp = 1, dp = 1, ep = 1;
  bool sp = false;
  int64_t seq = 1;  // seq's multiple: cp, times tp under SP; 2·cp under the balanced order
};

inline Fit fit_of(const std::vector<LayoutConfig>& ls) {
  Fit f;
  for (const LayoutConfig& l : ls) {
    f.tp = std::lcm(f.tp, l.tp), f.dp = std::lcm(f.dp, l.dp_replicate * l.dp_shard), f.ep = std::lcm(f.ep, l.ep);
    if (l.sp) f.sp = true, f.sp_tp = std::lcm(f.sp_tp, l.tp);
    f.seq = std::lcm(f.seq, l.cp * (l.sp ? l.tp : 1));
    if (l.cp_order == CpOrder::balanced) f.seq = std::lcm(f.seq, 2 * l.cp);
  }
  return f;
}

// A model sized to the layouts: heads % tp == 0, seq % tp == 0 under SP, batch >= microbatches
// (even over microbatches x dp or not); vocab and hidden sizes free (uneven vocab-parallel
// and MLP shards).
inline ModelConfig draw_model(const std::vector<LayoutConfig>& ls, const CaseSpec& spec) {
  const Fit fit = fit_of(ls);
  ModelConfig m;
  m.heads = fit.tp * *rc::gen::inRange<int64_t>(1, 3);
  // dim >= 2: with dim 1 every LayerNorm output is exactly 0, the gradients are pure
  // cancellation noise (norm ~1e-11 in fp32) and no relative comparison means anything
  // (a case found by this suite: grad norm 5.8e-11 vs 2.9e-11).
  m.dim = m.heads * *rc::gen::inRange<int64_t>(m.heads == 1 ? 2 : 1, 4);
  m.vocab = *rc::gen::inRange<int64_t>(2, 40);
  m.seq = fit.seq > 1 ? fit.seq * *rc::gen::inRange<int64_t>(1, 3) : *rc::gen::inRange<int64_t>(1, 9);
  m.microbatches = pick<int64_t>({1, 1, 1, 1, 1, 1, 2, 3});  // 1 in three draws of four
  // Even (a multiple of microbatches x dp) in about three draws of five; otherwise any batch
  // from microbatches (one sequence a micro-batch) to 2 x microbatches x dp: uneven data
  // parallel, often with a rank that gets no sequence of some micro-batch (model/batch_split.h).
  if (pick<int>({0, 0, 0, 1, 1}) == 0)
    m.batch = m.microbatches * fit.dp * pick<int64_t>({1, 1, 1, 2});
  else
    m.batch = *rc::gen::inRange<int64_t>(m.microbatches, 2 * m.microbatches * fit.dp + 1);
  m.mlp_hidden = draw_hidden();
  draw_moe(m, fit.ep, spec.need_moe);
  m.tie_embeddings = draw_bool();
  m.norm = pick<NormKind>({NormKind::layernorm, NormKind::rmsnorm});  // issue 47
  m.qk_norm = draw_bool();
  if (m.head_dim() % 2 == 0 && draw_bool()) {  // rope pairs a head's columns: Dh even
    m.position = Position::rope;
    m.rope_theta = pick<double>({10000.0, 10.0});
  }
  const Precision f64{DType::f64, Low::none, Low::none}, f32{DType::f32, Low::none, Low::none},
      bf16{DType::f32, Low::bf16, Low::none};  // the precision policy (docs/precision.md)
  m.set_precision(pick<Precision>({f64, f64, f64, f32, bf16}));
  // issue 47: key / value heads, a divisor of heads that every layout's tp splits (a multiple of
  // it) or replicates (a divisor of it); heads itself (multi-head) in about half the draws
  std::vector<int64_t> kv;
  for (int64_t d = 1; d < m.heads; ++d)
    if (m.heads % d == 0 && std::all_of(ls.begin(), ls.end(), [&](const LayoutConfig& l) {
          return d % l.tp == 0 || l.tp % d == 0;
        }))
      kv.push_back(d);
  if (!kv.empty() && draw_bool()) m.kv_heads = *rc::gen::elementOf(kv);
  // PARITY_PROPERTY_PRECISION=NAME: every case in that policy (ci/soak: >= 1000 cases each)
  if (const char* fixed = std::getenv("PARITY_PROPERTY_PRECISION"); fixed != nullptr && *fixed != '\0')
    m.set_precision(parse_precision(fixed, "PARITY_PROPERTY_PRECISION"));
  return m;
}

inline OptimConfig draw_optim(const CaseSpec& spec) {
  OptimConfig o;
  if (spec.sgd_lr1_one_step) {
    o.kind = OptimKind::sgd, o.lr = 1.0;
    return o;
  }
  o.kind = spec.adam_family ? pick<OptimKind>({OptimKind::adam, OptimKind::adamw})
                            : pick<OptimKind>({OptimKind::adam, OptimKind::sgd, OptimKind::adamw});
  o.lr = pick<double>({3e-3, 0.1});
  if (o.kind == OptimKind::sgd) o.momentum = pick<double>({0.0, 0.9});
  if (o.kind != OptimKind::sgd) o.weight_decay = pick<double>({0.0, 0.1});
  // The tiny models' grad norms are about 0.3..3: 0.01 always clips, 100 never does.
  if (spec.draw_clip) o.clip = pick<double>({0.0, 0.01, 0.5, 100.0});
  return o;
}

// layout.fsdp_dim: in half the cases a rule per family, each dim 0 (simplest first), the
// last dimension, "largest", or dim 1 (the last for 1-D LayerNorm weights): all valid for
// every tensor of the model. Drawn after everything else, so the other draws of a seed stay.
inline FsdpDimConfig draw_fsdp_dim() {
  FsdpDimConfig c{};
  if (!draw_bool()) return c;
  for (size_t f = 0; f < kFamilyCount; ++f) {
    const int k = pick<int>({0, 1, 2, 3});
    if (k == 1 || (k == 3 && static_cast<Family>(f) == Family::layernorm)) c[f] = {FsdpDimRule::Kind::dim, -1};
    else if (k == 2) c[f] = {FsdpDimRule::Kind::largest, 0};
    else if (k == 3) c[f] = {FsdpDimRule::Kind::dim, 1};
  }
  return c;
}

// Whether some parameter's FSDP dimension is not 0 under the layout.
inline bool fsdp_off_dim0(const LayoutConfig& l, const ModelConfig& model) {
  const mesh::Mesh m(l, model.layers);
  for (const ParamSpec& p : param_specs(model))
    if (!p.shape.empty() && mesh::fsdp_shard_dim(m, p) != 0) return true;
  return false;
}

// The backend: gloo mostly, mpi in one case of ten when allowed.
inline comm::Backend draw_backend(bool allow_mpi) {
  if (!allow_mpi) return comm::Backend::gloo;
  std::vector<comm::Backend> b(9, comm::Backend::gloo);
  b.push_back(comm::Backend::mpi);
  return pick(b);
}

// The data-parallel sharding (layout.dp_sharding, docs/parallel.md) and pipeline parallel
// (layout.pp), drawn last so that a seed's other draws stay: fsdp in two cases of five, else
// ddp, zero1 or zero2, the routed experts following the dense families in three cases of
// four; in one case of four on a world up to 4, two pipeline stages of that layout (the world
// doubled) under any of the three schedules (interleaved, two chunks per stage, needs an even
// micro-batch count and 4 layers: 1f1b otherwise). Each shrinks towards fsdp and no pipeline.
inline void draw_sharding_and_pipeline(Scenario& s) {
  const std::vector<DpSharding> modes = {DpSharding::fsdp, DpSharding::fsdp, DpSharding::ddp, DpSharding::zero1,
                                         DpSharding::zero2};
  s.layout.dp_sharding = s.layout.expert_dp_sharding = pick(modes);
  if (pick<int>({0, 0, 0, 1}) == 1) s.layout.expert_dp_sharding = pick(modes);
  const bool pp = pick<int>({0, 0, 0, 1}) == 1;
  const PpSchedule schedule = pick<PpSchedule>({PpSchedule::one_f_one_b, PpSchedule::gpipe, PpSchedule::interleaved});
  if (!pp || s.layout.world > 4) return;
  s.layout.pp = 2, s.layout.world *= 2, s.layout.pp_schedule = schedule;
  // interleaved: each of the 2 x 2 virtual stages holds a layer (layout.pp_virtual <= layers / pp)
  if (schedule == PpSchedule::interleaved && s.model.microbatches % 2 == 0 && s.model.layers >= 4)
    s.layout.pp_virtual = 2;
  else if (schedule == PpSchedule::interleaved) s.layout.pp_schedule = PpSchedule::one_f_one_b;
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
  s.layout.fsdp_dim = draw_fsdp_dim();
  draw_sharding_and_pipeline(s);
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
    s.layout.fsdp_dim = draw_fsdp_dim();  // saved under one FSDP dimension, loaded under another
    c.load.fsdp_dim = draw_fsdp_dim();
    return c;
  });
}

// Whether the batch splits unevenly over micro-batches x dense data-parallel ranks, and
// whether some rank gets no sequence of some micro-batch (model/batch_split.h).
struct BatchShape {
  bool uneven = false, empty_rank = false;
};

inline BatchShape batch_shape(const ModelConfig& m, const LayoutConfig& l) {
  const int64_t dp = l.dp_replicate * l.dp_shard;
  BatchShape out;
  out.uneven = m.batch % (m.microbatches * dp) != 0;
  for (int64_t mb = 0; mb < m.microbatches; ++mb)
    for (int64_t r = 0; r < dp; ++r)
      out.empty_rank = out.empty_rank || dp_sequences(m.batch, m.microbatches, mb, dp, r).size() == 0;
  return out;
}

// Whether some parameter of the model has an uneven (or empty) shard under the layout.
struct ShardShape {
  bool uneven = false, empty = false;
};

inline ShardShape shard_shape(const Scenario& s) {
  const mesh::Mesh m(s.layout, s.model.layers);
  ShardShape out;
  for (const ParamSpec& p : param_specs(s.model)) {
    const mesh::TensorLayout l = mesh::param_layout(m, p);
    out.uneven = out.uneven || mesh::has_uneven_shards(m, l, p.shape);
    out.empty = out.empty || mesh::has_empty_shards(m, l, p.shape);
  }
  return out;
}

}  // namespace parity::property
