// The parameter plan (parallel/param_plan.h): entries of hand-worked layouts, parameter by
// parameter (placements of the parameter, its gradient and its optimizer state, the sharding
// mode and the model-parallel splits read off them, the storage groups, the pipeline pair sync),
// and the bug zoo's mutations changing exactly the entries they should.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/error.h"
#include "core/inject.h"
#include "mesh/param_layout.h"
#include "parallel/param_plan.h"

namespace parity::param_plan_test {  // one namespace per file: the tests build as unity batches
namespace {

using mesh::GroupKind;
using mesh::MeshDim;

LayoutConfig layout(int64_t world, int64_t dp_shard, int64_t tp, int64_t ep, int64_t etp = 1, int64_t dpr = 1) {
  LayoutConfig l;
  l.world = world, l.dp_replicate = dpr, l.dp_shard = dp_shard, l.tp = tp, l.ep = ep, l.etp = etp;
  return l;
}

ParamPlan plan_of(const LayoutConfig& l, const ModelConfig& model = {}) {
  return param_plan(mesh::Mesh(l, model.layers), model, {});
}

const ParamEntry& at(const ParamPlan& p, std::string_view name) { return p[p.index(name)]; }

// fsdp 2 x tp 2, ep 2: every entry FSDP-sharded; the dense linears split over tp on their TP
// dimension, the routed experts over ep (dim 0) then etp; storage over each family's home group.
TEST(ParamPlan, FsdpTpEpEntries) {
  const ParamPlan p = plan_of(layout(4, 2, 2, 2));
  ASSERT_EQ(p.size(), param_specs(ModelConfig{}).size());
  for (size_t i = 0; i < p.size(); ++i) {
    SCOPED_TRACE(p[i].spec.name);
    EXPECT_EQ(p.index(p[i].spec.name), i);
    EXPECT_EQ(p[i].sharding, DpSharding::fsdp);
    EXPECT_EQ(p[i].grad, p[i].param);
    EXPECT_EQ(p[i].optimizer, p[i].param);
    EXPECT_FALSE(p[i].pair_synced);
    EXPECT_TRUE(p[i].stages.empty());
  }
  const ParamEntry& wq = at(p, "layers.0.attn.wq");
  EXPECT_EQ(mesh::layout_str(wq.param), "(Replicate, Shard(0), Replicate, Shard(1))");
  EXPECT_EQ(wq.mp, (std::vector<MpSplit>{{1, MeshDim::tp}}));
  EXPECT_EQ(wq.home, GroupKind::dense_dp);
  EXPECT_EQ(wq.param_storage, (Storage{true, GroupKind::dp_shard, GroupKind::dense_replicate}));
  EXPECT_EQ(at(p, "layers.0.attn.wo").mp, (std::vector<MpSplit>{{0, MeshDim::tp}}));
  EXPECT_TRUE(at(p, "layers.0.ln1.weight").mp.empty());
  EXPECT_TRUE(at(p, "layers.1.moe.router.gate").mp.empty());
  EXPECT_EQ(at(p, "embed.weight").mp, (std::vector<MpSplit>{{0, MeshDim::tp}}));
  const ParamEntry& w2 = at(p, "layers.1.moe.experts.w2");
  EXPECT_EQ(w2.mp, (std::vector<MpSplit>{{0, MeshDim::ep}, {1, MeshDim::etp}}));
  EXPECT_EQ(w2.home, GroupKind::edp);
  EXPECT_EQ(w2.param_storage, (Storage{true, GroupKind::edp_shard, GroupKind::dp_replicate}));
  EXPECT_EQ(w2.optimizer_storage, w2.param_storage);
  // the router's gradient is summed over tp: the entry carries its family's reduction
  EXPECT_TRUE(at(p, "layers.1.moe.router.gate").reduction.tp_sum);
  EXPECT_FALSE(wq.reduction.tp_sum);
}

// A rank's chunks: each split's size and this rank's coordinate on its mesh dimension.
TEST(ParamPlan, MpChunksAreTheRanksCoordinates) {
  const LayoutConfig l = layout(8, 4, 2, 2, 2);
  const mesh::Mesh m(l);
  const ParamPlan p = plan_of(l);
  const ParamEntry& w1 = at(p, "layers.1.moe.experts.w1");
  for (int r = 0; r < 8; ++r) {
    const std::vector<MpChunk> c = mp_chunks(w1, m, r);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].dim, 0);
    EXPECT_EQ(c[0].n, 2);
    EXPECT_EQ(c[0].i, m.coord(MeshDim::ep, r));
    EXPECT_EQ(c[1].dim, 2);
    EXPECT_EQ(c[1].i, m.coord(MeshDim::etp, r));
    const std::vector<MpChunk> t = mp_chunks(at(p, "lm_head.weight"), m, r);
    ASSERT_EQ(t.size(), 1u);
    EXPECT_EQ(t[0].dim, 1);
    EXPECT_EQ(t[0].i, m.coord(MeshDim::tp, r));
  }
}

