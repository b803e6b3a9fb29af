#include "mesh/mesh.h"

#include <algorithm>

#include "comm/communicator.h"
#include "core/error.h"
#include "mesh/param_layout.h"

namespace parity::mesh {

std::string_view view_name(View v) { return v == View::dense ? "dense" : "expert"; }

std::string_view dim_name(MeshDim d) {
  switch (d) {
    case MeshDim::dp_replicate: return "dp_replicate";
    case MeshDim::dp_shard: return "dp_shard";
    case MeshDim::cp: return "cp";
    case MeshDim::tp: return "tp";
    case MeshDim::edp_shard: return "edp_shard";
    case MeshDim::ep: return "ep";
    case MeshDim::etp: return "etp";
    case MeshDim::pp: return "pp";
  }
  return "?";
}

std::string_view dim_short(MeshDim d) {
  switch (d) {
    case MeshDim::dp_replicate: return "dpr";
    case MeshDim::dp_shard: return "dps";
    case MeshDim::cp: return "cp";
    case MeshDim::tp: return "tp";
    case MeshDim::edp_shard: return "edps";
    case MeshDim::ep: return "ep";
    case MeshDim::etp: return "etp";
    case MeshDim::pp: return "pp";
  }
  return "?";
}

const std::vector<MeshDim>& view_dims(View v) {
  static const std::vector<MeshDim> dense = {MeshDim::dp_replicate, MeshDim::dp_shard, MeshDim::cp, MeshDim::tp};
  static const std::vector<MeshDim> expert = {MeshDim::dp_replicate, MeshDim::edp_shard, MeshDim::ep, MeshDim::etp};
  return v == View::dense ? dense : expert;
}

std::string_view group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::world: return "world";
    case GroupKind::tp: return "tp";
    case GroupKind::dp_replicate: return "dp_replicate";
    case GroupKind::dp_shard: return "dp_shard";
    case GroupKind::dense_dp: return "dense_dp";
    case GroupKind::dense_shard: return "dense_shard";
    case GroupKind::cp: return "cp";
    case GroupKind::dense_replicate: return "dense_replicate";
    case GroupKind::ep: return "ep";
    case GroupKind::etp: return "etp";
    case GroupKind::edp_shard: return "edp_shard";
    case GroupKind::edp: return "edp";
    case GroupKind::ep_etp: return "ep_etp";
    case GroupKind::pp: return "pp";
  }
  return "?";
}

const std::vector<GroupKind>& all_group_kinds() {
  static const std::vector<GroupKind> all = {
      GroupKind::world, GroupKind::tp,  GroupKind::dp_replicate, GroupKind::dp_shard,
      GroupKind::dense_dp, GroupKind::dense_shard, GroupKind::ep, GroupKind::etp,
      GroupKind::edp_shard, GroupKind::edp, GroupKind::ep_etp, GroupKind::cp, GroupKind::dense_replicate,
      GroupKind::pp};
  return all;
}

View group_view(GroupKind k) {
  switch (k) {
    case GroupKind::ep:
    case GroupKind::etp:
    case GroupKind::edp_shard:
    case GroupKind::edp:
    case GroupKind::ep_etp: return View::expert;
    default: return View::dense;
  }
}

std::vector<MeshDim> group_dims(GroupKind k) {
  switch (k) {
    case GroupKind::world: {
      std::vector<MeshDim> all = view_dims(View::dense);
      all.push_back(MeshDim::pp);
      return all;
    }
    case GroupKind::pp: return {MeshDim::pp};
    case GroupKind::tp: return {MeshDim::tp};
    case GroupKind::dp_replicate: return {MeshDim::dp_replicate};
    case GroupKind::dp_shard: return {MeshDim::dp_shard};
    case GroupKind::dense_dp: return {MeshDim::dp_replicate, MeshDim::dp_shard, MeshDim::cp};
    case GroupKind::dense_shard: return {MeshDim::dp_shard, MeshDim::tp};
    case GroupKind::cp: return {MeshDim::cp};
    case GroupKind::dense_replicate: return {MeshDim::dp_replicate, MeshDim::cp};
    case GroupKind::ep: return {MeshDim::ep};
    case GroupKind::etp: return {MeshDim::etp};
    case GroupKind::edp_shard: return {MeshDim::edp_shard};
    case GroupKind::edp: return {MeshDim::dp_replicate, MeshDim::edp_shard};
    case GroupKind::ep_etp: return {MeshDim::ep, MeshDim::etp};
  }
  return {};
}

