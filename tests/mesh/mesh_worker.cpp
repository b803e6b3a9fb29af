// mesh_worker: the rank process of the multi-process mesh test (under proc::launch_main,
// `parity launch` or mpirun). Exit code is the verdict: 0 every case passed, 1 otherwise.
//
//   mesh_worker props CASES   RapidCheck: redistribute(A -> B) of rank r's local under A is
//                             shard_B(assemble_A(every local)) bitwise on every rank (for
//                             A without Partial: shard_B(x) from shard_A(x)); every rank
//                             draws the same cases
#include <rapidcheck.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <span>
#include <string>

#include "comm/world.h"
#include "mesh/redistribute.h"
#include "mesh/shard.h"
#include "mesh_gen.h"

using namespace parity;
using namespace parity::mesh;

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Element g of the addend with this key: values of mixed magnitudes whose sums depend on
// the order of summation (and an occasional -0.0), exact integers for int64.
template <class T> T value(int64_t g, int64_t key) {
  const uint64_t h = splitmix(static_cast<uint64_t>(g) * 1000003ULL + static_cast<uint64_t>(key));
  if constexpr (std::is_integral_v<T>) return static_cast<T>(h % 2001) - 1000;
  if (h % 11 == 0) return T(-0.0);
  return T((static_cast<double>(h >> 11) * 0x1.0p-53 * 2.0 - 1.0) * static_cast<double>(1 << (h % 13)));
}

// Rank r's local tensor under a: the addend of its coordinates on a's Partial dimensions
// (replicas along Replicate dimensions hold the same bits).
template <class T> Tensor<T> addend(const Mesh& m, const TensorLayout& a, const Shape& shape, int r) {
  const std::vector<int64_t> c = m.coords(a.view, r), sizes = m.sizes(a.view);
  int64_t key = 0;
  for (size_t i = 0; i < c.size(); ++i)
    if (a.placements[i].kind == PlacementKind::partial) key = key * sizes[i] + c[i];
  const std::vector<int64_t> idx = global_indices(m, a, shape, r);
  Tensor<T> t(local_shape(m, a, shape, r));
  for (size_t i = 0; i < idx.size(); ++i) t.data[i] = value<T>(idx[i], key);
  return t;
}

// #wrong elements summed over all ranks (so that every rank reaches the same verdict).
// The expected result is shard_B of the tensor assemble() makes of every rank's addends in
// this process, so Partial sums must come out of the collectives in assemble()'s order.
template <class T> int64_t wrong_everywhere(comm::Communicator& w, const Mesh& m, const Shape& shape,
                                            const TensorLayout& a, const TensorLayout& b) {
  std::vector<Tensor<T>> locals;
  for (int r = 0; r < m.world(); ++r) locals.push_back(addend<T>(m, a, shape, r));
  const Tensor<T> y = assemble(m, a, shape, locals);
  const Tensor<T> got = redistribute(w, m, shape, a, locals[static_cast<size_t>(w.rank())], b);
  const Tensor<T> want = shard(m, b, y, w.rank());
  std::vector<int64_t> bad = {got.shape == want.shape ? 0 : 1};
  if (bad[0] == 0)
    for (size_t i = 0; i < got.data.size(); ++i)
      bad[0] += std::memcmp(&got.data[i], &want.data[i], sizeof(T)) != 0;
  w.allreduce(std::span<int64_t>(bad), comm::ReduceOp::sum);
  return bad[0];
}

bool props(comm::Communicator& w, int cases) {
  std::vector<int64_t> seed = {std::chrono::steady_clock::now().time_since_epoch().count() % 1000003};
  w.broadcast(std::span<int64_t>(seed), 0);
  const std::string params = "seed=" + std::to_string(seed[0]) + " max_success=" + std::to_string(cases) +
                             " max_size=50";
  setenv("RC_PARAMS", params.c_str(), 1);
  return rc::check("redistribute(A -> B) of shard_A(x) equals shard_B(x) on every rank", [&] {
    const LayoutConfig cfg = testing::draw_layout_config(w.size());
    const Mesh m(cfg);
    const Shape shape = testing::draw_shape();
    const TensorLayout a = testing::draw_layout(m, shape), b = testing::draw_layout(m, shape);
    RC_TAG(std::string(view_name(a.view)) + " -> " + std::string(view_name(b.view)));
    RC_CLASSIFY(has_uneven_shards(m, a, shape) || has_uneven_shards(m, b, shape), "uneven shards");
    RC_CLASSIFY(has_empty_shards(m, a, shape) || has_empty_shards(m, b, shape), "empty shards");
    RC_CLASSIFY(a != partials_resolved(a), "Partial in A");
    RC_CLASSIFY(testing::uses_flat_rule(m, a) || testing::uses_flat_rule(m, b),
                "nested StridedShard, segments do not divide");
    RC_LOG() << testing::describe(cfg, shape, a, b) << "\n";
    const int type = *rc::gen::inRange(0, 3);
    const int64_t bad = type == 0   ? wrong_everywhere<double>(w, m, shape, a, b)
                        : type == 1 ? wrong_everywhere<float>(w, m, shape, a, b)
                                    : wrong_everywhere<int64_t>(w, m, shape, a, b);
    RC_ASSERT(bad == 0);
  });
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "props" || argc != 3) {
    std::fprintf(stderr, "usage: mesh_worker props CASES\n");
    return 1;
  }
  try {
    auto w = comm::make_world_communicator();
    const bool ok = props(*w, std::atoi(argv[2]));
    w->barrier();
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mesh_worker: %s\n", e.what());
    return 1;
  }
}
