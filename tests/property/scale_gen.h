// Worlds of 12..1024 ranks for the simulated world (issue 50 item 3, docs/property.md "Up to 1024
// ranks"): the property suite's case (generators.h: model, optimizer, seeds) on a layout drawn
// by degrees instead of by enumerating every layout of the world (which at W = 1024 builds
// thousands of meshes). The world is 2^a x 3^b; pipeline stages, tp, cp, dp_replicate, ep and
// etp are divisors of what is left, each a choice that shrinks towards 1, so a failure shrinks
// towards the smallest world and the fewest dimensions that still fail. Drawn in the test's
// main thread (RapidCheck is not thread-safe); the case runs as one `parity run --backend sim`.
#pragma once
#include <rapidcheck.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "generators.h"

namespace parity::property {

// The worlds drawn: the largest in most draws (the point is the large worlds; the small ones
// are where a failure shrinks to).
inline const std::vector<int64_t>& scale_worlds() {
  static const std::vector<int64_t> w = {12, 16, 24, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1024, 1024, 1024};
  return w;
}

// The divisors of n among `from`, simplest (smallest) first; {1} when none.
inline std::vector<int64_t> dividing(int64_t n, const std::vector<int64_t>& from) {
  std::vector<int64_t> out;
  for (int64_t d : from)
    if (n % d == 0) out.push_back(d);
  return out.empty() ? std::vector<int64_t>{1} : out;
}

// A layout of a large world: pp outermost, then tp (with SP or not), cp, dp_replicate, and the
// expert view's ep and etp (etp 1 or tp) inside a replica, in either rank order; dp_shard the rest.
inline LayoutConfig draw_scale_layout() {
  LayoutConfig l;
  l.world = pick(scale_worlds());
  l.pp = pick(dividing(l.world, {1, 1, 2, 4, 8, 16}));
  const int64_t stage = l.world / l.pp;
  l.tp = pick(dividing(stage, {1, 2, 4, 8}));
  l.sp = l.tp > 1 && draw_bool();
  l.cp = pick(dividing(stage / l.tp, {1, 1, 2, 4}));
  l.dp_replicate = pick(dividing(stage / (l.tp * l.cp), {1, 1, 1, 2, 4}));
  l.dp_shard = stage / (l.tp * l.cp * l.dp_replicate);
  const int64_t replica = stage / l.dp_replicate;
  l.etp = pick<int64_t>({1, l.tp});
  l.ep = pick(dividing(replica / l.etp, {1, 2, 4, 8, 16, 32, 64}));
  l.order = pick<RankOrder>({RankOrder::megatron, RankOrder::deepspeed});
  l.pp_schedule = pick<PpSchedule>({PpSchedule::one_f_one_b, PpSchedule::gpipe});
  l.backend = comm::Backend::sim;
  return l;
}

// One case: the layout above and the suite's model, optimizer and seeds sized to it, with at
// least pp layers (one a stage) and at most 2 steps (a large world's run costs seconds).
inline Scenario draw_scale_case() {
  Scenario s;
  s.name = "scale_case";
  s.layout = draw_scale_layout();
  CaseSpec spec;
  spec.allow_mpi = false;
  s.model = draw_model({s.layout}, spec);
  if (s.model.layers < s.layout.pp) {  // one layer a stage, the MoE layers kept last
    const int64_t moe = s.model.moe_layers();
    s.model.layers = s.layout.pp, s.model.dense_layers = s.layout.pp - moe;
  }
  s.model.top_k = std::min<int64_t>(s.model.top_k, 8);  // ep 64 gives up to 512 experts
  s.optim = draw_optim(spec);
  s.steps = *rc::gen::inRange<int64_t>(1, 3);
  s.seed = *rc::gen::inRange<uint64_t>(0, 1u << 20);
  s.data_seed = *rc::gen::inRange<uint64_t>(0, 1u << 20);
  const std::vector<DpSharding> modes = {DpSharding::fsdp, DpSharding::fsdp, DpSharding::ddp, DpSharding::zero1,
                                         DpSharding::zero2};
  s.layout.dp_sharding = s.layout.expert_dp_sharding = pick(modes);
  return s;
}

inline rc::Gen<Scenario> gen_scale_case() {
  return rc::gen::exec([] { return draw_scale_case(); });
}

}  // namespace parity::property