namespace {

std::string s(int64_t v) { return std::to_string(v); }

size_t index_in_view(View v, MeshDim d) {
  const auto& dims = view_dims(v);
  auto it = std::find(dims.begin(), dims.end(), d);
  if (it == dims.end())
    throw Error("mesh: dimension " + std::string(dim_name(d)) + " is not in the " + std::string(view_name(v)) +
                " view");
  return static_cast<size_t>(it - dims.begin());
}

}  // namespace

Mesh::Mesh(const LayoutConfig& l, int64_t model_layers) : layout_(l) {
  check_structure(l);
  world_ = static_cast<int>(l.world);
  stage_world_ = static_cast<int>(l.world / l.pp);
  if (l.pp == 1) return;
  int64_t layers = model_layers;
  if (!l.pp_layers.empty()) {
    layers = 0;
    for (int64_t n : l.pp_layers) layers += n;
  }
  if (layers <= 0) return;
  const auto split = pp_stage_layers(l, layers);
  layer_stage_.assign(static_cast<size_t>(layers), 0);
  for (size_t v = 0; v < split.size(); ++v)
    for (int64_t x = split[v].first; x < split[v].second && x < layers; ++x)
      layer_stage_[static_cast<size_t>(x)] = static_cast<int>(static_cast<int64_t>(v) % l.pp);
}

int Mesh::stage_of_layer(int64_t l) const {
  if (layout_.pp == 1) return 0;
  if (l < 0 || l >= static_cast<int64_t>(layer_stage_.size()))
    throw Error("mesh: the pipeline stage of layer " + s(l) + " is unknown (" +
                (layer_stage_.empty() ? std::string("the mesh was built without the model's layer count")
                                      : "the split holds " + s(static_cast<int64_t>(layer_stage_.size())) + " layers") +
                ")");
  return layer_stage_[static_cast<size_t>(l)];
}

int64_t Mesh::size(MeshDim d) const {
  switch (d) {
    case MeshDim::dp_replicate: return layout_.dp_replicate;
    case MeshDim::dp_shard: return layout_.dp_shard;
    case MeshDim::cp: return layout_.cp;
    case MeshDim::tp: return layout_.tp;
    case MeshDim::edp_shard: return layout_.world / (layout_.pp * layout_.dp_replicate * layout_.ep * layout_.etp);
    case MeshDim::pp: return layout_.pp;
    case MeshDim::ep: return layout_.ep;
    case MeshDim::etp: return layout_.etp;
  }
  return 1;
}

std::vector<int64_t> Mesh::sizes(View v) const {
  std::vector<int64_t> out;
  for (MeshDim d : view_dims(v)) out.push_back(size(d));
  return out;
}

std::vector<int64_t> Mesh::coords(View v, int rank) const {
  if (rank < 0 || rank >= world_)
    throw Error("mesh: rank " + s(rank) + " is outside the world of " + s(world_));
  const auto& dims = view_dims(v);
  std::vector<int64_t> c(dims.size());
  int64_t rest = linear(v, rank) % stage_world_;
  for (size_t i = dims.size(); i-- > 0;) {
    c[i] = rest % size(dims[i]);
    rest /= size(dims[i]);
  }
  return c;
}

int64_t Mesh::coord(MeshDim d, int rank) const {
  if (d == MeshDim::pp) {
    (void)coords(View::dense, rank);  // the range check
    return stage(rank);
  }
  View v = (d == MeshDim::dp_shard || d == MeshDim::cp || d == MeshDim::tp) ? View::dense : View::expert;
  return coords(v, rank)[index_in_view(v, d)];
}

int Mesh::rank_of(View v, const std::vector<int64_t>& c, int stage) const {
  const auto& dims = view_dims(v);
  if (c.size() != dims.size())
    throw Error("mesh: " + s(static_cast<int64_t>(c.size())) + " coordinates for the " + std::string(view_name(v)) +
                " view of " + s(static_cast<int64_t>(dims.size())) + " dimensions");
  int64_t r = 0;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (c[i] < 0 || c[i] >= size(dims[i]))
      throw Error("mesh: coordinate " + std::string(dim_name(dims[i])) + " = " + s(c[i]) + " is outside [0, " +
                  s(size(dims[i])) + ")");
    r = r * size(dims[i]) + c[i];
  }
  if (stage < 0 || stage >= stages())
    throw Error("mesh: stage " + s(stage) + " is outside [0, " + s(stages()) + ")");
  return rank_at(v, stage * int64_t{stage_world_} + r);
}

