// The rank orders of LayoutConfig::order (docs/mesh.md, "Rank order"), kept apart from the
// rest of the mesh: a view's coordinates, read row-major (last coordinate fastest), give
// its linear index; the order says which world rank holds which linear index.
//
//   megatron   linear index = world rank in both views (Megatron's tp-ep-dp)
//   deepspeed  dense view: linear index = world rank (TP groups consecutive, DP strided);
//              expert view: inside each dp_replicate block of B = W / dp_replicate ranks,
//              the rank holding dense coordinates (dps_r, tp_r) takes the expert linear
//              index tp_r * dp_shard + dps_r (DeepSpeed's TP-strided "tp_rank * dp + dp_rank"
//              of deepspeed/utils/groups.py _create_expert_and_data_parallel, mp_mode "tp"),
//              so EP groups run down one TP lane first. With context parallel (cp > 1) the
//              dense view is (dp_replicate, dp_shard, cp, tp) and the same lane-major rule
//              runs over the combined coordinate dc_r = cp_r + cp*dps_r (dp_shard*cp values,
//              the rank's position down its TP lane): expert index tp_r*(dp_shard*cp) + dc_r.
//              cp = 1 gives the formula above; the expert view has no cp under either order.
#include "mesh/mesh.h"

namespace parity::mesh {

namespace {

bool transposed(const LayoutConfig& l, View v) { return l.order == RankOrder::deepspeed && v == View::expert; }

}  // namespace

int64_t order_linear(const LayoutConfig& l, View v, int64_t rank) {
  if (!transposed(l, v)) return rank;
  const int64_t block = l.world / l.pp / l.dp_replicate, in = rank % block;  // pp: outermost
  const int64_t tp_r = in % l.tp, dc_r = in / l.tp;  // dc_r = cp_r + cp*dps_r
  return rank - in + tp_r * (l.dp_shard * l.cp) + dc_r;
}

int64_t order_rank(const LayoutConfig& l, View v, int64_t linear) {
  if (!transposed(l, v)) return linear;
  const int64_t block = l.world / l.pp / l.dp_replicate, x = linear % block;
  const int64_t lane = l.dp_shard * l.cp;  // ranks down one TP lane of the block
  const int64_t tp_r = x / lane, dc_r = x % lane;
  return linear - x + dc_r * l.tp + tp_r;
}

}  // namespace parity::mesh
