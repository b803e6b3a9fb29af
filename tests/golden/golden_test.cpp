// Golden files: exact round trip, stable text, the compare's bounds, the scenario hash, and
// the gnuplot data and script (harness/golden/golden.h, harness/golden/plot.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <regex>
#include <set>
#include <sstream>

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

// A golden with everything issue 43 added: the measured loss bound, the perf, a resumed phase.
Golden make_full_golden() {
  Golden g = make_golden();
  for (size_t t = 0; t < g.baseline.steps(); ++t) g.loss_bound.push_back(3e-15 * static_cast<double>(t + 1));
  g.perf = Perf{"Test CPU x 2 CPUs", 3.3, 5.5, 1.5, {120.4, 80.25, 81}};
  g.resume_step = 5;
  g.resume_layout = "world 4 = dp_replicate 1 x dp_shard 4 x tp 1, ep 1, etp 1";
  Curves r = make_curves(12, 1.0 + 2e-16);
  for (auto* v : {&r.loss, &r.grad_norm, &r.aux_loss}) v->erase(v->begin(), v->begin() + 5);
  for (auto& l : r.tokens_per_expert) l.erase(l.begin(), l.begin() + 5);
  r.start_step = 5;
  g.resumed = r;
  return g;
}

TEST(GoldenFormat, PerfBoundAndResumedPhaseRoundTripAnOlderGoldenLacksThem) {
  const Golden g = make_full_golden();
  const std::string text = golden_to_text(g);
  const Golden back = golden_from_json(nlohmann::json::parse(text), "mem");
  EXPECT_EQ(golden_to_text(back), text);
  expect_same_bits(back.loss_bound, g.loss_bound);
  ASSERT_TRUE(back.perf && back.resumed);
  EXPECT_EQ(back.perf->machine, "Test CPU x 2 CPUs");
  EXPECT_EQ(back.perf->peak_rss_mib, (std::vector<double>{120.4, 80.25, 81}));
  EXPECT_EQ(back.perf->cpu_s, 5.5);
  EXPECT_EQ(back.perf->ranks_cpu_s, 1.5);
  EXPECT_EQ(back.resume_step, 5);
  EXPECT_EQ(back.resumed->start_step, 5);
  expect_same_bits(back.resumed->loss, g.resumed->loss);
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j.at("resume").at("curves").at("loss").at("start_step"), 5);
  EXPECT_TRUE(j.at("resume").at("curves").at("loss").at("values").contains("11"));
  // a golden of before (no perf, bound or resumed phase): read as "not pinned", not refused
  const Golden old = golden_from_json(nlohmann::json::parse(golden_to_text(make_golden())), "old");
  EXPECT_FALSE(old.perf.has_value());
  EXPECT_TRUE(old.loss_bound.empty());
  EXPECT_FALSE(old.resumed.has_value());
  EXPECT_TRUE(compare_golden(old, g).passed()) << "a resumed phase the golden does not pin is not compared";
  for (const char* bad : {R"({"cpu_s": -1, "machine": "m", "peak_rss_mib": [1], "ranks_cpu_s": 0, "wall_s": 1})",
                          R"({"cpu_s": 1, "peak_rss_mib": [1], "ranks_cpu_s": 0, "wall_s": 1})",
                          R"({"cpu_s": 1, "machine": "m", "peak_rss_mib": [1], "wall_s": 1})",
                          R"({"cpu_s": 1, "machine": "m", "peak_rss_mib": [], "ranks_cpu_s": 0, "wall_s": 1})"}) {
    nlohmann::json k = j;
    k["perf"] = nlohmann::json::parse(bad);
    EXPECT_THROW(golden_from_json(k, "g.json"), ConfigError) << bad;
  }
  nlohmann::json k = j;
  k["resume"]["save_at"] = 4;  // its curves start at 5
  EXPECT_THROW(golden_from_json(k, "g.json"), ConfigError);
  k = j;
  k["loss_bound"]["values"].erase("3");
  EXPECT_THROW(golden_from_json(k, "g.json"), ConfigError);
}

TEST(GoldenCompare, TheResumedPhaseIsComparedAtItsOwnSteps) {
  const Golden want = make_full_golden();
  Golden got = want;
  got.resumed->loss[2] *= 1 + 1e-6;  // step 5 + 2
  const GoldenCheck c = compare_golden(want, got);
  ASSERT_EQ(c.diffs.size(), 1u);
  EXPECT_EQ(c.diffs[0].run, "resumed");
  EXPECT_EQ(c.diffs[0].metric, "loss");
  EXPECT_EQ(c.diffs[0].step, 7);
  got = want;
  got.resumed.reset();
  EXPECT_FALSE(compare_golden(want, got).passed());
}

