// The run's memory floor (harness/scenario/memory.h): below what a run was measured to use, near it,
// and refusals that name what is too large.
#include "harness/scenario/memory.h"

#include <string>

#include <gtest/gtest.h>

#include "core/error.h"
#include "harness/scenario/scenario.h"
#include "model/params.h"

namespace parity {
namespace {

const double GiB = 1024.0 * 1024 * 1024;

// docs/gpu.md measured the managed pool of one large_moe process: 10.6 GiB fp64, 5.6 GiB fp32.
TEST(Memory, FloorLiesJustBelowTheMeasuredLargeModel) {
  for (const auto& [file, measured] : {std::pair{"large_moe_fp64", 10.6}, std::pair{"large_moe_fp32", 5.6}}) {
    const Scenario s = load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/gpu/" + file + ".json");
    const MemoryEstimate est = estimate_memory(s.model, s.optim, s.layout);
    SCOPED_TRACE(file);
    double registry = 0;  // the parameter registry's count, which the estimate computes in closed form
    for (const ParamSpec& p : param_specs(s.model)) registry += static_cast<double>(numel(p.shape));
    EXPECT_EQ(est.parameters, registry);
    EXPECT_LT(est.process_bytes / GiB, measured);
    EXPECT_GT(est.process_bytes / GiB, 0.8 * measured);
    EXPECT_EQ(est.processes, 1);
  }
}

TEST(Memory, WithoutTheSharedBaselineEveryRankHoldsOne) {
  const Scenario s = load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/gpu/large_moe_w8_fp64.json");
  const MemoryEstimate est = estimate_memory(s.model, s.optim, s.layout, BaselinePlace::in_every_rank);
  EXPECT_EQ(est.processes, 8);
  EXPECT_DOUBLE_EQ(est.run_bytes, 8 * est.process_bytes);
}

// One baseline per host: the launcher's copy plus the layout's own state (one copy per HSDP
// replica, spread over the ranks), not eight baselines.
TEST(Memory, TheSharedBaselineIsCountedOnce) {
  Scenario s = load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/gpu/large_moe_w8_fp64.json");
  ASSERT_EQ(s.layout.dp_replicate, 1);
  const MemoryEstimate est = estimate_memory(s.model, s.optim, s.layout, BaselinePlace::once_per_host);
  EXPECT_EQ(est.baseline, BaselinePlace::once_per_host);
  EXPECT_GT(est.state_bytes, 0.5 * est.process_bytes);  // the large model's state dominates its activations
  EXPECT_GE(est.run_bytes, est.process_bytes + est.state_bytes);
  EXPECT_LT(est.run_bytes, 3 * est.process_bytes);
  s.layout.dp_replicate = 2, s.layout.dp_shard /= 2;
  const MemoryEstimate hsdp = estimate_memory(s.model, s.optim, s.layout, BaselinePlace::once_per_host);
  EXPECT_DOUBLE_EQ(hsdp.run_bytes - est.run_bytes, est.state_bytes);  // a second replica of the state
  LayoutConfig one;  // world 1: the run is the baseline, nothing shared
  EXPECT_EQ(estimate_memory(s.model, s.optim, one, BaselinePlace::once_per_host).baseline,
            BaselinePlace::in_every_rank);
}

TEST(Memory, MomentsFollowTheOptimizer) {
  ModelConfig m;
  OptimConfig adam, sgd, momentum;
  sgd.kind = momentum.kind = OptimKind::sgd;
  momentum.momentum = 0.9;
  const LayoutConfig one;
  const double p = estimate_memory(m, adam, one).parameters * 8;  // fp64
  EXPECT_DOUBLE_EQ(estimate_memory(m, adam, one).process_bytes - estimate_memory(m, momentum, one).process_bytes, p);
  EXPECT_DOUBLE_EQ(estimate_memory(m, momentum, one).process_bytes - estimate_memory(m, sgd, one).process_bytes, p);
}

TEST(Memory, RefusalsSayWhatAndHowMuch) {
  ModelConfig m;
  m.seq = int64_t{1} << 24;  // attention probabilities (B/M, H, S, S): 2^51 elements
  try {
    check_plausible_size(m, OptimConfig{});
    ADD_FAILURE() << "not refused";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "$.model");
    EXPECT_NE(e.rule().find("the largest tensor is the attention probabilities"), std::string::npos) << e.what();
  }
  Scenario s;
  s.model.dim = 1 << 20;
  s.model.heads = 2;
  s.layout.world = 2, s.layout.dp_shard = 2;
  try {
    require_memory(s, s.layout, "x.json");
    ADD_FAILURE() << "a 256 TiB process fitted this machine";
  } catch (const UnavailableError& e) {
    // PARITY_SHARED_BASELINE is not set under ctest: one baseline in the launcher.
    EXPECT_NE(std::string(e.what()).find("x.json: needs at least "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(the launcher's one-device baseline of 256.0 TiB and 2 ranks holding the "
                                         "layout's share"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(require_memory(Scenario{}, LayoutConfig{}, "tiny"));
  EXPECT_EQ(bytes_str(512), "512 bytes");
  EXPECT_EQ(bytes_str(1.5 * GiB), "1.5 GiB");
}

// A verdict measured again (docs/verdict.md "Measured again") trains a baseline and its twins in every rank: a
// small run fits; one that would not is told with the count, and never started.
TEST(Memory, AMeasurementAgainThatCannotFitSaysSo) {
  Scenario s;
  s.layout.world = 2, s.layout.dp_shard = 2;
  EXPECT_EQ(measured_again_memory(s, 16), "");
  s.model.dim = 1 << 16;
  s.model.heads = 2;
  const std::string why = measured_again_memory(s, 2);
  EXPECT_EQ(why.rfind("it would need at least ", 0), 0u) << why;
  EXPECT_NE(why.find("(2 ranks, each with its own baseline and 2 twins of "), std::string::npos) << why;
}

// The per-host cap (proc/launch.h kMaxRanksPerHost): a ConfigError at the layout's JSON path,
// prefixed by the scenario file; over --nnodes hosts the share per host counts.
TEST(Memory, WorldAboveThePerHostCapNamesItsJsonPath) {
  Scenario s;
  s.layout.world = 512, s.layout.dp_shard = 512;
  try {
    require_ranks_per_host(s, 1, "w.json");
    ADD_FAILURE() << "512 ranks on one host passed";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "w.json: $.layout.world");
    EXPECT_NE(e.rule().find("at most 256 ranks on one host"), std::string::npos) << e.what();
    EXPECT_NE(e.rule().find("got 512; spread it over more hosts with --nnodes (at least 2)"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(require_ranks_per_host(s, 2, "w.json"));  // 256 on each of 2 hosts
  EXPECT_THROW(require_ranks_per_host(s, 1, "w.json"), ConfigError);
  s.layout.world = 256, s.layout.dp_shard = 256;
  EXPECT_NO_THROW(require_ranks_per_host(s, 1, "w.json"));
  s.resume.emplace();
  s.resume->layout.world = 257;
  try {
    require_ranks_per_host(s, 1, "r.json");
    ADD_FAILURE() << "a resume layout of 257 ranks passed";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "r.json: $.resume.layout.world");
  }
}

}  // namespace
}  // namespace parity
