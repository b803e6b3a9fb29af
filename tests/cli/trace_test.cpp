// The traced step (issue 45, docs/verdict.md "The trace") through the binary: for each layout degree
// the canonical mapping places (model/trace.h for_each_global_index), a one-element change planted in one
// rank's traced shard (PARITY_TRACE_PLANT: SITE:LAYER:DIR:RANK:RECORD:INDEX, +1 on local element
// INDEX of that rank's RECORD-th record of the key) must be named with its tensor, micro-batch,
// rank and global element, and nothing before it in the data flow. The expected element is worked
// out here by hand from each scenario's shape (dim 16, seq 8, vocab 64, 4 heads): a mapping that
// misplaces a shard names another element, or an earlier tensor whose every element moved.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/parity_cmd.h"

namespace parity {
namespace {

using test::parity_cmd;

std::string traced(const std::string& scenario, const std::string& plant, const std::string& extra = "") {
  if (plant.empty())
    unsetenv("PARITY_TRACE_PLANT");
  else
    setenv("PARITY_TRACE_PLANT", plant.c_str(), 1);
  const test::Result r = parity_cmd("run " + std::string(PARITY_SOURCE_DIR) + "/scenarios/" + scenario +
                                    ".json --backend sim --steps 1 --trace " + extra);
  unsetenv("PARITY_TRACE_PLANT");
  EXPECT_EQ(r.code, plant.empty() && extra.empty() ? 0 : r.code) << r.out;
  return r.out;
}

// The first diverging line names exactly `what`, and its element is the planted one: the layout's
// value is the baseline's + 1 (a partial sum compared before its reduction, or an element placed
// wrong, reads another difference).
void expect_named(const std::string& out, const std::string& what) {
  const std::string head = "  first diverging: " + what + " ";
  const size_t at = out.find(head);
  ASSERT_NE(at, std::string::npos) << "expected " << what << "\n" << out;
  const std::string rest = out.substr(at + head.size());
  const size_t against = rest.find(" against ");
  ASSERT_NE(against, std::string::npos) << out;
  const double got = std::stod(rest.substr(0, against)), ref = std::stod(rest.substr(against + 9));
  EXPECT_NEAR(got - ref, 1.0, 1e-4) << "got " << got << " ref " << ref << "\n" << out;
}

// tp: q's columns are this lane's heads, from wq's column offset (8 of 16 on lane 1).
TEST(TraceMapping, TensorParallelColumns) {
  // rank 1's local row 10 (sequence 1, position 2), local column 3 -> global column 8 + 3
  expect_named(traced("tp2", "q:0:fwd:1:0:83"),
               "layer 0 q, forward, micro-batch 0, rank 1 (tp 1, etp 1), element [sequence 1, position 2, column 11]");
}

// tp: wo's row-parallel partial sums are compared after their reduction (every lane holds the sum).
TEST(TraceMapping, TensorParallelRowsComparedAfterTheirReduction) {
  expect_named(traced("tp2", "attn_out:0:fwd:1:0:163"),
               "layer 0 attn_out, forward, micro-batch 0, rank 1 (tp 1, etp 1), element [sequence 1, position 2, "
               "column 3]");
}

// tp: the vocabulary-parallel logits, lane 1 holding columns 32..63.
TEST(TraceMapping, VocabParallelLogits) {
  expect_named(traced("tp2", "logits:2:fwd:1:0:325"),
               "logits, forward, micro-batch 0, rank 1 (tp 1, etp 1), element [sequence 1, position 2, column 37]");
}

// sp: lane 1 holds positions 4..7 of every sequence of the residual stream.
TEST(TraceMapping, SequenceParallelChunks) {
  expect_named(traced("tp2_sp", "ln1:1:fwd:1:0:83"),
               "layer 1 ln1, forward, micro-batch 0, rank 1 (tp 1, etp 1), element [sequence 1, position 5, column 3]");
}

// cp: rank 1 holds positions 4..7 (the gradient arriving at k, reduce-scattered back to its owner).
TEST(TraceMapping, ContextParallelChunks) {
  expect_named(traced("cp2", "k:0:bwd:1:0:98"),
               "layer 0 k, backward, micro-batch 0, rank 1 (cp 1), element [sequence 1, position 6, column 2]");
}

// cp in the load-balanced order (layout.cp_order balanced, issue 47): rank 1 holds blocks 1 and 2 of
// S / (2 cp) = 2 positions (2, 3 and 4, 5); its chunk's row 2 is position 4, not the contiguous order's 6.
TEST(TraceMapping, ContextParallelBalancedOrder) {
  expect_named(traced("cp2_balanced_rope", "k:0:bwd:1:0:98"),
               "layer 0 k, backward, micro-batch 0, rank 1 (cp 1), element [sequence 1, position 4, column 2]");
}

// cp x sp: cp rank 1's chunk (positions 4..7), of it tp lane 1's half (6, 7).
TEST(TraceMapping, ContextAndSequenceParallel) {
  expect_named(traced("cp2_tp2_sp", "h_mid:0:fwd:3:0:49"),
               "layer 0 h_mid, forward, micro-batch 0, rank 3 (cp 1, tp 1), element [sequence 1, position 7, "
               "column 1]");
}

// dp, micro-batches and an uneven split: batch 9 in 2 micro-batches (0..4, 5..8) over 4 ranks:
// rank 2 holds sequence 4 in micro-batch 0 and 7 in micro-batch 1; rank 3 none in micro-batch 0
// (no record) and 8 in micro-batch 1.
TEST(TraceMapping, DataParallelMicroBatchesAndUnevenSplit) {
  expect_named(traced("fsdp4_uneven_b9_mb2", "ffn_out:0:fwd:2:1:52"),
               "layer 0 ffn_out, forward, micro-batch 1, rank 2 (dp_shard 2), element [sequence 7, position 3, "
               "column 4]");
  expect_named(traced("fsdp4_uneven_b9_mb2", "ln2:1:bwd:3:0:80"),
               "layer 1 ln2, backward, micro-batch 1, rank 3 (dp_shard 3), element [sequence 8, position 5, column 0]");
}

// pp: stage 1 holds layers 2 and 3; its third backward of layer 3 is micro-batch 2 (sequences 4, 5).
TEST(TraceMapping, PipelineStages) {
  expect_named(traced("pp2_1f1b", "attn:3:bwd:1:2:149"),
               "layer 3 attn, backward, micro-batch 2, rank 1 (pp 1), element [sequence 5, position 1, column 5]");
}

// ep: the MoE block compared at its output (rank 3 holds sequences 6, 7).
TEST(TraceMapping, ExpertParallelAtTheBlockOutput) {
  expect_named(traced("fsdp4_ep2", "ffn_out:1:fwd:3:0:143"),
               "layer 1 ffn_out, forward, micro-batch 0, rank 3 (dp_shard 3, ep 1), element [sequence 7, position 0, "
               "column 15]");
}

// ep with dp-sharded experts, inside the block: each routed expert's output at its (token, slot), the
// rows the dispatch plan sent away and back (K·dim = 32 columns: local row 9 = sequence 7, position 1;
// column 21 = slot 1, column 5); the gradient arriving at the router's scores (4 experts).
TEST(TraceMapping, ExpertParallelInsideTheBlock) {
  expect_named(traced("fsdp4_ep2", "experts:1:fwd:3:0:309"),
               "layer 1 experts, forward, micro-batch 0, rank 3 (dp_shard 3, ep 1), element [sequence 7, position 1, "
               "slot 1, column 5]");
  expect_named(traced("fsdp4_ep2", "scores:1:bwd:2:0:14"),
               "layer 1 scores, backward, micro-batch 0, rank 2 (dp_shard 2, ep 0), element [sequence 4, position 3, "
               "expert 2]");
}

// etp over tp without sequence parallel: tp lane 1 routes rows chunk(16, 2, 1) = 8..15 of its copies
// (rank 5: dp_shard 2, sequences 4, 5): its local row 3 is flat row 11, sequence 5, position 3.
TEST(TraceMapping, ExpertTensorParallelRoutedRows) {
  expect_named(traced("fsdp4_tp2_ep2_etp2", "router:1:fwd:5:0:13"),
               "layer 1 router, forward, micro-batch 0, rank 5 (dp_shard 2, tp 1, ep 0, etp 1), element [sequence 5, "
               "position 3, expert 1]");
  expect_named(traced("fsdp4_tp2_ep2_etp2", "experts:1:bwd:3:0:81"),
               "layer 1 experts, backward, micro-batch 0, rank 3 (dp_shard 1, tp 1, ep 1, etp 1), element [sequence 3, "
               "position 2, slot 1, column 1]");
}

// etp under sequence parallel: lane 1 routes its own positions 4..7 of sequences 4..7 (rank 3); the
// shared expert's output is compared after its lanes' reduction.
TEST(TraceMapping, ExpertTensorParallelUnderSequenceParallel) {
  expect_named(traced("fsdp2_tp2_sp_aux", "route_w:1:fwd:3:0:11"),
               "layer 1 route_w, forward, micro-batch 0, rank 3 (dp_shard 1, tp 1, etp 1), element [sequence 5, "
               "position 5, slot 1]");
  expect_named(traced("fsdp2_tp2_sp_aux", "shared:1:fwd:3:0:87"),
               "layer 1 shared, forward, micro-batch 0, rank 3 (dp_shard 1, tp 1, etp 1), element [sequence 5, "
               "position 5, column 7]");
}

// ep with cp: cp rank 1 routes positions 4..7 of every sequence (batch 4: 16 rows).
TEST(TraceMapping, ExpertParallelWithContextParallel) {
  expect_named(traced("cp2_ep2", "combine:1:fwd:1:0:147"),
               "layer 1 combine, forward, micro-batch 0, rank 1 (cp 1, ep 1), element [sequence 2, position 5, "
               "column 3]");
  expect_named(traced("cp2_ep2", "route_w:1:bwd:1:0:14"),
               "layer 1 route_w, backward, micro-batch 0, rank 1 (cp 1, ep 1), element [sequence 1, position 7, "
               "slot 0]");
}

// tp with grouped-query attention, kv_heads 2 over tp 4: each KV head is replicated on two lanes, whose dk, dv
// are each their query heads' part; the trace sums them over the lanes (every lane records the whole
// (rows, kv_dim) gradient): rank 1's local row 10 (sequence 1, position 2), column 3 of the 8.
TEST(TraceMapping, SharedKvHeadsGradientsSummedOverTheirLanes) {
  expect_named(traced("tp4_gqa2", "k:0:bwd:1:0:83"),
               "layer 0 k, backward, micro-batch 0, rank 1 (tp 1), element [sequence 1, position 2, column 3]");
}

// A clean layout traced: every tensor within its bound, every element placed (no "not mapped").
TEST(Trace, CleanLayoutTracedPasses) {
  for (const char* s : {"cp2_tp2_sp", "fsdp4_uneven_b9_mb2", "pp2_1f1b", "bf16_tp2_sp", "fsdp4_tp2_ep2_etp2",
                        "fsdp2_tp2_sp_aux", "cp2_ep2", "tp4_gqa2"}) {
    const std::string out = traced(s, "");
    EXPECT_NE(out.find("  no traced tensor over its bound"), std::string::npos) << s << "\n" << out;
    EXPECT_EQ(out.find("not mapped"), std::string::npos) << s << "\n" << out;
  }
}

// A failing verdict traces its first failing step by itself, and the root line names where the bug
// enters: the cp attention backward that keeps its own queries' part of dK, dV (docs/zoo.md).
TEST(Trace, FailingVerdictNamesTheOpOnItsRootLine) {
  const test::Result r = parity_cmd("run " + std::string(PARITY_SOURCE_DIR) +
                                    "/scenarios/cp2_dense.json --backend sim --steps 1 --inject cp_kv_grad_local");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("; enters at layer 1 v, backward, micro-batch 0, rank "), std::string::npos) << r.out;
}

// Inside the MoE block: the EP dispatch's off-by-one counts enter at the experts' outputs (rows sent to
// the wrong expert), the aux loss's statistics over one lane's chunks at the scores' gradient, the
// combine's weights applied twice on one EP rank at the combine.
TEST(Trace, MoeBugsNamedAtTheirOp) {
  const std::string dir = std::string(PARITY_SOURCE_DIR) + "/scenarios/";
  const test::Result ep = parity_cmd("run " + dir + "fsdp4_ep2.json --backend sim --steps 1 --inject "
                                     "alltoallv_counts_off_by_one");
  EXPECT_EQ(ep.code, 1) << ep.out;
  EXPECT_NE(ep.out.find("; enters at layer 1 experts, forward, micro-batch 0, rank "), std::string::npos) << ep.out;
  const test::Result aux = parity_cmd("run " + dir + "fsdp2_tp2_sp_aux.json --backend sim --steps 1 --inject "
                                      "aux_stats_per_lane");
  EXPECT_EQ(aux.code, 1) << aux.out;
  EXPECT_NE(aux.out.find("; enters at layer 1 scores, backward, micro-batch 0, rank "), std::string::npos) << aux.out;
  // a forward-only bug on one EP rank (the combine's weights applied twice): named at the combine, on that rank
  const test::Result comb = parity_cmd("run " + dir + "fsdp4_ep2.json --backend sim --steps 1 --inject "
                                       "combine_weights_twice_ep");
  EXPECT_EQ(comb.code, 1) << comb.out;
  EXPECT_NE(comb.out.find("; enters at layer 1 combine, forward, micro-batch 0, rank 1 (dp_shard 1, ep 1)"),
            std::string::npos)
      << comb.out;
}

// `parity explain --trace`: each rank's traced tensors and where they land. fsdp4_tp2_ep2_etp2's rank 5
// (dp_shard 2: sequences 4, 5; tp lane 1): the residual stream whole, its heads' columns 8-15, the
// vocabulary's 32-63, and inside the MoE block the rows it routes: chunk(16, 2, 1) = sequence 5.
TEST(TraceExplain, PlacementsPerRank) {
  const test::Result r =
      parity_cmd("explain " + std::string(PARITY_SOURCE_DIR) + "/scenarios/fsdp4_tp2_ep2_etp2.json --trace");
  EXPECT_EQ(r.code, 0) << r.out;
  const std::string who = "| rank 5 (dp_shard 2, tp 1, ep 0, etp 1) | 0 | ";
  for (const std::string& row :
       {who + "4-5 | 0-7 | all | embed fwd+bwd; ln1 L0-1 fwd+bwd; attn_out L0-1 fwd; h_mid L0-1 fwd+bwd; ln2 L0-1 "
              "fwd+bwd; ffn_out L0-1 fwd; h_out L0-1 fwd+bwd; final_ln fwd+bwd; shared L1 fwd |",
        who + "4-5 | 0-7 | 8-15 of 16 | q L0-1 fwd+bwd; k L0-1 fwd+bwd; v L0-1 fwd+bwd; attn L0-1 fwd+bwd |",
        who + "5 | 0-7 | all | router L1 fwd+bwd; scores L1 fwd+bwd; route_w L1 fwd+bwd; experts L1 fwd+bwd; "
              "combine L1 fwd |",
        who + "4-5 | 0-7 | 32-63 of 64 | logits fwd+bwd |"})
    EXPECT_NE(r.out.find(row + "\n"), std::string::npos) << row << "\n" << r.out;
  // cp x sp: cp rank 1's chunk (positions 4-7), of it tp lane 1's stream rows 6-7
  const test::Result cp =
      parity_cmd("explain " + std::string(PARITY_SOURCE_DIR) + "/scenarios/cp2_tp2_sp.json --trace");
  EXPECT_NE(cp.out.find("| rank 3 (cp 1, tp 1) | 0 | 0-"), std::string::npos) << cp.out;
  EXPECT_NE(cp.out.find(" | 6-7 | all | embed fwd+bwd; ln1 L0-"), std::string::npos) << cp.out;
}

}  // namespace
}  // namespace parity