// The perf band, on planted numbers (docs/golden.md "Time and memory"): the run-to-run spread
// measured on a loaded 2-core machine passes, twice the baseline's CPU time, four times the
// ranks' or a memory jump fails, a short run's noise passes; another machine, no pin or
// --no-perf: not compared, and said.
TEST(GoldenPerf, NoisePassesTwiceTheTimeOrAMemoryJumpFails) {
  const Perf want{"M x 2 CPUs", 6.0, 10.0, 2.0, {200, 150, 150}};
  auto got = [&](double cpu, double ranks, std::vector<double> rss) {
    return Perf{"M x 2 CPUs", 30.0, cpu, ranks, std::move(rss)};
  };
  using State = PerfCheck::State;
  EXPECT_EQ(compare_perf(want, got(10.0, 2.0, {200, 150, 150}), true).state, State::pass);
  EXPECT_EQ(compare_perf(want, got(10.8, 4.5, {215, 165, 160}), true).state, State::pass)
      << "the spread measured under load: the baseline 1.08x, the ranks 2.24x, memory 1.04x";
  const PerfCheck slow = compare_perf(want, got(20.0, 2.0, {200, 150, 150}), true);
  EXPECT_EQ(slow.state, State::fail) << "2x the baseline's CPU time";
  ASSERT_EQ(slow.fails.size(), 1u);
  EXPECT_NE(slow.fails[0].find("cpu time of the command (the baseline) 20.00 s > 15.30 s"), std::string::npos)
      << slow.fails[0];
  const PerfCheck ranks = compare_perf(want, got(10.0, 8.0, {200, 150, 150}), true);
  EXPECT_EQ(ranks.state, State::fail) << "4x the ranks' CPU time";
  ASSERT_EQ(ranks.fails.size(), 1u);
  EXPECT_NE(ranks.fails[0].find("cpu time of the ranks' computing 8.00 s > 6.60 s"), std::string::npos);
  const PerfCheck fat = compare_perf(want, got(10.0, 2.0, {200, 300, 150}), true);
  EXPECT_EQ(fat.state, State::fail) << "rank 0's memory doubled";
  ASSERT_EQ(fat.fails.size(), 1u);
  EXPECT_NE(fat.fails[0].find("rank 0 300.0 MiB"), std::string::npos) << fat.fails[0];
  EXPECT_EQ(compare_perf(want, got(10.0, 2.0, {200, 150}), true).state, State::fail) << "a rank missing";
  const Perf small{"M x 2 CPUs", 0.5, 0.02, 0.2, {10, 20, 20}};  // most shipped goldens: 0.02 to 0.5 s
  EXPECT_EQ(compare_perf(small, Perf{"M x 2 CPUs", 9.0, 0.1, 0.45, {11, 21, 20.5}}, true).state, State::pass)
      << "a short run's noise on a loaded machine and any wall time";
  EXPECT_EQ(compare_perf(small, Perf{"M x 2 CPUs", 0.5, 0.02, 1.3, {10, 20, 20}}, true).state, State::fail);
  EXPECT_EQ(compare_perf(small, Perf{"M x 2 CPUs", 0.5, 0.02, 0.2, {10, 42, 20}}, true).state, State::fail);
  const PerfCheck other = compare_perf(want, Perf{"N x 64 CPUs", 1, 100, 100, {999}}, true);
  EXPECT_EQ(other.state, State::other_machine);
  EXPECT_NE(other.summary.find("another machine (M x 2 CPUs; this is N x 64 CPUs)"), std::string::npos)
      << other.summary;
  EXPECT_EQ(compare_perf(std::nullopt, got(100, 100, {1}), true).state, State::not_pinned);
  EXPECT_NE(compare_perf(std::nullopt, got(100, 100, {1}), true).summary.find("not pinned"), std::string::npos);
  EXPECT_EQ(compare_perf(want, got(100, 100, {999, 999, 999}), false).state, State::off);
  EXPECT_NE(machine_name().find(" CPU"), std::string::npos) << machine_name();
  const ProcessUsage u = process_usage();
  EXPECT_GT(u.peak_rss_mib, 1.0);
  EXPECT_GE(u.cpu_s, 0.0);
}

