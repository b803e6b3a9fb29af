// The device mesh: two views of the same W ranks (docs/design/foldings.md).
//
//   dense view  (dp_replicate, dp_shard, cp, tp)         every parameter but routed experts
//   expert view (dp_replicate, edp_shard, ep, etp)       routed experts
//
// with edp_shard = W / (dp_replicate·ep·etp); etp is any degree with dp_replicate·ep·etp
// dividing W (Megatron's etp, independent of tp). The expert view has no cp (as in Megatron):
// expert data parallel absorbs the context-parallel ranks.
//
// A view's coordinates read row-major (last fastest) give its linear index; the rank order
// (LayoutConfig::order, docs/mesh.md "Rank order") says which world rank holds it:
//
//   order      dense view                            expert view
//   megatron   rank = tp_r + tp·(cp_r + cp·(dps_r    rank = etp_r + etp·(ep_r + ep·(edps_r + edps·dpr_r))
//                     + dps·dpr_r))  (tp-cp-dp)
//   deepspeed  the same                              with B = W/dp_replicate and the rank's dense
//                                                    coordinates: tp_r·dps·cp + (cp_r + cp·dps_r)
//                                                    + B·dpr_r = etp_r + etp·(ep_r + ep·(edps_r + edps·dpr_r))
//
// (dps = dp_shard, edps = edp_shard). Under deepspeed, inside each HSDP replica block the
// expert coordinates run TP-lane-major (DeepSpeed's TP-strided expert groups: W8 TP2 EP4 has
// EP {0,2,4,6}{1,3,5,7}, EDP {0,1}{2,3}{4,5}{6,7}); with cp > 1 a lane's ranks are numbered by
// their combined (dp_shard, cp) coordinate. dp_replicate is the same coordinate in
// both views under both orders, so HSDP replica groups are shared. The two orders are not a
// renumbering of each other: with tp > 1 and dp_shard·cp > 1 they put different dense
// coordinates into one EP group (W8 TP2 EP4: cross-lane under megatron, dp2ep under
// deepspeed); with tp = 1 or dp_shard·cp = 1 they coincide.
//
// A group is the set of ranks that differ only in the coordinates of some dimensions of one
// view; its members are listed in coordinate order (row-major over the group's own
// dimensions, so a member's index in a one-dimension group is its coordinate). Under
// megatron that is ascending world rank; under deepspeed an expert group may not ascend
// (W16 TP2 EP4: EDP {0,8,1,9}, as DeepSpeed lists it).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mesh/layout_config.h"

namespace parity::comm {
class Communicator;
}

namespace parity::mesh {

enum class View { dense, expert };
// pp (pipeline stages) is in neither view: it is the outermost coordinate of the world rank
// under both orders (rank = stage * W/pp + the rank inside its stage), and a view's
// coordinates are those of the rank inside its stage. Every group but world and pp lies
// inside one stage.
enum class MeshDim { dp_replicate, dp_shard, tp, edp_shard, ep, etp, cp, pp };

std::string_view view_name(View v);     // "dense", "expert"
std::string_view dim_name(MeshDim d);   // "dp_replicate", "dp_shard", "tp", "edp_shard", ...
std::string_view dim_short(MeshDim d);  // "dpr", "dps", "tp", "edps", "ep", "etp"

// The dimensions of a view, in rank order (slowest first).
const std::vector<MeshDim>& view_dims(View v);

// Every group the parallel code uses. Each is a set of dimensions of one view:
//   tp, dp_replicate, dp_shard          single dense dimensions
//   dense_dp = dp_replicate x dp_shard x cp
//                                       gradient reduction of dense parameters (cp ranks hold
//                                       the same parameters but see different tokens)
//   dense_shard = dp_shard x tp         FSDP x TP: the ranks one dense replica is spread over
//   ep, etp, edp_shard                  single expert dimensions
//   edp = dp_replicate x edp_shard      gradient reduction of routed experts
//   ep_etp = ep x etp                   the expert-model-parallel ranks (token dispatch)
//   world                               every rank
//   cp                                  context parallel: the ranks one sequence is split over
//   dense_replicate = dp_replicate x cp the ranks holding the same dense shard (FSDP shards over
//                                       dp_shard only): the all-reduce after the reduce-scatter
//   pp                                  the pipeline stages of one rank's coordinates
enum class GroupKind { world, tp, dp_replicate, dp_shard, dense_dp, dense_shard, ep, etp, edp_shard, edp, ep_etp,
                       cp, dense_replicate, pp };
std::string_view group_kind_name(GroupKind k);  // "tp", "dense_dp", ...
const std::vector<GroupKind>& all_group_kinds();
View group_view(GroupKind k);
std::vector<MeshDim> group_dims(GroupKind k);

using Group = std::vector<int>;  // world ranks, ascending

class Mesh {
 public:
  // Checks the structural rules (check_structure) and throws ConfigError naming
  // "$.layout.<field>" and the rule. Model-dependent rules are in validate_layout().
  // model_layers: the model's layer count, which pipeline parallel's default split needs
  // (stage_of_layer); not needed with pp 1 or an explicit layout.pp_layers.
  explicit Mesh(const LayoutConfig& layout, int64_t model_layers = 0);

