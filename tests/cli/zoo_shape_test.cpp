// What each bug of the zoo needs of a shape (src/cli/zoo_shape.h, `parity zoo --set`): every
// bug has an entry, can act in the scenario the registry names for it, and there expects what
// the registry expects; the reasons a bug cannot act name what the shape lacks.
#include "cli/zoo_shape.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/inject.h"
#include "harness/scenario/scenario.h"

namespace parity::cli {
namespace {

std::vector<std::string> alternatives(const std::string& a) {
  std::vector<std::string> out;
  if (a.empty()) return {""};  // any factor
  std::stringstream in(a);
  for (std::string x; std::getline(in, x, '|');) out.push_back(x);
  return out;
}

Scenario shipped(const Injection& bug) {
  return load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/" + std::string(bug.scenario));
}

TEST(ZooShape, EveryBugHasAnEntry) {
  for (const Injection& b : injections()) EXPECT_TRUE(zoo_shape_known(b.name)) << b.name;
}

TEST(ZooShape, EveryBugCanActInTheScenarioTheRegistryNames) {
  for (const Injection& b : injections()) EXPECT_EQ(zoo_cannot_act(b, shipped(b)), "") << b.name;
}

// In its shipped shape, the expectation over a set reduces to the registry's: the registry's
// roots are among the alternatives, and one factor alternative is part of the registry's factor.
TEST(ZooShape, InItsOwnShapeTheExpectationIsTheRegistrys) {
  for (const Injection& b : injections()) {
    const Scenario s = shipped(b);
    const std::vector<std::string> roots = alternatives(zoo_root_in(b, s));
    for (const std::string& r : alternatives(std::string(b.root)))
      EXPECT_NE(std::find(roots.begin(), roots.end(), r), roots.end()) << b.name << ": " << r;
    bool found = false;
    for (const std::string& f : alternatives(zoo_factor_in(b, s)))
      for (const std::string& reg : alternatives(std::string(b.factor)))
        found = found || reg.find(f) != std::string::npos;
    EXPECT_TRUE(found) << b.name << ": " << zoo_factor_in(b, s) << " against " << b.factor;
  }
}

TEST(ZooShape, FactorsFollowTheShape) {
  const Scenario s =
      load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/scale/llama3_405b_like_tp8_pp16_cp2_dp2.json");
  EXPECT_EQ(zoo_factor_in(find_injection("norm_counts_replicas"), s), "layernorm x16");  // tp 8 x cp 2 replicas
  EXPECT_EQ(zoo_factor_in(find_injection("router_grad_averaged"), s), "(= 1/tp)");     // "1/2 (= 1/tp)" at tp 2
}

TEST(ZooShape, WhyNotNamesWhatTheShapeLacks) {
  const Scenario dense_tp1 = load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/fsdp4.json");
  const Scenario llama =
      load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/scale/llama3_405b_like_tp8_pp16_cp2_dp2.json");
  EXPECT_EQ(zoo_cannot_act(find_injection("gather_backward_drops_peers"), llama),
            "needs an MoE layer (here every layer dense); needs tp without sequence parallel (each lane routing its "
            "share of the replicated tokens) (here sp on)");
  EXPECT_EQ(zoo_cannot_act(find_injection("sp_layernorm_not_summed"), dense_tp1),
            "needs tp >= 2 (here tp 1); needs sequence parallel (here sp off)");
  EXPECT_EQ(zoo_cannot_act(find_injection("grad_accum_in_bf16"), llama).rfind("needs pp 1", 0), 0u);
  EXPECT_EQ(zoo_cannot_act(find_injection("cp_kv_grad_local"), llama), "");
}

}  // namespace
}  // namespace parity::cli
