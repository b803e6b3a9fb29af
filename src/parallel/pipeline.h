// Pipeline parallel's schedules (layout.pp, layout.pp_schedule; docs/parallel.md "Pipeline
// parallel"). The layers are split into V = pp * pp_virtual virtual stages (pp_stage_layers);
// stage s runs virtual stages s, s + pp, ... The embedding is in virtual stage 0; the final
// LayerNorm, the head and the loss in virtual stage V - 1, whose forward also runs the head's
// backward (its gradient is the stream the backward starts from).
//
// A stage's order of forwards (F) and backwards (B) is the schedule's (stage_order). The run
// executes one global order of every op and every transfer between stages (pipeline_order):
// each rank takes the entries of its stage, in that order, and a transfer is a broadcast over
// the pair of ranks at the same coordinates of the two stages. Because every rank follows one
// global order, the pair's blocking transfers can never wait on each other in a circle (the
// first unfinished entry always has both its ranks at it), whatever the schedule; each stage
// still computes in exactly its schedule's order, which is what decides the values (the order
// gradients accumulate in) and what the activations held at once are.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mesh/layout_config.h"

namespace parity {

struct PipeOp {
  enum class Kind { forward, backward, send_activation, send_gradient };
  Kind kind = Kind::forward;
  int64_t mb = 0;  // the micro-batch
  // forward / backward: the virtual stage run (on stage v % pp); send_activation: v's output
  // goes to v + 1; send_gradient: v's input gradient goes to v - 1.
  int64_t v = 0;
  bool operator==(const PipeOp&) const = default;
};

std::string pipe_op_str(const PipeOp& op);  // "F3.1" (micro-batch 3, virtual stage 1), "B3.1", "a3.1>2", "g3.2>1"

// Stage s's forwards and backwards in the schedule's order (M micro-batches). The interleaved
// schedule is Megatron's: warm-up (pp - s - 1) * 2 + (vpp - 1) * pp forwards (all of them
// when M == pp), then one forward and one backward in turn; virtual micro-batch k runs model
// chunk (k mod pp*vpp) / pp (backwards: the chunks in reverse) of micro-batch
// (k / (pp*vpp)) * pp + k mod pp.
std::vector<PipeOp> stage_order(PpSchedule schedule, int64_t pp, int64_t vpp, int64_t M, int64_t stage);

// One global order of every stage's ops (stage_order) and the transfers between them: the
// stages take turns, each running its next op once its input is there; a transfer comes right
// before the op that consumes it. Throws Error if the stages' orders cannot all finish.
std::vector<PipeOp> pipeline_order(PpSchedule schedule, int64_t pp, int64_t vpp, int64_t M);

// `parity explain`'s table: each stage's order of forwards and backwards ("F0.1 B0.1 ...":
// micro-batch.virtual stage), and the transfers of the whole step.
std::string schedule_table(const LayoutConfig& layout, int64_t microbatches);

// The stages an entry involves: its stage for F / B, sender and receiver for a transfer.
int64_t op_stage(const PipeOp& op, int64_t pp);
int64_t transfer_peer(const PipeOp& op, int64_t pp);  // a transfer's receiving stage

}  // namespace parity
