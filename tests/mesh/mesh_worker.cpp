// mesh_worker: the rank process of the multi-process mesh test (under comm::launch_main,
// `parity launch` or mpirun). Exit code is the verdict: 0 every case passed, 1 otherwise.
//
//   mesh_worker props CASES   RapidCheck: redistribute(A -> B) of shard_A(x) is shard_B(x)
//                             bitwise on every rank; every rank draws the same cases
#include <rapidcheck.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include "comm/world.h"
#include "mesh/redistribute.h"
#include "mesh/shard.h"
#include "mesh_gen.h"

using namespace parity;
using namespace parity::mesh;

namespace {

// #wrong elements summed over all ranks (so that every rank reaches the same verdict).
template <class T>
int64_t wrong_everywhere(comm::Communicator& w, const Mesh& m, const Shape& shape, const Layout& a, const Layout& b) {
  const Tensor<T> x = testing::pattern<T>(shape, 17);
  const Tensor<T> mine = shard(m, a, x, w.rank());
  const Tensor<T> got = redistribute(w, m, shape, a, mine, b);
  const Tensor<T> want = shard(m, b, x, w.rank());
  std::vector<int64_t> bad = {got.shape == want.shape ? 0 : 1};
  if (bad[0] == 0 && !testing::same_bits(got.data, want.data))
    for (size_t i = 0; i < got.data.size(); ++i) bad[0] += !testing::same_bits(std::vector<T>{got.data[i]}, {want.data[i]});
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
    const Layout a = testing::draw_layout(m, shape), b = testing::draw_layout(m, shape);
    RC_TAG(std::string(view_name(a.view)) + " -> " + std::string(view_name(b.view)));
    RC_CLASSIFY(has_uneven_shards(m, a, shape) || has_uneven_shards(m, b, shape), "uneven shards");
    RC_CLASSIFY(has_empty_shards(m, a, shape) || has_empty_shards(m, b, shape), "empty shards");
    RC_CLASSIFY(a != partials_resolved(a), "Partial in A");
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