// layout.dp_sharding per family: the mode read off the placements, the parameter whole over the
// home group, the gradient (zero2) and the optimizer state (zero1, zero2) FSDP's pieces.
TEST(ParamPlan, DpShardingModesFromThePlacements) {
  LayoutConfig l = layout(4, 4, 1, 2);
  l.dp_sharding = DpSharding::zero2, l.expert_dp_sharding = DpSharding::zero1;
  const mesh::Mesh m(l);
  const ParamPlan p = plan_of(l);
  const ParamEntry& wq = at(p, "layers.0.attn.wq");
  EXPECT_EQ(wq.sharding, DpSharding::zero2);
  EXPECT_TRUE(wq.zero() && wq.zero2());
  EXPECT_EQ(wq.param, mesh::param_placements(m, wq.spec).param);
  EXPECT_EQ(wq.grad, mesh::fsdp_layout(m, wq.spec));
  EXPECT_EQ(wq.optimizer, mesh::fsdp_layout(m, wq.spec));
  EXPECT_EQ(wq.param_storage, (Storage{false, GroupKind::dp_shard, GroupKind::dense_dp}));
  EXPECT_EQ(wq.optimizer_storage, (Storage{true, GroupKind::dp_shard, GroupKind::dense_replicate}));
  const ParamEntry& w1 = at(p, "layers.1.moe.experts.w1");
  EXPECT_EQ(w1.sharding, DpSharding::zero1);
  EXPECT_TRUE(w1.zero() && !w1.zero2());
  EXPECT_EQ(w1.grad, w1.param);
  EXPECT_EQ(w1.optimizer, mesh::fsdp_layout(m, w1.spec));
  EXPECT_EQ(w1.param_storage, (Storage{false, GroupKind::edp_shard, GroupKind::edp}));
  l.dp_sharding = DpSharding::ddp;
  const ParamPlan all_ddp = plan_of(l);
  const ParamEntry& ddp = at(all_ddp, "layers.0.attn.wq");
  EXPECT_EQ(ddp.sharding, DpSharding::ddp);
  EXPECT_FALSE(ddp.zero());
  EXPECT_EQ(ddp.optimizer, ddp.param);
  EXPECT_EQ(ddp.optimizer_storage, ddp.param_storage);
}

