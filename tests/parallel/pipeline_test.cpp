// Pipeline parallel's schedules (parallel/pipeline.h): each stage's order as the schedule
// defines it, and the global order the run executes.
#include "parallel/pipeline.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

namespace parity {
namespace {

using K = PipeOp::Kind;

std::string order_str(const std::vector<PipeOp>& ops) {
  std::string out;
  for (const PipeOp& op : ops) out += (out.empty() ? "" : " ") + pipe_op_str(op);
  return out;
}

// The textbook orders, written out by hand: GPipe all forwards then all backwards; 1F1B with
// pp - s - 1 warm-up forwards (PipeDream-flush).
TEST(Pipeline, StageOrdersAreTheSchedules) {
  EXPECT_EQ(order_str(stage_order(PpSchedule::gpipe, 2, 1, 3, 1)), "F0.1 F1.1 F2.1 B0.1 B1.1 B2.1");
  EXPECT_EQ(order_str(stage_order(PpSchedule::one_f_one_b, 4, 1, 6, 0)),
            "F0.0 F1.0 F2.0 F3.0 B0.0 F4.0 B1.0 F5.0 B2.0 B3.0 B4.0 B5.0");
  EXPECT_EQ(order_str(stage_order(PpSchedule::one_f_one_b, 4, 1, 6, 3)),
            "F0.3 B0.3 F1.3 B1.3 F2.3 B2.3 F3.3 B3.3 F4.3 B4.3 F5.3 B5.3");
  // fewer micro-batches than stages: every forward is warm-up
  EXPECT_EQ(order_str(stage_order(PpSchedule::one_f_one_b, 4, 1, 2, 0)), "F0.0 F1.0 B0.0 B1.0");
  // Megatron's interleaved, pp 2, 2 chunks, 4 micro-batches: stage 0 warms up with
  // (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4 forwards (micro-batches 0, 1 of chunk 0, then of chunk 1)
  EXPECT_EQ(order_str(stage_order(PpSchedule::interleaved, 2, 2, 4, 0)),
            "F0.0 F1.0 F0.2 F1.2 F2.0 B0.2 F3.0 B1.2 F2.2 B0.0 F3.2 B1.0 B2.2 B3.2 B2.0 B3.0");
  // M == pp: all warm-up
  EXPECT_EQ(order_str(stage_order(PpSchedule::interleaved, 2, 2, 2, 1)), "F0.1 F1.1 F0.3 F1.3 B0.3 B1.3 B0.1 B1.1");
}

// The global order: every stage's ops in its own order, each input there before it is used
// (the transfer right before its consumer, from the producer's stage), every op once.
TEST(Pipeline, GlobalOrderKeepsEveryStagesOrderAndItsInputs) {
  for (PpSchedule sch : {PpSchedule::gpipe, PpSchedule::one_f_one_b, PpSchedule::interleaved})
    for (int64_t pp : {2, 3, 4})
      for (int64_t M : {1, 2, 4, 8}) {
        const int64_t vpp = sch == PpSchedule::interleaved ? 2 : 1;
        if (sch == PpSchedule::interleaved && M % pp != 0) continue;
        const std::string at =
            std::string(pp_schedule_name(sch)) + " pp " + std::to_string(pp) + " M " + std::to_string(M);
        const std::vector<PipeOp> all = pipeline_order(sch, pp, vpp, M);
        std::map<int64_t, std::vector<PipeOp>> per_stage;
        std::set<std::pair<int64_t, int64_t>> got_act, got_grad, fwd, bwd;
        const int64_t V = pp * vpp;
        for (const PipeOp& op : all) {
          if (op.kind == K::send_activation) {
            EXPECT_TRUE(fwd.count({op.mb, op.v})) << at << ": " << pipe_op_str(op) << " before its forward";
            got_act.insert({op.mb, op.v + 1});
            continue;
          }
          if (op.kind == K::send_gradient) {
            EXPECT_TRUE(bwd.count({op.mb, op.v})) << at << ": " << pipe_op_str(op) << " before its backward";
            got_grad.insert({op.mb, op.v - 1});
            continue;
          }
          per_stage[op_stage(op, pp)].push_back(op);
          if (op.kind == K::forward) {
            EXPECT_TRUE(op.v == 0 || got_act.count({op.mb, op.v})) << at << ": " << pipe_op_str(op);
            EXPECT_TRUE(fwd.insert({op.mb, op.v}).second) << at << ": twice " << pipe_op_str(op);
          } else {
            EXPECT_TRUE(fwd.count({op.mb, op.v})) << at << ": " << pipe_op_str(op);
            EXPECT_TRUE(op.v == V - 1 || got_grad.count({op.mb, op.v})) << at << ": " << pipe_op_str(op);
            EXPECT_TRUE(bwd.insert({op.mb, op.v}).second) << at << ": twice " << pipe_op_str(op);
          }
        }
        EXPECT_EQ(fwd.size(), static_cast<size_t>(M * V)) << at;
        EXPECT_EQ(bwd.size(), static_cast<size_t>(M * V)) << at;
        for (int64_t s = 0; s < pp; ++s)
          EXPECT_EQ(per_stage[s], stage_order(sch, pp, vpp, M, s)) << at << " stage " << s;
      }
}

// 1F1B's point: stage s holds at most pp - s micro-batches' activations at once; GPipe all M.
TEST(Pipeline, OneFOneBBoundsTheActivationsHeld) {
  const int64_t pp = 4, M = 8;
  for (int64_t s = 0; s < pp; ++s) {
    for (PpSchedule sch : {PpSchedule::gpipe, PpSchedule::one_f_one_b}) {
      int64_t live = 0, peak = 0;
      for (const PipeOp& op : stage_order(sch, pp, 1, M, s))
        peak = std::max(peak, live += op.kind == K::forward ? 1 : -1);
      EXPECT_EQ(peak, sch == PpSchedule::gpipe ? M : pp - s) << pp_schedule_name(sch) << " stage " << s;
    }
  }
}

}  // namespace
}  // namespace parity