  int world() const { return world_; }
  const LayoutConfig& layout() const { return layout_; }
  int64_t size(MeshDim d) const;
  std::vector<int64_t> sizes(View v) const;  // in view_dims(v) order

  std::vector<int64_t> coords(View v, int rank) const;  // in view_dims(v) order, inside the rank's stage
  int64_t coord(MeshDim d, int rank) const;
  int stages() const { return static_cast<int>(layout_.pp); }
  int stage(int rank) const { return rank / stage_world_; }  // coord(MeshDim::pp, rank)
  // The pipeline stage holding transformer layer l (pp_stage_layers); throws Error when the
  // split is unknown (pp > 1, no pp_layers, the mesh built without the model's layer count).
  int stage_of_layer(int64_t l) const;
  // The rank at these coordinates of view v on pipeline stage `stage`.
  int rank_of(View v, const std::vector<int64_t>& coords, int stage = 0) const;
  // The row-major index of a rank's coordinates in view v, and back (the rank order), the
  // stage outermost: stage * W/pp + the index inside the stage.
  int64_t linear(View v, int rank) const;
  int rank_at(View v, int64_t linear) const;

  // Ranks that share every coordinate of `rank` except those of `dims` (all of one view),
  // in coordinate order.
  Group group_over(View v, const std::vector<MeshDim>& dims, int rank) const;
  Group group(GroupKind k, int rank) const;
  // The partition of the ranks into groups of kind k, ordered by smallest member.
  std::vector<Group> groups(GroupKind k) const;

 private:
  LayoutConfig layout_;
  int world_ = 1;
  int stage_world_ = 1;  // world / pp
  std::vector<int> layer_stage_;  // per layer, when the split is known
};

// How the expert view folds onto the dense view, read from the groups themselves:
//   none        ep = 1
//   tp2ep       every EP group is a TP group
//   dp2ep       every EP group lies inside one dense DP group
//   cross_lane  EP groups span TP lanes and DP ranks
enum class Folding { none, tp2ep, dp2ep, cross_lane };
std::string_view folding_name(Folding f);  // "none", "tp2ep", "dp2ep", "cross-lane"
Folding folding(const Mesh& m);

// The rank order itself (rank_order.cpp): world rank -> linear index of its coordinates in
// view v, and back. Both are permutations of [0, W); the identity under megatron.
int64_t order_linear(const LayoutConfig& l, View v, int64_t rank);
int64_t order_rank(const LayoutConfig& l, View v, int64_t linear);

// The communicator of this rank's group of kind k (collective over that group's members;
// every rank of the world should call it for the same kinds in the same order). Throws
// CommError when the communicator's world size is not the mesh's.
comm::Communicator& comm_group(comm::Communicator& world, const Mesh& m, GroupKind k);

// "{01}{23}{45}{67}" (FOLDINGS.md's notation) when every rank < 10, else "{0,1}{2,3}";
// "singletons" when every group has one member.
std::string groups_str(const std::vector<Group>& groups);

}  // namespace parity::mesh
