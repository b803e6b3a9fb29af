#include "parallel/pipeline.h"

#include <algorithm>
#include <set>
#include <utility>

#include "core/error.h"

namespace parity {

std::string pipe_op_str(const PipeOp& op) {
  const std::string at = std::to_string(op.mb) + "." + std::to_string(op.v);
  switch (op.kind) {
    case PipeOp::Kind::forward:
      return "F" + at;
    case PipeOp::Kind::backward:
      return "B" + at;
    case PipeOp::Kind::send_activation:
      return "a" + at + ">" + std::to_string(op.v + 1);
    case PipeOp::Kind::send_gradient:
      return "g" + at + ">" + std::to_string(op.v - 1);
  }
  return "?";
}

int64_t op_stage(const PipeOp& op, int64_t pp) { return op.v % pp; }

int64_t transfer_peer(const PipeOp& op, int64_t pp) {
  return (op.kind == PipeOp::Kind::send_activation ? op.v + 1 : op.v - 1) % pp;
}

std::vector<PipeOp> stage_order(PpSchedule schedule, int64_t pp, int64_t vpp, int64_t M, int64_t s) {
  using K = PipeOp::Kind;
  std::vector<PipeOp> out;
  if (schedule == PpSchedule::gpipe) {
    for (int64_t mb = 0; mb < M; ++mb) out.push_back({K::forward, mb, s});
    for (int64_t mb = 0; mb < M; ++mb) out.push_back({K::backward, mb, s});
    return out;
  }
  if (schedule == PpSchedule::one_f_one_b) {
    const int64_t warm = std::min(pp - s - 1, M);
    for (int64_t mb = 0; mb < warm; ++mb) out.push_back({K::forward, mb, s});
    for (int64_t i = 0; i < M - warm; ++i) out.push_back({K::forward, warm + i, s}), out.push_back({K::backward, i, s});
    for (int64_t mb = M - warm; mb < M; ++mb) out.push_back({K::backward, mb, s});
    return out;
  }
  const int64_t total = M * vpp, group = pp * vpp;
  const int64_t warm = M == pp ? total : std::min((pp - s - 1) * 2 + (vpp - 1) * pp, total);
  const auto op = [&](int64_t k, bool forward) {
    int64_t chunk = (k % group) / pp;
    if (!forward) chunk = vpp - 1 - chunk;
    return PipeOp{forward ? K::forward : K::backward, (k / group) * pp + k % pp, chunk * pp + s};
  };
  for (int64_t k = 0; k < warm; ++k) out.push_back(op(k, true));
  for (int64_t k = 0; k < total - warm; ++k) out.push_back(op(k + warm, true)), out.push_back(op(k, false));
  for (int64_t k = total - warm; k < total; ++k) out.push_back(op(k, false));
  return out;
}

std::vector<PipeOp> pipeline_order(PpSchedule schedule, int64_t pp, int64_t vpp, int64_t M) {
  using K = PipeOp::Kind;
  const int64_t V = pp * vpp;
  std::vector<std::vector<PipeOp>> ops;
  size_t left = 0;
  for (int64_t s = 0; s < pp; ++s) ops.push_back(stage_order(schedule, pp, vpp, M, s)), left += ops.back().size();
  std::set<std::pair<int64_t, int64_t>> fwd, bwd;  // (mb, v) done
  std::vector<size_t> next(static_cast<size_t>(pp), 0);
  std::vector<PipeOp> out;
  while (left > 0) {
    bool moved = false;
    for (int64_t s = 0; s < pp; ++s) {  // one op per stage per turn: the stages run side by side
      auto& i = next[static_cast<size_t>(s)];
      if (i == ops[static_cast<size_t>(s)].size()) continue;
      const PipeOp op = ops[static_cast<size_t>(s)][i];
      const bool f = op.kind == K::forward;
      const bool ready = f ? (op.v == 0 || fwd.count({op.mb, op.v - 1}) != 0)
                           : (fwd.count({op.mb, op.v}) != 0 && (op.v == V - 1 || bwd.count({op.mb, op.v + 1}) != 0));
      if (!ready) continue;
      if (f && op.v > 0) out.push_back({K::send_activation, op.mb, op.v - 1});
      if (!f && op.v < V - 1) out.push_back({K::send_gradient, op.mb, op.v + 1});
      out.push_back(op);
      (f ? fwd : bwd).insert({op.mb, op.v});
      ++i, --left, moved = true;
    }
    if (!moved)
      throw Error("pipeline schedule " + std::string(pp_schedule_name(schedule)) + " (pp " + std::to_string(pp) + ", " +
                  std::to_string(vpp) + " virtual, " + std::to_string(M) + " micro-batches) cannot finish");
  }
  return out;
}

std::string schedule_table(const LayoutConfig& l, int64_t M) {
  std::string out = "## Pipeline schedule (" + std::string(pp_schedule_name(l.pp_schedule)) + ", " + std::to_string(M) +
                    " micro-batches; Fm.v / Bm.v: micro-batch m's forward / backward of virtual "
                    "stage v)\n| stage | order |\n| --- | --- |\n";
  for (int64_t s = 0; s < l.pp; ++s) {
    out += "| " + std::to_string(s) + " |";
    for (const PipeOp& op : stage_order(l.pp_schedule, l.pp, l.pp_virtual, M, s)) out += " " + pipe_op_str(op);
    out += " |\n";
  }
  const std::vector<PipeOp> all = pipeline_order(l.pp_schedule, l.pp, l.pp_virtual, M);
  int64_t transfers = 0;
  for (const PipeOp& op : all)
    transfers += op.kind == PipeOp::Kind::send_activation || op.kind == PipeOp::Kind::send_gradient ? 1 : 0;
  out += "\n" + std::to_string(transfers) +
         " transfers per step between stages, each a broadcast over the pair of "
         "ranks at the same coordinates of both stages, in one global order every rank follows\n";
  return out;
}

}  // namespace parity
