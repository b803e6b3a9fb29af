// ckpt_worker: the rank process of the multi-process checkpoint tests (under
// proc::launch_main or `parity launch`). Exit code is the verdict: 0 ok, 1 failed.
//
//   ckpt_worker save   DIR LAYOUT SALT          save the synthetic state (ckpt/synthetic.h)
//   ckpt_worker load   DIR LAYOUT SALT          load into LAYOUT; every element must be
//                                               bitwise the formula (#wrong over all ranks)
//   ckpt_worker resave SRC DST LAYOUT SALT      load SRC as above, then save what was loaded
//                                               (not the formula) to DST
// A test sets PARITY_CKPT_CRASH="<rank>:<point>" to kill a rank in the middle of a save.
#include <cstdio>
#include <exception>
#include <span>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/synthetic.h"
#include "ckpt_layouts.h"
#include "comm/world.h"

using namespace parity;

namespace {

nlohmann::json model_json() {
  const ModelConfig c = ckpt::testing::test_model();
  return {{"vocab", c.vocab}, {"dim", c.dim}, {"layers", c.layers}, {"experts", c.experts}};
}

// Loads into a scrambled state and counts the wrong elements over every rank.
int64_t load_and_count(comm::Communicator& w, const mesh::Mesh& m, ckpt::SyntheticState& st, const std::string& dir) {
  st.scramble();
  const ckpt::CheckpointInfo info = ckpt::load(w, m, st.state(), model_json(), dir);
  std::vector<int64_t> bad{st.wrong() + (info.step == 10 && info.data_position == 640 ? 0 : 1)};
  w.allreduce(std::span<int64_t>(bad), comm::ReduceOp::sum);
  return bad[0];
}

int run(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool resave = mode == "resave";
  if ((mode != "save" && mode != "load" && !resave) || argc != (resave ? 6 : 5)) {
    std::fprintf(stderr, "usage: ckpt_worker save|load DIR LAYOUT SALT | resave SRC DST LAYOUT SALT\n");
    return 2;
  }
  const int a = resave ? 4 : 3;
  const mesh::Mesh m(ckpt::testing::parse_layout(argv[a]));
  const uint64_t salt = std::stoull(argv[a + 1]);
  auto world = comm::make_world_communicator();
  if (world->size() != m.world()) {
    std::fprintf(stderr, "ckpt_worker: world %d, layout %s needs %d\n", world->size(), argv[a], m.world());
    return 2;
  }
  ckpt::SyntheticState st(ckpt::testing::test_model(), m, world->rank(), salt);
  if (mode == "save") {
    ckpt::save(*world, m, st.state(), {10, 640, model_json()}, argv[2]);
    if (world->rank() == 0) std::printf("saved %s under %s\n", argv[2], argv[a]);
    return 0;
  }
  const int64_t bad = load_and_count(*world, m, st, argv[2]);
  if (world->rank() == 0)
    std::printf("loaded %s under %s: #wrong %lld\n", argv[2], argv[a], static_cast<long long>(bad));
  if (bad != 0) return 1;
  if (resave) ckpt::save(*world, m, st.state(), {10, 640, model_json()}, argv[3]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt_worker: error: %s\n", e.what());
    return 1;
  }
}
