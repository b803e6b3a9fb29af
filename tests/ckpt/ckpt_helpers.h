// In-process helpers of test_ckpt: one process plays every rank of a layout through the
// per-rank pieces of ckpt/checkpoint.h (save_all, load_rank).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/synthetic.h"
#include "ckpt_layouts.h"

namespace parity::ckpt::testing {

inline nlohmann::json model_json() {
  const ModelConfig c = test_model();
  return {{"vocab", c.vocab}, {"dim", c.dim}, {"layers", c.layers}, {"experts", c.experts}};
}

// A fresh scratch directory, removed at the end of the test.
class Scratch : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "parity-ckpt-test-XXXXXX").string();
    root_ = mkdtemp(tmpl.data());
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::string path(const std::string& name) const { return root_ + "/" + name; }
  std::string root_;
};

struct Ranks {
  std::unique_ptr<mesh::Mesh> mesh;
  std::vector<std::unique_ptr<SyntheticState>> states;
};

inline Ranks make_ranks(const std::string& layout, uint64_t salt) {
  Ranks r;
  r.mesh = std::make_unique<mesh::Mesh>(parse_layout(layout));
  for (int i = 0; i < r.mesh->world(); ++i)
    r.states.push_back(std::make_unique<SyntheticState>(test_model(), *r.mesh, i, salt));
  return r;
}

inline void save_layout(const std::string& dir, const std::string& layout, uint64_t salt) {
  Ranks r = make_ranks(layout, salt);
  std::vector<const ShardedState*> ptrs;
  for (const auto& s : r.states) ptrs.push_back(&s->state());
  save_all(*r.mesh, ptrs, {10, 640, model_json()}, dir);
}

// Loads every rank of `layout` from dir into a scrambled state; #wrong elements over all ranks.
inline int64_t load_layout_wrong(const std::string& dir, const std::string& layout, uint64_t salt) {
  Ranks r = make_ranks(layout, salt);
  const Checkpoint ck = Checkpoint::open(dir);
  int64_t bad = 0;
  for (int i = 0; i < r.mesh->world(); ++i) {
    auto& st = *r.states[static_cast<size_t>(i)];
    st.scramble();
    load_rank(ck, *r.mesh, st.state(), i, model_json());
    bad += st.wrong();
  }
  return bad;
}

// Every file under dir with its bytes (to prove a checkpoint unchanged). The writers' lock file
// (core/output.h kLockFile) is left out: it names the last writer's pid, not the checkpoint.
inline std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename() == kLockFile) continue;
    std::ifstream in(e.path(), std::ios::binary);
    out[e.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return out;
}

}  // namespace parity::ckpt::testing