// Pipeline parallel with tied embeddings: embed.weight on the first and the last stage, synced
// over that pair once; untied, or with one stage, no entry is.
TEST(ParamPlan, TiedEmbeddingPairSync) {
  LayoutConfig l = layout(4, 2, 1, 1);
  l.pp = 2;
  ModelConfig c;
  c.layers = 4, c.dense_layers = 1, c.tie_embeddings = true;
  const ParamPlan p = plan_of(l, c);
  for (const ParamEntry& e : p.entries) EXPECT_EQ(e.pair_synced, e.spec.name == "embed.weight") << e.spec.name;
  const ParamEntry& emb = at(p, "embed.weight");
  EXPECT_EQ(emb.stages, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(emb.pair, (PairSync{0, 1, 1, false}));
  EXPECT_EQ(at(p, "final_ln.weight").stages, (std::vector<int64_t>{1}));
  EXPECT_FALSE(p.has("lm_head.weight"));
  EXPECT_THROW((void)p.index("lm_head.weight"), Error);
  c.tie_embeddings = false;
  for (const ParamEntry& e : plan_of(l, c).entries) EXPECT_FALSE(e.pair_synced) << e.spec.name;
  c.tie_embeddings = true;
  for (const ParamEntry& e : plan_of(layout(4, 4, 1, 1), c).entries) EXPECT_FALSE(e.pair_synced) << e.spec.name;
}

TEST(ParamPlan, PrecisionStoragePoints) {
  const ParamPlan p = param_plan(mesh::Mesh(layout(1, 1, 1, 1)), ModelConfig{}, parse_precision("bf16", "$"));
  for (const ParamEntry& e : p.entries) {
    EXPECT_EQ(e.master, DType::f32) << e.spec.name;
    EXPECT_EQ(e.compute_copy, Low::bf16) << e.spec.name;
    EXPECT_EQ(e.reduction.dp_dtype, Low::none) << e.spec.name;  // fp32 reductions under bf16
  }
}

// ---- the bug zoo's mutations of entries --------------------------------------------------

// The entries a mutation changes (by name), the other fields compared whole.
std::set<std::string> changed(const ParamPlan& a, const ParamPlan& b) {
  std::set<std::string> out;
  for (size_t i = 0; i < a.size(); ++i) {
    const ParamEntry &x = a[i], &y = b[i];
    if (!(x.reduction == y.reduction) || x.pair_synced != y.pair_synced || !(x.pair == y.pair) ||
        x.reduced_before_last_micro != y.reduced_before_last_micro || x.param != y.param || x.grad != y.grad ||
        x.optimizer != y.optimizer || x.mp != y.mp || !(x.param_storage == y.param_storage) ||
        x.compute_copy != y.compute_copy || x.master != y.master || x.fp8_blocks != y.fp8_blocks ||
        x.fp8_amax_over != y.fp8_amax_over)
      out.insert(x.spec.name);
  }
  return out;
}

ParamPlan mutated(ParamPlan p, std::string_view name) {
  EXPECT_TRUE(apply_mutation(p, name)) << name;
  return p;
}

TEST(ParamPlanMutation, PairSyncMutationsChangeTheTiedEntryOnly) {
  LayoutConfig l = layout(4, 2, 1, 1);
  l.pp = 2;
  ModelConfig c;
  c.layers = 4, c.dense_layers = 1, c.tie_embeddings = true;
  const ParamPlan ok = plan_of(l, c);
  const std::set<std::string> emb = {"embed.weight"};
  const ParamPlan none = mutated(ok, "pp_tied_embedding_not_synced");
  EXPECT_EQ(changed(ok, none), emb);
  EXPECT_EQ(at(none, "embed.weight").pair.times, 0);
  const ParamPlan twice = mutated(ok, "pp_embedding_synced_twice");
  EXPECT_EQ(changed(ok, twice), emb);
  EXPECT_EQ(at(twice, "embed.weight").pair.times, 2);
  const ParamPlan late = mutated(ok, "pp_embedding_synced_after_dp");
  EXPECT_EQ(changed(ok, late), emb);
  EXPECT_TRUE(at(late, "embed.weight").pair.adds_unreduced);
  // nothing to break without a tied pair
  EXPECT_TRUE(changed(plan_of(layout(4, 2, 2, 1)), mutated(plan_of(layout(4, 2, 2, 1)), "pp_embedding_synced_twice"))
                  .empty());
}

TEST(ParamPlanMutation, Zero2ReduceIncompleteMarksTheZero2Entries) {
  LayoutConfig l = layout(4, 4, 1, 2);
  l.dp_sharding = DpSharding::zero2;  // the experts stay fsdp
  const ParamPlan ok = plan_of(l);
  const ParamPlan bad = mutated(ok, "zero2_reduce_incomplete");
  for (const ParamEntry& e : bad.entries)
    EXPECT_EQ(e.reduced_before_last_micro, e.spec.family != Family::routed_experts) << e.spec.name;
  EXPECT_EQ(changed(ok, bad).size(), ok.size() - 3);  // every entry but the MoE layer's w1, w3, w2
  EXPECT_TRUE(changed(plan_of(layout(4, 4, 1, 2)), mutated(plan_of(layout(4, 4, 1, 2)), "zero2_reduce_incomplete"))
                  .empty());
}

// A family rule's mutation (reduction_plan.h) reaches every entry of its family, and only those.
TEST(ParamPlanMutation, FamilyMutationsReachEveryEntryOfTheFamily) {
  LayoutConfig l = layout(4, 2, 2, 2);
  l.sp = true;
  const ParamPlan ok = plan_of(l);
  const ParamPlan bad = mutated(ok, "clip_skips_experts");
  for (const ParamEntry& e : bad.entries)
    EXPECT_EQ(e.reduction.clip, e.spec.family != Family::routed_experts) << e.spec.name;
  std::set<std::string> ln;
  for (const ParamEntry& e : ok.entries)
    if (e.spec.family == Family::layernorm) ln.insert(e.spec.name);
  EXPECT_EQ(changed(ok, mutated(ok, "sp_layernorm_not_summed")), ln);
  EXPECT_FALSE(mutated(ok, "sp_layernorm_not_summed").families[Family::layernorm].tp_sum);
}

TEST(ParamPlanMutation, EveryMutationIsAZooInjectionAndOthersAreNone) {
  for (std::string_view name : param_plan_mutations()) EXPECT_NO_THROW(find_injection(name)) << name;
  EXPECT_EQ(param_plan_mutations().size(), plan_mutations().size() + 8);
  for (std::string_view name : {"grad_accum_in_bf16", "tokens_per_expert_local", "bias_update_sign", "nonsense"}) {
    ParamPlan p = plan_of(layout(4, 2, 2, 2));
    EXPECT_FALSE(apply_mutation(p, name)) << name;
  }
}

// issue 47: the QK-norm weights are replicated over tp (as every norm weight) but summed over it
// with or without SP (each lane normalises its own heads); LayerNorm's only under SP. Their zoo
// bug takes exactly them out of the sum, and the LayerNorm bug leaves them in.
TEST(ParamPlan, QkNormWeightsAreReplicatedAndSummedOverTp) {
  ModelConfig c;
  c.qk_norm = true;
  const ParamPlan ok = plan_of(layout(4, 2, 2, 2), c);
  const std::set<std::string> qk = {"layers.0.attn.q_norm.weight", "layers.0.attn.k_norm.weight",
                                    "layers.1.attn.q_norm.weight", "layers.1.attn.k_norm.weight"};
  for (const std::string& n : qk) {
    EXPECT_TRUE(at(ok, n).mp.empty()) << n;
    EXPECT_EQ(at(ok, n).spec.shape, Shape{c.head_dim()}) << n;
    EXPECT_TRUE(at(ok, n).reduction.tp_sum) << n;
  }
  EXPECT_FALSE(at(ok, "layers.0.ln1.weight").reduction.tp_sum);  // no SP: complete on every lane
  EXPECT_EQ(changed(ok, mutated(ok, "qk_norm_not_summed_tp")), qk);
  LayoutConfig sp = layout(4, 2, 2, 2);
  sp.sp = true;
  const ParamPlan with_sp = plan_of(sp, c);
  for (const std::string& n : qk) EXPECT_TRUE(at(mutated(with_sp, "sp_layernorm_not_summed"), n).reduction.tp_sum);
  for (const std::string& n : qk) EXPECT_FALSE(at(plan_of(layout(2, 2, 1, 1), c), n).reduction.tp_sum);  // tp 1
}

// issue 47, model.kv_heads: wk and wv split over tp where the KV heads are a multiple of it; with
// fewer KV heads than lanes, replicated over tp and their gradient summed over the lanes that
// share a head (the tp all-reduce: the other lanes add 0). Their two zoo bugs change exactly them.
TEST(ParamPlan, KvHeadsSplitOrReplicatedOverTp) {
  ModelConfig c;
  c.heads = 4, c.kv_heads = 2;
  const std::set<std::string> kv = {"layers.0.attn.wk", "layers.0.attn.wv", "layers.1.attn.wk", "layers.1.attn.wv"};
  const ParamPlan split = plan_of(layout(2, 1, 2, 1), c);  // one KV head per lane
  for (const std::string& n : kv) {
    EXPECT_EQ(at(split, n).spec.shape, (Shape{c.dim, c.kv_dim()})) << n;
    EXPECT_EQ(at(split, n).mp, (std::vector<MpSplit>{{1, MeshDim::tp}})) << n;
    EXPECT_FALSE(at(split, n).reduction.tp_sum) << n;
  }
  const ParamPlan shared = plan_of(layout(4, 1, 4, 1), c);  // each KV head over 2 lanes
  for (const std::string& n : kv) {
    EXPECT_TRUE(at(shared, n).mp.empty()) << n;
    EXPECT_EQ(mesh::layout_str(at(shared, n).param), "(Replicate, Shard(0), Replicate, Replicate)") << n;
    EXPECT_TRUE(at(shared, n).reduction.tp_sum) << n;
    EXPECT_EQ(at(shared, n).reduction.tp_sharers, 2) << n;
    EXPECT_FALSE(at(shared, n).reduction.tp_sum_again) << n;
  }
  EXPECT_FALSE(at(shared, "layers.0.attn.wq").reduction.tp_sum);
  EXPECT_EQ(at(shared, "layers.0.attn.wq").mp, (std::vector<MpSplit>{{1, MeshDim::tp}}));
  EXPECT_EQ(changed(shared, mutated(shared, "kv_grad_not_summed_shared")), kv);
  EXPECT_EQ(changed(shared, mutated(shared, "kv_grad_summed_tp_times")), kv);
  for (const std::string& n : kv) {
    EXPECT_FALSE(at(mutated(shared, "kv_grad_not_summed_shared"), n).reduction.tp_sum) << n;
    EXPECT_TRUE(at(mutated(shared, "kv_grad_summed_tp_times"), n).reduction.tp_sum_again) << n;
  }
  EXPECT_TRUE(changed(split, mutated(split, "kv_grad_not_summed_shared")).empty());  // nothing shared
  EXPECT_NE(param_table(shared, "attn.wk").find("sum over the 2 tp lanes sharing each KV head"), std::string::npos);
}

// The compute copy's format is the entry's (issue 44: the plan holds each parameter's storage points):
// the policy's storage format for every entry, and the zoo's outer_compute_copy_unrounded clears it for
// the parameters outside the layers only (under fp32 there is nothing to clear).
TEST(ParamPlanMutation, OuterComputeCopyUnroundedKeepsTheOuterParametersInTheirMasters) {
  Precision bf16;
  bf16.store = Low::bf16, bf16.compute = DType::f32;
  const ModelConfig model;
  const ParamPlan ok = param_plan(mesh::Mesh(layout(4, 2, 2, 2), model.layers), model, bf16);
  for (const ParamEntry& e : ok.entries) {
    EXPECT_EQ(e.compute_copy, Low::bf16) << e.spec.name;
    EXPECT_EQ(e.master, DType::f32) << e.spec.name;
  }
  const ParamPlan bad = mutated(ok, "outer_compute_copy_unrounded");
  EXPECT_EQ(changed(ok, bad), (std::set<std::string>{"embed.weight", "final_ln.bias", "final_ln.weight",
                                                     "lm_head.weight"}));
  for (const ParamEntry& e : bad.entries)
    EXPECT_EQ(e.compute_copy, e.spec.name.starts_with("layers.") ? Low::bf16 : Low::none) << e.spec.name;
  EXPECT_NE(param_table(ok, "embed.weight").find("| fp32, bf16 |"), std::string::npos);
  EXPECT_NE(param_table(bad, "embed.weight").find("| fp32, fp32 |"), std::string::npos);
  const ParamPlan fp32 = plan_of(layout(4, 2, 2, 2));
  EXPECT_TRUE(changed(fp32, mutated(fp32, "outer_compute_copy_unrounded")).empty());
}

// fp8's weight quantization points are the entries' (issue 44): the linears' weights (q, k, v, o and
// w1 / w2 / w3 of the MLPs and experts) one E4M3 tensor each, a routed expert's weight one per expert,
// the amax over the lanes that split them (tp; etp for the routed experts, none at etp 1); nothing else,
// and nothing at all outside the fp8 policy.
TEST(ParamPlan, Fp8WeightsAreQuantizedWhereTheirEntriesSay) {
  Precision fp8;
  fp8.store = Low::bf16, fp8.compute = DType::f32, fp8.fp8 = true;
  const ModelConfig model;
  const auto linear = [](const std::string& n) {
    for (const char* tail : {".wq", ".wk", ".wv", ".wo", ".w1", ".w2", ".w3"})
      if (n.ends_with(tail)) return true;
    return false;
  };
  for (const int64_t etp : {1, 2}) {
    SCOPED_TRACE("etp " + std::to_string(etp));
    const ParamPlan p = param_plan(mesh::Mesh(layout(4, 2, 2, 2, etp), model.layers), model, fp8);
    int64_t quantized = 0;
    for (const ParamEntry& e : p.entries) {
      SCOPED_TRACE(e.spec.name);
      if (!linear(e.spec.name)) {
        EXPECT_EQ(e.fp8_blocks, 0);
        continue;
      }
      ++quantized;
      const bool routed = e.spec.family == Family::routed_experts;
      EXPECT_EQ(e.fp8_blocks, routed ? model.experts : 1);
      if (routed && etp == 1) EXPECT_FALSE(e.fp8_amax_over.has_value());
      else EXPECT_EQ(e.fp8_amax_over, routed ? GroupKind::etp : GroupKind::tp);
    }
    EXPECT_GE(quantized, 4 * model.layers);
  }
  const ParamPlan p = param_plan(mesh::Mesh(layout(4, 2, 2, 2, 2), model.layers), model, fp8);
  EXPECT_NE(param_table(p, "layers.0.attn.wq").find("| fp32, bf16, E4M3 x1 (amax over tp) |"), std::string::npos);
  EXPECT_EQ(param_table(p, "embed.weight").find("E4M3"), std::string::npos);
  for (const ParamEntry& e : plan_of(layout(4, 2, 2, 2)).entries) EXPECT_EQ(e.fp8_blocks, 0) << e.spec.name;
}

TEST(ParamPlanMutation, NothingInjectedLeavesTheCorrectPlan) {
  if (!injected_names().empty()) GTEST_SKIP() << "PARITY_INJECT is set";
  const ParamPlan ok = plan_of(layout(4, 2, 2, 2));
  EXPECT_TRUE(changed(ok, with_injected(ok)).empty());
}

// The family table (what explain printed before the plan) names each family's reduction.
TEST(ParamPlan, FamilyTableNamesEachFamilysReduction) {
  LayoutConfig l = layout(4, 2, 2, 2);
  l.sp = true;
  const std::string t = plan_table(plan_of(l));
  EXPECT_NE(t.find("| layernorm | sum over tp | dense_dp | sum | fp64, fp64 | first replica | yes |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| routed_experts | - | edp | sum | -, fp64 | first replica | yes |"), std::string::npos) << t;
  EXPECT_EQ(t.find("shared_experts"), std::string::npos) << t;
}

// layout.dp_sharding: the family table says each family's mode (the experts' their own).
TEST(ParamPlan, FamilyTableSaysTheShardingMode) {
  LayoutConfig l = layout(4, 4, 1, 2);
  l.dp_sharding = DpSharding::zero2, l.expert_dp_sharding = DpSharding::ddp;
  const std::string t = plan_table(plan_of(l));
  EXPECT_NE(t.find("| attention | - | dense_dp | sum (zero2: reduce-scatter; optimizer on the shard, all-gather) |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| routed_experts | - | edp | sum (ddp: all-reduce) |"), std::string::npos) << t;
}

// The table: one row per parameter, its placements, splits, storage and reductions in order.
TEST(ParamPlan, TableRowPerParameter) {
  LayoutConfig l = layout(4, 4, 1, 2);
  l.dp_sharding = DpSharding::zero2;
  const std::string t = param_table(plan_of(l));
  EXPECT_NE(t.find("| layers.0.attn.wq | (Replicate, Replicate, Replicate, Shard(1)) | "
                   "(Replicate, Shard(0), Replicate, Shard(1)) | (Replicate, Shard(0), Replicate, Shard(1)) | "
                   "dim 1 / tp | "
                   "whole over dense_dp; shard over dp_shard, x dense_replicate | 1. dense_dp sum (zero2: "),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| layers.1.moe.experts.w1 | (Replicate, StridedShard(0, 2), Shard(0), Shard(2)) | = | = | "
                   "dim 0 / ep, dim 2 / etp | shard over edp_shard, x dp_replicate | 1. edp sum | first replica, "
                   "clipped | fp64, fp64 |"),
            std::string::npos)
      << t;
}

}  // namespace
}  // namespace parity::param_plan_test
