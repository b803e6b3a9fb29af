// Mesh::group walks only its members (an odometer over the group's free coordinates, O(group
// size): at W = 4096 every rank's walk over the whole world made a simulated world's set-up
// O(W^2)). Checked against the definition, by brute force over the world: the ranks whose
// coordinates equal the rank's outside the group's dimensions (in its stage, unless the group
// spans the stages), in the order of their linear index; every kind, every rank, both rank
// orders, on every layout of a few worlds with pp, cp, dp_replicate, ep and etp.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "mesh/mesh.h"

namespace parity::mesh {
namespace {

Group by_definition(const Mesh& m, GroupKind k, int rank) {
  const View v = group_view(k);
  const std::vector<MeshDim> dims = group_dims(k);
  const std::vector<MeshDim>& vd = view_dims(v);
  const bool over_stages = std::find(dims.begin(), dims.end(), MeshDim::pp) != dims.end();
  const std::vector<int64_t> mine = m.coords(v, rank);
  std::vector<std::pair<int64_t, int>> members;  // (linear index, rank)
  for (int r = 0; r < m.world(); ++r) {
    if (!over_stages && m.stage(r) != m.stage(rank)) continue;
    const std::vector<int64_t> c = m.coords(v, r);
    bool same = true;
    for (size_t i = 0; i < c.size(); ++i)
      if (std::find(dims.begin(), dims.end(), vd[i]) == dims.end() && c[i] != mine[i]) same = false;
    if (same) members.emplace_back(m.linear(v, r), r);
  }
  std::sort(members.begin(), members.end());
  Group g;
  for (const auto& [lin, r] : members) g.push_back(r);
  return g;
}

TEST(MeshGroupWalk, EveryGroupIsItsDefinition) {
  int meshes = 0;
  for (int64_t world : {8, 12, 16, 24})
    for (int64_t pp : {1, 2})
      for (int64_t tp : {1, 2, 4})
        for (int64_t cp : {1, 2})
          for (int64_t dpr : {1, 2})
            for (int64_t ep : {1, 2, 4})
              for (bool etp_tp : {false, true})
                for (RankOrder order : {RankOrder::megatron, RankOrder::deepspeed}) {
                  LayoutConfig l;
                  l.world = world, l.pp = pp, l.tp = tp, l.cp = cp, l.dp_replicate = dpr, l.ep = ep;
                  l.etp = etp_tp ? tp : 1, l.order = order;
                  if (world % (pp * tp * cp * dpr) != 0) continue;
                  l.dp_shard = world / (pp * tp * cp * dpr);
                  try {
                    const Mesh m(l, pp);
                    ++meshes;
                    for (GroupKind k : all_group_kinds())
                      for (int r = 0; r < m.world(); ++r)
                        ASSERT_EQ(m.group(k, r), by_definition(m, k, r))
                            << describe_layout(l, LayoutText::full) << ", " << group_kind_name(k) << ", rank " << r;
                  } catch (const ConfigError&) {  // not a layout (ep x etp does not divide a replica, say)
                  }
                }
  EXPECT_GT(meshes, 300);
}

}  // namespace
}  // namespace parity::mesh
