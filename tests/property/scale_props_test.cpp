// Issue 50 item 3: the property suite in worlds up to 1024 ranks, each case one `parity run
// --backend sim` (every rank a thread of one process; beyond the 256 processes a host may
// run). The case is drawn here, in the test's main thread (RapidCheck is not thread-safe), by
// scale_gen.h. A large world's run costs seconds, so ctest runs PARITY_PROPERTY_SCALE_CASES
// cases (default 3, from RC_PARAMS' seed); ci/soak runs more. A failure shrinks, leaves the
// case in property-failures/scale.json and prints the line that replays it.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "harness/scenario/scenario.h"
#include "properties.h"
#include "scale_gen.h"

namespace parity::property {
namespace {

int scale_cases() {
  const char* v = std::getenv("PARITY_PROPERTY_SCALE_CASES");
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : 3;
}

// Every row of the verdict within its bound (a near-tie in the routing discards the case).
void prop_every_row_on_sim() {
  const Scenario s = *gen_scale_case();
  RC_CLASSIFY(s.layout.world > 256, "beyond the process cap (W > 256)");
  RC_CLASSIFY(s.layout.pp > 1, "pp");
  RC_CLASSIFY(s.layout.cp > 1, "cp");
  RC_CLASSIFY(s.layout.ep > 1, "ep");
  RC_CLASSIFY(s.layout.sp, "SP");
  RC_CLASSIFY(s.model.moe_layers() > 0, "MoE");
  const auto t0 = std::chrono::steady_clock::now();
  const CaseRun r = run_case(s, "scale");
  std::printf("scale case: %s, %s: exit %d in %.1f s\n", describe_layout(s.layout, LayoutText::full).c_str(),
              precision_name(s.model.precision()).c_str(), r.rc,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  std::fflush(stdout);
  const std::string bad = failing_rows(r, {{"inputs", ""}, {"loss", ""}, {"grad", ""}, {"grad_norm", ""},
                                           {"clip_coef", ""}, {"routing", ""}, {"tokens_per_expert", ""},
                                           {"expert_bias", ""}, {"param", ""}, {"replicas", ""}});
  RC_PRE(bad.empty() || !has_near_tie(r));
  if (!bad.empty()) record_failure("scale", s, r, bad);
  RC_ASSERT(bad == std::string());
}

TEST(ScaleProps, EveryRowMatchesOnSimInWorldsUpTo1024Ranks) {
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  params.maxSuccess = scale_cases();
  rc::detail::TestMetadata md;
  md.id = "ScaleProps/EveryRowMatchesOnSimInWorldsUpTo1024Ranks";
  md.description = "every row on sim, W up to 1024";
  const auto result = rc::detail::checkTestable(&prop_every_row_on_sim, md, params);
  rc::detail::printResultMessage(result, std::cout);
  std::cout << "\n";
  EXPECT_TRUE(result.is<rc::detail::SuccessResult>());
}

// The generator draws only cases that can exist (the scenario's own validation), in worlds
// beyond the process cap in most draws, with every dimension drawn somewhere. No run: cheap.
TEST(ScaleProps, GeneratorDrawsValidCasesUpTo1024Ranks) {
  rc::Random random(20261127);
  int big = 0, pp = 0, cp = 0, ep = 0, tp = 0, dpr = 0, deepspeed = 0, max_world = 0;
  const auto gen = gen_scale_case();
  for (int i = 0; i < 300; ++i) {
    const Scenario s = gen(random.split(), i % 101).value();
    EXPECT_NO_THROW(validate_scenario(s)) << scenario_to_json(s).dump();
    EXPECT_LE(s.layout.world, 1024);
    big += s.layout.world > 256, pp += s.layout.pp > 1, cp += s.layout.cp > 1, ep += s.layout.ep > 1;
    tp += s.layout.tp > 1, dpr += s.layout.dp_replicate > 1, deepspeed += s.layout.order == RankOrder::deepspeed;
    max_world = std::max<int>(max_world, static_cast<int>(s.layout.world));
  }
  std::printf("300 drawn: W > 256 %d, pp %d, cp %d, ep %d, tp %d, dp_replicate %d, deepspeed %d, largest W %d\n", big,
              pp, cp, ep, tp, dpr, deepspeed, max_world);
  EXPECT_EQ(max_world, 1024);
  EXPECT_GT(big, 120);
  for (int n : {pp, cp, ep, tp, dpr, deepspeed}) EXPECT_GT(n, 20);
}

}  // namespace
}  // namespace parity::property