// The suite's total (issue 43): a 2x slowdown spread over many short scenarios, each inside its own
// band, fails the sum; the spread measured under load (1.07x over 166 scenarios at load 7) does not.
TEST(GoldenPerf, TheSuitesTotalSeesWhatNoScenarioCan) {
  const Perf want{"M x 2 CPUs", 0.5, 0.03, 0.2, {10, 20, 20}};
  std::vector<PerfShare> loaded, slow;
  for (int i = 0; i < 160; ++i) {
    const Perf noisy{"M x 2 CPUs", 2.0, 0.035, 0.21, {10, 20, 20}};
    const Perf twice{"M x 2 CPUs", 1.0, 0.06, 0.4, {10, 20, 20}};
    ASSERT_EQ(compare_perf(want, twice, true).state, PerfCheck::State::pass) << "each run alone: inside its band";
    loaded.push_back(perf_share(want, noisy, compare_perf(want, noisy, true)));
    slow.push_back(perf_share(want, twice, compare_perf(want, twice, true)));
  }
  const SuitePerf ok = suite_perf(loaded, 166);
  EXPECT_TRUE(ok.compared);
  EXPECT_FALSE(ok.failed) << ok.line;
  const SuitePerf bad = suite_perf(slow, 166);
  EXPECT_TRUE(bad.failed) << bad.line;
  EXPECT_NE(bad.line.find("perf total FAIL: cpu 73.60 s"), std::string::npos) << bad.line;
  EXPECT_NE(bad.line.find("over 160 of 166 scenarios"), std::string::npos) << bad.line;
  EXPECT_NE(bad.line.find("pinned 36.80 s; limit 60.88 s"), std::string::npos) << bad.line;
  // Only what was compared on this machine counts: another machine's, --no-perf and unpinned shares do not.
  const Perf other{"N x 64 CPUs", 1, 100, 100, {1}};
  const std::vector<PerfShare> none = {perf_share(want, other, compare_perf(want, other, true)),
                                       perf_share(want, other, compare_perf(want, other, false)),
                                       perf_share(std::nullopt, other, compare_perf(std::nullopt, other, true))};
  EXPECT_FALSE(suite_perf(none, 3).compared);
  // The child's file round trip, and damage refused.
  const PerfShare back = parse_perf_share(perf_share_json(slow[0]), "f");
  EXPECT_TRUE(back.compared);
  EXPECT_DOUBLE_EQ(back.ranks_cpu_s, 0.4);
  EXPECT_DOUBLE_EQ(back.pinned_cpu_s, 0.03);
  EXPECT_THROW(parse_perf_share("{\"compared\": true, \"cpu_s\": -1}", "f"), ConfigError);
  EXPECT_THROW(parse_perf_share("not json", "f"), ConfigError);
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

TEST(Plot, DataMarksExactZerosApartAndScriptDrawsBothPanels) {
  Golden g = make_golden();
  g.layout_curves->loss = g.baseline.loss;  // identical: every difference is an exact 0
  const std::string data = plot_data({g});
  // an exact 0 is no value on a log axis: a gap in the error column, a 1 in the exact-zero column
  EXPECT_NE(data.find(" NaN "), std::string::npos) << data;
  EXPECT_NE(data.find(" 1 ? ? ?\n"), std::string::npos) << data;
  EXPECT_EQ(data.find("e-18"), std::string::npos) << data;
  Golden d = make_golden();
  d.layout_curves->loss[0] = d.baseline.loss[0] * (1 + 1e-15);  // a difference: a value, no mark
  const std::string dd = plot_data({d});
  const size_t at = dd.find("\n0 ") + 1;
  const std::string row0 = dd.substr(at, dd.find('\n', at) - at);
  std::istringstream cells(row0);
  const std::vector<std::string> c0{std::istream_iterator<std::string>(cells), {}};
  ASSERT_EQ(c0.size(), 9u) << row0;
  EXPECT_EQ(c0[5], "NaN") << row0;  // only the exact-zero column is empty (no resumed phase: ?)
  EXPECT_EQ(std::count(c0.begin(), c0.end(), "NaN"), 1) << row0;
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

// The bound line is the measured one a golden stores (its twin's noise times |loss|), named so in
// the legend; the floor where a golden stores none. A resumed golden marks its step and draws the
// second layout, named in its colour; the perf is written beside the loss.
TEST(Plot, MeasuredBoundResumeAndPerfDrawn) {
  const Golden g = make_full_golden();
  const std::string data = plot_data({g});
  const size_t at = data.find("\n3 ") + 1;
  std::istringstream row3(data.substr(at, data.find('\n', at) - at));
  std::vector<std::string> cols{std::istream_iterator<std::string>(row3), {}};
  ASSERT_EQ(cols.size(), 9u) << data;
  EXPECT_DOUBLE_EQ(std::stod(cols[4]), 3e-15 * 4 * g.baseline.loss[3]) << "the stored bound, not the floor";
  EXPECT_EQ(cols[6], "?") << "step 3 is before the resume";
  const size_t at7 = data.find("\n7 ") + 1;
  std::istringstream row7(data.substr(at7, data.find('\n', at7) - at7));
  std::vector<std::string> c7{std::istream_iterator<std::string>(row7), {}};
  ASSERT_EQ(c7.size(), 9u);
  EXPECT_EQ(std::stod(c7[6]), g.resumed->loss[2]);
  PlotOptions o;
  o.stem = "/tmp/p";
  const std::string gp = plot_script({g}, o);
  EXPECT_NE(gp.find("set arrow 1 from 5, graph 0 to 5, graph 1"), std::string::npos) << gp;
  EXPECT_NE(gp.find("using 1:7 with lines lw 2.5 lc rgb '" + layout_color(g.resume_layout) + "'"), std::string::npos);
  EXPECT_NE(gp.find("using 1:($1 < 5 ? $3 : NaN) with lines lw 2.5 lc rgb '" + layout_color(g.layout) + "'"),
            std::string::npos);
  EXPECT_NE(gp.find("then from step 5: world 4 = dp\\_shard 4"), std::string::npos) << "both layouts named";
  EXPECT_NE(gp.find("loss bound (10x the twin''s noise, or its floor)"), std::string::npos);
  EXPECT_NE(gp.find("wall 3.3 s, cpu 5.5 + 1.5 s, peak 120 MiB (largest of 3)"), std::string::npos);
  const std::string old = plot_script({make_golden()}, o);
  EXPECT_NE(old.find("loss bound''s floor"), std::string::npos);
  EXPECT_EQ(old.find("set arrow 1"), std::string::npos);
  EXPECT_EQ(old.find("peak"), std::string::npos);
  const std::string both = plot_script({make_golden(), g}, o);
  EXPECT_NE(both.find("loss bound (measured, or its floor: no twin stored)"), std::string::npos);
}

// The plot commands of a script's first figure (the PNG; the SVG repeats it), each with the key
// state and the plot area (screen coordinates) in force when it ran.
struct PlotCmd {
  bool key_on = true;  // gnuplot's default
  double l = 0, r = 1, t = 1, b = 0;
  std::string text;
};

std::vector<PlotCmd> plots_of(const std::string& script) {
  std::vector<PlotCmd> out;
  PlotCmd state;
  std::istringstream in(script.substr(0, script.find("set terminal svg")));
  std::string line, cmd;
  while (std::getline(in, line)) {
    cmd += line;
    if (!cmd.empty() && cmd.back() == '\\') {
      cmd.pop_back();
      continue;
    }
    std::istringstream parts(cmd);
    for (std::string part; std::getline(parts, part, ';'); cmd.clear()) {
      part.erase(0, part.find_first_not_of(' '));
      double v = 0;
      if (part.rfind("unset key", 0) == 0) state.key_on = false;
      if (part.rfind("set key", 0) == 0) state.key_on = true;
      for (auto [name, field] : {std::pair{"lmargin", &PlotCmd::l},
                                 {"rmargin", &PlotCmd::r},
                                 {"tmargin", &PlotCmd::t},
                                 {"bmargin", &PlotCmd::b}})
        if (std::sscanf(part.c_str(), (std::string("set ") + name + " at screen %lf").c_str(), &v) == 1)
          state.*field = v;
      if (part.rfind("plot ", 0) == 0) {
        out.push_back(state);
        out.back().text = part;
      }
    }
    cmd.clear();
  }
  return out;
}

bool overlap(const PlotCmd& a, const PlotCmd& b) { return a.l < b.r && b.l < a.r && a.b < b.t && b.b < a.t; }

std::vector<Golden> group(size_t n) {
  std::vector<Golden> gs;
  for (size_t i = 0; i < n; ++i) {
    gs.push_back(make_golden());
    gs.back().scenario = "scenario_" + std::to_string(i);
    gs.back().layout = "world " + std::to_string(i + 2) + " = dp_replicate 1 x dp_shard " + std::to_string(i + 2);
  }
  return gs;
}

size_t count(const std::vector<PlotCmd>& ps, const std::string& what) {
  size_t k = 0;
  for (const PlotCmd& p : ps) k += p.text.find(what) != std::string::npos;
  return k;
}

TEST(Plot, GroupFigureIsAGridWithOnePanelPerScenario) {
  PlotOptions o;
  o.stem = "/tmp/p";
  for (size_t n : {1, 7, 32}) {
    std::vector<Golden> gs = group(n);
    gs[0].layout_curves.reset();  // world 1: a loss panel, no error panel
    const std::string gp = plot_script(gs, o);
    const size_t cols = n == 1 ? 1 : n == 7 ? 3 : 6;
    EXPECT_NE(gp.find("# small multiples: " + std::to_string(n) + " panels, " + std::to_string(cols) + " columns x " +
                      std::to_string((n + cols - 1) / cols) + " rows"),
              std::string::npos);
    const std::vector<PlotCmd> ps = plots_of(gp);
    EXPECT_EQ(count(ps, "using 1:2 "), n) << "a loss panel (the baseline) per scenario";
    EXPECT_EQ(count(ps, "using 1:4 "), n - 1) << "an error panel per scenario with a layout";
    for (size_t i = 0; i < n; ++i) EXPECT_NE(gp.find("index " + std::to_string(i) + " using 1:2 "), std::string::npos);
    for (size_t i = 0; i < ps.size(); ++i) {
      EXPECT_TRUE(ps[i].l >= 0 && ps[i].r <= 1 && ps[i].b >= 0 && ps[i].t <= 1 && ps[i].l < ps[i].r &&
                  ps[i].b < ps[i].t);
      for (size_t j = 0; j < i; ++j) EXPECT_FALSE(overlap(ps[i], ps[j])) << ps[i].text << "\n" << ps[j].text;
    }
  }
}

TEST(Plot, NoKeyInsideAPanelOneSharedLegendOutsideThem) {
  PlotOptions o;
  o.stem = "/tmp/p";
  const std::vector<PlotCmd> ps = plots_of(plot_script(group(9), o));
  size_t legends = 0;
  for (const PlotCmd& p : ps) {
    if (p.text.find(".dat'") != std::string::npos) {
      EXPECT_FALSE(p.key_on) << "a key over the data of: " << p.text;
      continue;
    }
    ++legends;  // the legend: a key over an area that holds no data and no panel
    EXPECT_TRUE(p.key_on);
    EXPECT_EQ(std::regex_replace(p.text, std::regex(R"(\s*NaN with [^,]*title '([^']|'')*',?\s*)"), ""), "plot")
        << "the legend draws only NaN: " << p.text;
    for (const PlotCmd& q : ps)
      if (&q != &p) {
        EXPECT_FALSE(overlap(p, q)) << q.text;
      }
  }
  EXPECT_EQ(legends, 1u);
}

std::string loss_color(const std::string& script, size_t index) {
  std::smatch m;
  const std::string key = "index " + std::to_string(index) + " using 1:3 with lines lw 2.5 lc rgb '(#[0-9a-f]{6})'";
  return std::regex_search(script, m, std::regex(key)) ? m[1].str() : "none";
}

TEST(Plot, ALayoutHasOneColourInEveryFigure) {
  const std::string a = "world 2 = dp_replicate 1 x dp_shard 2 x tp 1, ep 1, etp 1";
  const std::string b = "world 4 = dp_replicate 1 x dp_shard 4 x tp 1, ep 1, etp 1";
  std::vector<Golden> one = group(2), two = group(3);
  one[0].layout = a, one[1].layout = b;
  two[2].layout = a, two[2].scenario = "another_scenario", two[0].layout = b + ", sp";
  PlotOptions o;
  o.stem = "/tmp/p";
  const std::string gp1 = plot_script(one, o), gp2 = plot_script(two, o);
  EXPECT_EQ(loss_color(gp1, 0), layout_color(a));
  EXPECT_EQ(loss_color(gp2, 2), layout_color(a)) << "the same layout, another figure, another place";
  EXPECT_EQ(loss_color(gp1, 1), layout_color(b));
  EXPECT_NE(loss_color(gp1, 0), loss_color(gp1, 1)) << "two layouts in one figure";
  EXPECT_NE(gp2.find("using 1:4 with linespoints pt 7 ps 0.35 lw 1 lc rgb '" + layout_color(a) + "'"),
            std::string::npos);
  std::set<std::string> used;  // the hash spreads layouts over the palette
  for (size_t w = 2; w <= 64; ++w)
    used.insert(layout_color("world " + std::to_string(w) + " = dp_shard " + std::to_string(w)));
  EXPECT_GE(used.size(), 10u);
  for (const std::string& c : used) EXPECT_TRUE(c != "#000000" && c != "#ff0000") << c;
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
