// Golden files: exact round trip, stable text, the compare's bounds, the scenario hash, and
// the gnuplot data and script (harness/golden/golden.h, harness/golden/plot.h).
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "harness/golden/golden.h"
#include "harness/golden/plot.h"
#include "harness/scenario/scenario.h"
#include "harness/verdict/tolerance.h"

namespace parity {
namespace {

Curves make_curves(size_t steps, double scale) {
  Curves c;
  c.moe_layers = {1, 3};
  c.tokens_per_expert.resize(2);
  for (size_t t = 0; t < steps; ++t) {
    c.loss.push_back(scale * (4.0 + 1.0 / 3.0 - 0.01 * static_cast<double>(t)));
    c.grad_norm.push_back(0.1 + std::ldexp(1.0, -60) * static_cast<double>(t));
    c.aux_loss.push_back(t % 2 ? 0.0 : std::numeric_limits<double>::denorm_min() * static_cast<double>(t + 1));
    c.tokens_per_expert[0].push_back({static_cast<int64_t>(t), 3, 0, 61});
    c.tokens_per_expert[1].push_back({7, 7, 7, 7});
  }
  return c;
}

Golden make_golden() {
  Golden g;
  g.scenario = "x";
  g.scenario_hash = "fnv1a64:0123456789abcdef";
  g.dtype = "fp64";
  g.commit = "unknown";
  g.backend = "mpi";
  g.layout = "world 2 = dp_replicate 1 x dp_shard 2 x tp 1, ep 1, etp 1";
  g.world = 2;
  g.entropy_floor = std::log(4.0) * 0.7;
  g.baseline = make_curves(12, 1.0);
  g.layout_curves = make_curves(12, 1.0 + 1e-16);
  return g;
}

void expect_same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(std::memcmp(&a[i], &b[i], sizeof(double)), 0) << "index " << i;
}

TEST(GoldenFormat, RoundTripsFp64ExactlyAndTextIsStable) {
  const Golden g = make_golden();
  const std::string text = golden_to_text(g);
  const Golden back = golden_from_json(nlohmann::json::parse(text), "mem");
  expect_same_bits(back.baseline.loss, g.baseline.loss);
  expect_same_bits(back.baseline.grad_norm, g.baseline.grad_norm);
  expect_same_bits(back.baseline.aux_loss, g.baseline.aux_loss);
  expect_same_bits(back.layout_curves->loss, g.layout_curves->loss);
  EXPECT_EQ(back.baseline.tokens_per_expert, g.baseline.tokens_per_expert);
  EXPECT_EQ(back.baseline.moe_layers, g.baseline.moe_layers);
  EXPECT_EQ(back.entropy_floor, g.entropy_floor);
  EXPECT_EQ(golden_to_text(back), text);  // byte-stable
  EXPECT_TRUE(compare_golden(g, back).passed());
}

TEST(GoldenFormat, MegatronShapeAndSortedKeys) {
  const std::string text = golden_to_text(make_golden());
  const nlohmann::json j = nlohmann::json::parse(text);
  const auto& loss = j.at("baseline").at("loss");
  EXPECT_EQ(loss.at("start_step"), 0);
  EXPECT_EQ(loss.at("end_step"), 11);
  EXPECT_EQ(loss.at("step_interval"), 1);
  EXPECT_EQ(loss.at("values").size(), 12u);
  EXPECT_TRUE(j.at("layout").contains("tokens_per_expert.layer3"));
  // top-level keys appear in sorted order, steps in step order
  EXPECT_LT(text.find("\"backend\""), text.find("\"baseline\""));
  EXPECT_LT(text.find("\"scenario\""), text.find("\"world\""));
  EXPECT_LT(text.find("\"9\":"), text.find("\"10\":"));
  EXPECT_NE(text.find(": 4.333333333333333,\n"), std::string::npos);  // %.17g (trailing 0 dropped)
}

TEST(GoldenFormat, RefusesMalformedFiles) {
  nlohmann::json j = nlohmann::json::parse(golden_to_text(make_golden()));
  j["baseline"]["loss"]["values"].erase("5");
  EXPECT_THROW(golden_from_json(j, "g.json"), ConfigError);
  j = nlohmann::json::parse(golden_to_text(make_golden()));
  j["format"] = "megatron";
  EXPECT_THROW(golden_from_json(j, "g.json"), ConfigError);
  EXPECT_THROW(load_golden("/nonexistent/golden.json"), IoError);
}

TEST(GoldenCompare, LastBitPassesRealChangeFailsWithItsStep) {
  const Golden want = make_golden();
  Golden got = want;
  got.layout_curves->loss[4] = std::nextafter(got.layout_curves->loss[4], 10.0);
  EXPECT_TRUE(compare_golden(want, got).passed());
  const double tol = tolerance_for(DType::f64, Quantity::golden_curve).norm_rel;
  got.layout_curves->loss[7] *= 1 + 10 * tol;
  GoldenCheck c = compare_golden(want, got);
  ASSERT_EQ(c.diffs.size(), 1u);
  EXPECT_EQ(c.diffs[0].run, "layout");
  EXPECT_EQ(c.diffs[0].metric, "loss");
  EXPECT_EQ(c.diffs[0].step, 7);
  EXPECT_NEAR(c.diffs[0].rel, 10 * tol, tol);
  got = want;
  got.baseline.tokens_per_expert[1][2] = {8, 6, 7, 7};  // counts are exact
  c = compare_golden(want, got);
  ASSERT_EQ(c.diffs.size(), 1u);
  EXPECT_EQ(c.diffs[0].metric, "tokens_per_expert.layer3");
  EXPECT_EQ(c.diffs[0].step, 2);
  got = want;
  got.baseline.aux_loss[1] = 1e-300;  // golden 0: only 0 matches
  EXPECT_FALSE(compare_golden(want, got).passed());
  got = want;
  got.layout_curves.reset();
  EXPECT_FALSE(compare_golden(want, got).passed());
  got = want;
  got.baseline.loss.pop_back();
  EXPECT_FALSE(compare_golden(want, got).passed());
}

TEST(GoldenHash, FollowsContentNotLocation) {
  Scenario a = parse_scenario(nlohmann::json::object(), "a");
  Scenario b = a;
  b.source = "/elsewhere/a.json";
  EXPECT_EQ(scenario_hash(a), scenario_hash(b));
  b.optim.lr *= 2;
  EXPECT_NE(scenario_hash(a), scenario_hash(b));
  EXPECT_EQ(scenario_hash(a).rfind("fnv1a64:", 0), 0u);
}

TEST(GoldenFiles, SaveThenLoad) {
  const std::string path = (std::filesystem::temp_directory_path() / "parity_golden_test" / "x.json").string();
  save_golden(path, make_golden());
  EXPECT_EQ(golden_to_text(load_golden(path)), golden_to_text(make_golden()));
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST(Plot, DataClampsExactZerosAndScriptDrawsBothPanels) {
  Golden g = make_golden();
  g.layout_curves->loss = g.baseline.loss;  // identical: every difference is an exact 0
  const std::string data = plot_data({g});
  EXPECT_NE(data.find(" 1.0000000000000001e-18 "), std::string::npos);
  PlotOptions o;
  o.stem = "/tmp/p";
  o.title = "a_b";
  const std::string gp = plot_script({g, make_golden()}, o);
  EXPECT_NE(gp.find("set terminal pngcairo"), std::string::npos);
  EXPECT_NE(gp.find("set terminal svg"), std::string::npos);
  EXPECT_NE(gp.find("\nset logscale y"), std::string::npos);
  EXPECT_NE(gp.find("entropy floor"), std::string::npos);
  EXPECT_NE(gp.find("index 1 using 1:4"), std::string::npos);
  Golden w1 = make_golden();
  w1.layout_curves.reset();  // world 1: the upper panel only
  EXPECT_EQ(plot_script({w1}, o).find("\nset logscale y"), std::string::npos);
}

TEST(Plot, MissingGnuplotIsAClearError) {
  PlotOptions o;
  o.stem = (std::filesystem::temp_directory_path() / "parity_plot_test" / "p").string();
  o.gnuplot = "/nonexistent/gnuplot";
  try {
    plot_curves({make_golden()}, o);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("gnuplot-nox"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(std::filesystem::path(o.stem).parent_path());
}

}  // namespace
}  // namespace parity