int64_t Mesh::linear(View v, int rank) const { return order_linear(layout_, v, rank); }

int Mesh::rank_at(View v, int64_t lin) const {
  if (lin < 0 || lin >= world_)
    throw Error("mesh: linear index " + s(lin) + " is outside the world of " + s(world_));
  return static_cast<int>(order_rank(layout_, v, lin));
}

// The members are the ranks whose coordinates equal `rank`'s outside `dims`: walked as an
// odometer over the free coordinates (the last fastest), the stage outermost, which is the order
// of their linear index (coordinate order). O(group size), not O(world): every rank builds its
// groups, so a walk over the world cost O(W^2) per world (a 4096-rank simulated world's set-up
// outlasted its first collective's timeout).
Group Mesh::group_over(View v, const std::vector<MeshDim>& dims, int rank) const {
  std::vector<int64_t> c = coords(v, rank);
  const auto& vd = view_dims(v);
  std::vector<size_t> free;
  bool over_stages = false;  // pp: the group spans the stages
  for (MeshDim d : dims)
    if (d == MeshDim::pp) over_stages = true;
    else free.push_back(index_in_view(v, d));
  std::sort(free.begin(), free.end());
  free.erase(std::unique(free.begin(), free.end()), free.end());
  Group g;
  const int first = over_stages ? 0 : stage(rank), last = over_stages ? stages() - 1 : stage(rank);
  for (int st = first; st <= last; ++st) {
    for (size_t i : free) c[i] = 0;
    for (bool more = true; more;) {
      g.push_back(rank_of(v, c, st));
      more = false;
      for (size_t k = free.size(); k-- > 0;) {
        if (++c[free[k]] < size(vd[free[k]])) {
          more = true;
          break;
        }
        c[free[k]] = 0;
      }
    }
  }
  return g;
}

Group Mesh::group(GroupKind k, int rank) const { return group_over(group_view(k), group_dims(k), rank); }

std::vector<Group> Mesh::groups(GroupKind k) const {
  std::vector<Group> out;
  std::vector<bool> seen(static_cast<size_t>(world_), false);
  for (int r = 0; r < world_; ++r) {
    if (seen[static_cast<size_t>(r)]) continue;
    Group g = group(k, r);
    for (int m : g) seen[static_cast<size_t>(m)] = true;
    out.push_back(std::move(g));
  }
  return out;
}

std::string_view folding_name(Folding f) {
  switch (f) {
    case Folding::none: return "none";
    case Folding::tp2ep: return "tp2ep";
    case Folding::dp2ep: return "dp2ep";
    case Folding::cross_lane: return "cross-lane";
  }
  return "?";
}

Folding folding(const Mesh& m) {
  if (m.size(MeshDim::ep) == 1) return Folding::none;
  bool all_tp = true, all_dp = true;
  for (Group ep : m.groups(GroupKind::ep)) {
    std::sort(ep.begin(), ep.end());  // as sets: expert groups need not ascend (rank order)
    all_tp = all_tp && ep == m.group(GroupKind::tp, ep[0]);
    Group dp = m.group(GroupKind::dense_dp, ep[0]);
    all_dp = all_dp && std::includes(dp.begin(), dp.end(), ep.begin(), ep.end());
  }
  return all_tp ? Folding::tp2ep : all_dp ? Folding::dp2ep : Folding::cross_lane;
}

comm::Communicator& comm_group(comm::Communicator& world, const Mesh& m, GroupKind k) {
  if (world.size() != m.world())
    throw CommError("mesh: the communicator has " + s(world.size()) + " ranks but the layout's world is " +
                    s(m.world()));
  return world.group(m.group(k, world.world_rank()));
}

std::string groups_str(const std::vector<Group>& groups) {
  bool single = true, compact = true;
  for (const Group& g : groups) {
    single = single && g.size() == 1;
    for (int r : g) compact = compact && r < 10;
  }
  if (single && groups.size() > 1) return "singletons";
  std::string out;
  for (const Group& g : groups) {
    out += "{";
    for (size_t i = 0; i < g.size(); ++i) out += (i > 0 && !compact ? "," : "") + std::to_string(g[i]);
    out += "}";
  }
  return out;
}

}  // namespace parity::mesh
