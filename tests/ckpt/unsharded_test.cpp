// ckpt/unsharded.h: a checkpoint's state read whole, written as one deterministic file, and
// compared bitwise with another checkpoint saved under any layout (`parity ckpt export`,
// `parity ckpt diff`, property 7 of the property suite).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "ckpt/unsharded.h"
#include "ckpt_helpers.h"
#include "core/safetensors.h"

namespace parity::ckpt {
namespace {

using testing::make_ranks;
using testing::save_layout;
using testing::Scratch;

class Unsharded : public Scratch {};

// Every tensor read whole is bitwise the synthetic formula (the salt's values at every global
// index), whatever layout saved it: strided FSDP x TP, HSDP x ETP, tp2ep, W = 1, the
// deepspeed rank order (with HSDP x ETP too) and etp outside {1, tp}.
TEST_F(Unsharded, ReadsEveryTensorWholeAndExactFromAnyLayout) {
  testing::Ranks one = make_ranks("dps1", 7);
  const ShardedState& truth = one.states[0]->state();
  for (const std::string layout : {"dps1", "dps4.tp2.ep2", "dpr2.dps2.tp2.ep2.etp2", "tp4.ep4", "dps3.ep1",
                                   "dps4.tp2.ep4.ds1", "dpr2.dps2.tp2.ep2.etp2.ds1", "dps2.tp4.ep2.etp2"}) {
    SCOPED_TRACE(layout);
    save_layout(path(layout), layout, 7);
    const UnshardedState st = read_unsharded(path(layout));
    ASSERT_EQ(st.tensors.size(), truth.size());
    EXPECT_EQ(st.md.step, 10);
    for (const StateEntry& e : truth.entries()) {
      const auto it =
          std::find_if(st.tensors.begin(), st.tensors.end(), [&](const auto& t) { return t.name == e.name; });
      ASSERT_NE(it, st.tensors.end()) << e.name;
      ASSERT_EQ(it->shape(), e.shape) << e.name;
      ASSERT_EQ(it->dtype(), e.dtype) << e.name;
      EXPECT_EQ(std::memcmp(it->data(), e.data(), static_cast<size_t>(it->bytes())), 0) << e.name;
    }
  }
}

// Saved under two different layouts: no difference, and the exported files are the same bytes.
TEST_F(Unsharded, SameStateUnderTwoLayoutsIsBitwiseEqualAndExportsTheSameBytes) {
  save_layout(path("a"), "dps4.tp2.ep2", 3);
  save_layout(path("b"), "dpr2.tp2.ep2", 3);
  const UnshardedState a = read_unsharded(path("a")), b = read_unsharded(path("b"));
  EXPECT_EQ(diff_unsharded(a, b), std::vector<std::string>{});
  write_unsharded(a, path("a.safetensors"));
  write_unsharded(b, path("b.safetensors"));
  const auto bytes = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(path("a.safetensors")), bytes(path("b.safetensors")));
  EXPECT_GT(bytes(path("a.safetensors")).size(), 10000u);
  const SafetensorsFile f = SafetensorsFile::read(path("a.safetensors"));
  EXPECT_EQ(f.names().size(), a.tensors.size());
  EXPECT_EQ(f.metadata.at("step"), "10");
}

// The export names the expert bias as `parity dump` and parity_torch do (layers.L.moe.expert_bias),
// each with its values; the checkpoint keeps its own key, so a checkpoint saved with it (all of
// them, this one too) still reads, and every other tensor keeps its name.
TEST_F(Unsharded, ExportNamesTheExpertBiasAsDumpDoes) {
  save_layout(path("a"), "dps4.tp2.ep2", 3);
  const UnshardedState a = read_unsharded(path("a"));
  write_unsharded(a, path("a.safetensors"));
  const SafetensorsFile f = SafetensorsFile::read(path("a.safetensors"));
  const std::vector<std::string> names = f.names();
  const auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  int biases = 0;
  for (const WholeTensor& t : a.tensors) {
    if (t.name.rfind("expert_bias.layers.", 0) != 0) {
      EXPECT_TRUE(has(t.name)) << t.name;
      continue;
    }
    ++biases;
    const std::string layer = t.name.substr(std::string("expert_bias.layers.").size());
    const std::string want = "layers." + layer + ".moe.expert_bias";
    EXPECT_FALSE(has(t.name)) << t.name;
    ASSERT_TRUE(has(want)) << want;
    const auto got = f.bytes(want);
    ASSERT_EQ(static_cast<int64_t>(got.size()), t.bytes());
    EXPECT_EQ(std::memcmp(got.data(), t.data(), got.size()), 0) << want;
  }
  EXPECT_GT(biases, 0);
  EXPECT_EQ(names.size(), a.tensors.size());
  EXPECT_EQ(export_name("expert_bias.layers.12"), "layers.12.moe.expert_bias");
  EXPECT_EQ(export_name("expert_bias.layers.x"), "expert_bias.layers.x");
  EXPECT_EQ(export_name("optim.m.layers.1.moe.router.gate"), "optim.m.layers.1.moe.router.gate");
}

// One element changed in one tensor: exactly that tensor is named, with 1 differing element,
// its flat index and both values; another salt makes every tensor differ.
TEST_F(Unsharded, NamesTheTensorTheCountAndTheFirstDifferingElement) {
  save_layout(path("a"), "dps2.tp2", 1);
  testing::Ranks one = make_ranks("dps1", 1);
  const StateEntry& e = one.states[0]->state().entries()[1];
  Tensor<double>& t = *std::get<Tensor<double>*>(e.local);
  t.data[5] = -t.data[5];
  save_all(*one.mesh, {&one.states[0]->state()}, {10, 640, testing::model_json()}, path("b"));
  const auto d = diff_unsharded(read_unsharded(path("a")), read_unsharded(path("b")));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].rfind(e.name + ": 1 of " + std::to_string(t.numel()) + " elements differ, first at flat index 5: ", 0),
            0u)
      << d[0];
  save_layout(path("c"), "dps4", 2);
  EXPECT_EQ(diff_unsharded(read_unsharded(path("a")), read_unsharded(path("c"))).size(),
            one.states[0]->state().size());
}

}  // namespace
}  // namespace parity::ckpt
