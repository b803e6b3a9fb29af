// The device mesh: two views of the same W ranks (shared/design/FOLDINGS.md).
//
//   dense view  (dp_replicate, dp_shard, tp)             every parameter but routed experts
//   expert view (dp_replicate, edp_shard, ep, etp)       routed experts
//
// Rank order is Megatron's tp-ep-dp: the last coordinate varies fastest,
//   rank = tp_r + tp·(dps_r + dp_shard·dpr_r)
//   rank = etp_r + etp·(ep_r + ep·(edps_r + edp_shard·dpr_r)),
// with edp_shard = W / (dp_replicate·ep·etp).
//
// A group is the set of ranks that differ only in the coordinates of some dimensions of one
// view; its members are listed in ascending world rank, which is also row-major order of
// those coordinates (so a member's index in the group is its coordinate for one dimension).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"

namespace parity::comm {
class Communicator;
}

namespace parity::mesh {

enum class View { dense, expert };
enum class MeshDim { dp_replicate, dp_shard, tp, edp_shard, ep, etp };

std::string_view view_name(View v);     // "dense", "expert"
std::string_view dim_name(MeshDim d);   // "dp_replicate", "dp_shard", "tp", "edp_shard", ...
std::string_view dim_short(MeshDim d);  // "dpr", "dps", "tp", "edps", "ep", "etp"

// The dimensions of a view, in rank order (slowest first).
const std::vector<MeshDim>& view_dims(View v);

// Every group the parallel code uses. Each is a set of dimensions of one view:
//   tp, dp_replicate, dp_shard          single dense dimensions
//   dense_dp = dp_replicate x dp_shard  gradient reduction of dense parameters
//   dense_shard = dp_shard x tp         FSDP x TP: the ranks one dense replica is spread over
//   ep, etp, edp_shard                  single expert dimensions
//   edp = dp_replicate x edp_shard      gradient reduction of routed experts
//   ep_etp = ep x etp                   the expert-model-parallel ranks (token dispatch)
//   world                               every rank
enum class GroupKind { world, tp, dp_replicate, dp_shard, dense_dp, dense_shard, ep, etp, edp_shard, edp, ep_etp };
std::string_view group_kind_name(GroupKind k);  // "tp", "dense_dp", ...
const std::vector<GroupKind>& all_group_kinds();
View group_view(GroupKind k);
std::vector<MeshDim> group_dims(GroupKind k);

using Group = std::vector<int>;  // world ranks, ascending

class Mesh {
 public:
  // Checks the structural rules (every degree >= 1, world = dp_replicate·dp_shard·tp,
  // dp_replicate·ep·etp divides world) and throws ConfigError naming "$.layout.<field>"
  // and the rule. Model-dependent rules are in validate_layout().
  explicit Mesh(const LayoutConfig& layout);

  int world() const { return world_; }
  const LayoutConfig& layout() const { return layout_; }
  int64_t size(MeshDim d) const;
  std::vector<int64_t> sizes(View v) const;  // in view_dims(v) order

  std::vector<int64_t> coords(View v, int rank) const;  // in view_dims(v) order
  int64_t coord(MeshDim d, int rank) const;
  int rank_of(View v, const std::vector<int64_t>& coords) const;

  // Ranks that share every coordinate of `rank` except those of `dims` (all of one view).
  Group group_over(View v, const std::vector<MeshDim>& dims, int rank) const;
  Group group(GroupKind k, int rank) const;
  // The partition of the ranks into groups of kind k, ordered by smallest member.
  std::vector<Group> groups(GroupKind k) const;

 private:
  LayoutConfig layout_;
  int world_ = 1;
};

// How the expert view folds onto the dense view, read from the groups themselves:
//   none        ep = 1
//   tp2ep       every EP group is a TP group
//   dp2ep       every EP group lies inside one dense DP group
//   cross_lane  EP groups span TP lanes and DP ranks
enum class Folding { none, tp2ep, dp2ep, cross_lane };
std::string_view folding_name(Folding f);  // "none", "tp2ep", "dp2ep", "cross-lane"
Folding folding(const Mesh& m);

// The rules a layout must meet for this model, beyond Mesh's structural ones: heads % tp,
// experts % ep, etp in {1, tp}, sequence parallel needs tp > 1 and seq % tp. Throws
// ConfigError("$.layout.<field>" or "$.model.<field>", rule) before any rank starts.
void validate_layout(const LayoutConfig& layout, const ModelConfig& model);

// The communicator of this rank's group of kind k (collective over that group's members;
// every rank of the world should call it for the same kinds in the same order). Throws
// CommError when the communicator's world size is not the mesh's.
comm::Communicator& comm_group(comm::Communicator& world, const Mesh& m, GroupKind k);

// "{01}{23}{45}{67}" (FOLDINGS.md's notation) when every rank < 10, else "{0,1}{2,3}";
// "singletons" when every group has one member.
std::string groups_str(const std::vector<Group>& groups);

}  // namespace parity::mesh
