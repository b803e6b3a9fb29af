// `parity compare` (harness/verdict/dump_compare.h): a reference dump against candidates that
// are the same run, or the same run with one planted change; each change must fail the row it
// touches and be named as the root, with its factor.
#include "harness/verdict/dump_compare.h"
#include "harness/verdict/dump_read.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/safetensors.h"
#include "harness/runner/dump.h"
#include "harness/verdict/dump_read.h"
#include "harness/verdict/dump_split.h"
#include "harness/verdict/bounds.h"
#include "harness/scenario/scenario.h"
#include "harness/verdict/verdict_root.h"

namespace parity::dump_compare_test {  // one namespace per file: the tests build as unity batches
namespace {

namespace fs = std::filesystem;

const fs::path& root_dir() {
  static const fs::path d = fs::temp_directory_path() / ("parity_dump_compare_" + std::to_string(::getpid()));
  return d;
}

// tiny (dense layer, MoE layer with a shared expert, 2 micro-batches, adam), 3 steps
std::string dump_of(const std::string& name, const std::string& precision, bool bounds) {
  const fs::path dir = root_dir() / name;
  if (fs::exists(dir / "manifest.json")) return dir;
  fs::create_directories(root_dir());
  Scenario s = load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/tiny.json");
  s.steps = 3;
  s.model.set_precision(parse_precision(precision, "precision"));
  write_dump(s, dir, bounds);
  return dir;
}

// A copy of the fp64 candidate (the same run, dumped without the twin) for one test to change.
std::string candidate(const std::string& name) {
  const fs::path dir = root_dir() / ("cand_" + name);
  fs::remove_all(dir);
  fs::copy(dump_of("cand64", "fp64", false), dir, fs::copy_options::recursive);
  return dir;
}

// Rewrites tensor `name` of `file` in dir through fn (fp64 and int64 tensors, as doubles).
void edit(const std::string& dir, const std::string& file, const std::string& name,
          const std::function<void(std::vector<double>&)>& fn) {
  const std::string path = dir + "/" + file;
  const SafetensorsFile f = SafetensorsFile::read(path);
  ASSERT_TRUE(f.contains(name)) << path << " " << name;
  SafetensorsWriter w;
  for (const std::string& n : f.names()) {
    if (f.dtype(n) == DType::i64) {
      Tensor<int64_t> t = f.get<int64_t>(n);
      if (n == name) {
        std::vector<double> v(t.data.begin(), t.data.end());
        fn(v);
        for (size_t i = 0; i < v.size(); ++i) t.data[i] = static_cast<int64_t>(v[i]);
      }
      w.add(n, t);
    } else {
      Tensor<double> t = f.get<double>(n);
      if (n == name) {
        std::vector<double> v(t.data.begin(), t.data.end());
        fn(v);
        for (size_t i = 0; i < v.size(); ++i) t.data[i] = v[i];
      }
      w.add(n, t);
    }
  }
  w.write(path);
}
std::string step_file(int t) { return "step_00000" + std::to_string(t) + ".safetensors"; }

VerdictReport compare(const std::string& got, const std::string& map = "", const std::string& ref = "") {
  DumpCompareOptions o;
  o.ref_dir = ref.empty() ? dump_of("ref64", "fp64", true) : ref;
  o.got_dir = got, o.map_file = map;
  return compare_dumps(o);
}

const Row& row(const VerdictReport& r, const std::string& quantity, const std::string& subject) {
  for (const Row& x : r.rows)
    if (x.quantity == quantity && x.subject == subject) return x;
  throw std::runtime_error("no row " + quantity + " " + subject);
}

class DumpCompare : public ::testing::Test {
 public:
  static void TearDownTestSuite() { fs::remove_all(root_dir()); }
};

TEST_F(DumpCompare, TheSameRunPassesOnEveryRowWithTheTwinsBounds) {
  const VerdictReport r = compare(dump_of("cand64", "fp64", false));
  EXPECT_TRUE(r.passed()) << format_verdict(r);
  EXPECT_EQ(r.steps, 3);
  EXPECT_NE(r.layout.find("bounds: its rounding twin"), std::string::npos) << r.layout;
  // loss, grad_norm, clip_coef, 8 grad + 8 param families... every family of tiny, tokens, bias,
  // one MoE layer's routing, the inputs
  EXPECT_EQ(r.rows.size(), 3u + 2 * 8 + 2 + 1 + 1) << format_verdict(r);
  for (const Row& x : r.rows) EXPECT_GE(x.step, 0) << x.quantity << " " << x.subject << ": never compared";
  EXPECT_EQ(row(r, "routing", "layers.1").compared, 4 * 8);
}

TEST_F(DumpCompare, ARouterGradientSummedTwiceIsNamedWithItsFactor) {
  const std::string got = candidate("router2");
  for (int t = 0; t < 3; ++t)
    edit(got, step_file(t), "grads.layers.1.moe.router.gate", [](auto& v) { for (double& x : v) x *= 2; });
  const VerdictReport r = compare(got);
  ASSERT_FALSE(r.passed());
  const RootCause root = find_root(r);
  ASSERT_TRUE(root.found);
  EXPECT_EQ(r.rows[root.row].quantity, "grad");
  EXPECT_EQ(r.rows[root.row].subject, "router");
  EXPECT_EQ(root.step, 0);
  EXPECT_NEAR(r.rows[root.row].scale_ratio, 2.0, 1e-12);
  EXPECT_EQ(r.rows[root.row].flow_tensor, "layers.1.moe.router.gate");
  EXPECT_NE(root.factor.find("2 (="), std::string::npos) << root.factor;
}

// The row's bound is what a change is held to: just above it fails, just below passes.
TEST_F(DumpCompare, AGradientChangeIsHeldToTheRowsBound) {
  const double bound = row(compare(dump_of("cand64", "fp64", false)), "grad", "attention").tol;
  ASSERT_GT(bound, 0);
  for (const double k : {0.3, 3.0}) {
    const std::string got = candidate("attn" + std::to_string(k));
    edit(got, step_file(1), "grads.layers.0.attn.wv", [&](auto& v) { for (double& x : v) x *= 1 + k * bound * 2; });
    const VerdictReport r = compare(got);
    const Row& a = row(r, "grad", "attention");
    EXPECT_EQ(a.verdict, k < 1 ? RowVerdict::ok : RowVerdict::fail) << "x(1 + " << k << " bound)";
  }
}

// The parameters' scale ratio is read on the update: an update applied at half its size says 0.5.
TEST_F(DumpCompare, AHalvedUpdateShowsAsHalfOnTheParameterRow) {
  const std::string got = candidate("half");
  const SafetensorsFile init = SafetensorsFile::read(dump_of("cand64", "fp64", false) + "/init.safetensors");
  for (const char* w : {"w1", "w2", "w3"}) {  // the dense_mlp family: layer 0's MLP
    const Tensor<double> before = init.get<double>(std::string("layers.0.mlp.") + w);
    edit(got, step_file(0), std::string("params.layers.0.mlp.") + w, [&](auto& v) {
      for (size_t i = 0; i < v.size(); ++i) v[i] = before.data[i] + 0.5 * (v[i] - before.data[i]);
    });
  }
  const VerdictReport r = compare(got);
  const Row& p = row(r, "param", "dense_mlp");
  EXPECT_EQ(p.verdict, RowVerdict::fail);
  EXPECT_EQ(p.step, 0);
  EXPECT_NEAR(p.scale_ratio, 0.5, 1e-9);
}

TEST_F(DumpCompare, CountsPerRankAndOtherDataAndOtherRoutingAreCaught) {
  {
    const std::string got = candidate("tpe");
    // a rank's own counts over dp 2: half the step's (token, slot) assignments, spread otherwise
    edit(got, step_file(0), "layers.1.moe.tokens_per_expert", [](auto& v) {
      double total = 0, half = 0;
      for (double x : v) total += x;
      for (double& x : v) x = std::floor(x / 2), half += x;
      v[0] += total / 2 - half;
    });
    const VerdictReport r = compare(got);
    const RootCause root = find_root(r);
    ASSERT_TRUE(root.found);
    EXPECT_EQ(r.rows[root.row].quantity, "tokens_per_expert");
    EXPECT_DOUBLE_EQ(r.rows[root.row].scale_ratio, 0.5);  // the totals' ratio
  }
  {
    const std::string got = candidate("inputs");
    edit(got, step_file(2), "inputs", [](auto& v) { v[5] = v[5] == 0 ? 1 : 0; });
    const VerdictReport r = compare(got);
    const RootCause root = find_root(r);
    ASSERT_TRUE(root.found);
    EXPECT_EQ(r.rows[root.row].quantity, "inputs");
    EXPECT_EQ(root.step, 2);
    EXPECT_NE(r.rows[root.row].detail.find("1 of 64 tokens differ"), std::string::npos) << r.rows[root.row].detail;
  }
  {
    const std::string got = candidate("routing");
    edit(got, step_file(0), "layers.1.moe.chosen", [](auto& v) { std::swap(v[6], v[7]); });  // token 3's two slots
    const VerdictReport r = compare(got);
    const Row& x = row(r, "routing", "layers.1");
    EXPECT_EQ(x.verdict, RowVerdict::fail);
    EXPECT_NE(x.detail.find("1 of 32 tokens chose other experts (0 near-tie)"), std::string::npos) << x.detail;
  }
}

TEST_F(DumpCompare, WhatTheCandidateLacksIsNamed) {
  const std::string got = candidate("lacks");
  fs::remove(fs::path(got) / step_file(2));
  try {
    compare(got);
    FAIL() << "no error";
  } catch (const ConfigError& e) {  // the manifest still lists it
    EXPECT_NE(std::string(e.what()).find(step_file(2)), std::string::npos) << e.what();
  }
  const std::string renamed = candidate("renamed");
  for (const std::string& f : {std::string("init.safetensors"), step_file(0), step_file(1), step_file(2)}) {
    const SafetensorsFile in = SafetensorsFile::read(renamed + "/" + f);
    SafetensorsWriter w;
    for (const std::string& n : in.names()) {
      const std::string pre = n.rfind("grads.", 0) == 0 ? "grads." : n.rfind("params.", 0) == 0 ? "params." : "";
      if (n.substr(pre.size()) == "layers.1.moe.router.gate") {
        const Tensor<double> t = in.get<double>(n);
        Tensor<double> tr({t.shape[1], t.shape[0]});
        for (int64_t i = 0; i < t.shape[0]; ++i)
          for (int64_t j = 0; j < t.shape[1]; ++j) tr.data[j * t.shape[0] + i] = t.data[i * t.shape[1] + j];
        w.add(pre + "gate.weight", tr);
      } else if (in.dtype(n) == DType::i64) {
        w.add(n, in.get<int64_t>(n));
      } else {
        w.add(n, in.get<double>(n));
      }
    }
    w.write(renamed + "/" + f);
  }
  try {
    compare(renamed);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("has no tensor \"layers.1.moe.router.gate\""), std::string::npos) << e.what();
  }
  const fs::path map = root_dir() / "map.json";
  std::ofstream(map) << R"({"gate.weight": "layers.1.moe.router.gate"})";
  try {
    compare(renamed, map);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("\"transpose\": true"), std::string::npos) << e.what();
  }
  std::ofstream(map) << R"({"gate.weight": {"name": "layers.1.moe.router.gate", "transpose": true}})";
  EXPECT_TRUE(compare(renamed, map).passed());
}

TEST_F(DumpCompare, AnotherPrecisionOrModelIsRefused) {
  EXPECT_THROW(compare(dump_of("cand32", "fp32", false)), ConfigError);
}

// The reference's recorded twin noise is what the rows are held to: 10x its largest value so
// far, where that is above the floor; without it, the floors.
TEST_F(DumpCompare, RowsAreHeldToTenTimesTheReferencesTwinNoise) {
  const fs::path ref = root_dir() / "ref_noisy";
  fs::remove_all(ref);
  fs::copy(dump_of("ref64", "fp64", true), ref, fs::copy_options::recursive);
  nlohmann::json m = nlohmann::json::parse(std::ifstream(ref / "manifest.json"));
  m["steps"][1]["noise"]["grad.attention"] = 5e-9;  // from step 1 on: bound 5e-8 (fp64's ceiling: 1e-8)
  std::ofstream(ref / "manifest.json") << m.dump(2);
  const std::string got = candidate("noisy");
  edit(got, step_file(2), "grads.layers.0.attn.wv", [&](auto& v) { for (double& x : v) x *= 1 + 5e-9; });
  const VerdictReport r = compare(got, "", ref);
  const Row& a = row(r, "grad", "attention");
  EXPECT_EQ(a.verdict, RowVerdict::ok) << format_verdict(r);
  EXPECT_EQ(a.bound_from, "twin");
  EXPECT_DOUBLE_EQ(a.tol, 5e-8);
  EXPECT_EQ(row(compare(got), "grad", "attention").verdict, RowVerdict::fail);  // the floor: 1e-11
  const VerdictReport floors = compare(got, "", dump_of("cand64", "fp64", false));
  EXPECT_NE(floors.layout.find("floors only"), std::string::npos) << floors.layout;
  for (const Row& x : floors.rows) EXPECT_NE(x.bound_from, "twin") << x.quantity << " " << x.subject;
}

// A grad row's floor holds the model's largest gradient scale so far, as `parity run`'s does
// (tolerance.h gradient_magnitude): a model whose every gradient fell 1e8x at step 2 (both dumps
// scaled) holds a change of 1e-8 in attention's there to its step-0 scale; at step 1, without
// the fall, the same change fails.
TEST_F(DumpCompare, AGradRowsFloorHoldsTheModelsLargestGradientScaleSoFar) {
  const fs::path ref = root_dir() / "ref_fallen";
  fs::remove_all(ref);
  fs::copy(dump_of("ref64", "fp64", true), ref, fs::copy_options::recursive);
  const std::string got = candidate("fallen");
  const auto grads = SafetensorsFile::read(ref.string() + "/" + step_file(2)).names();
  for (const std::string& n : grads) {
    if (n.rfind("grads.", 0) != 0) continue;
    for (const std::string& dir : {ref.string(), got})
      edit(dir, step_file(2), n, [](auto& v) { for (double& x : v) x *= 1e-8; });
  }
  edit(got, step_file(2), "grads.layers.0.attn.wv", [](auto& v) { for (double& x : v) x *= 1 + 1e-8; });
  const VerdictReport fallen = compare(got, "", ref);
  EXPECT_EQ(row(fallen, "grad", "attention").verdict, RowVerdict::ok) << format_verdict(fallen);
  const std::string control = candidate("unfallen");
  edit(control, step_file(1), "grads.layers.0.attn.wv", [](auto& v) { for (double& x : v) x *= 1 + 1e-8; });
  const VerdictReport r = compare(control);
  EXPECT_EQ(row(r, "grad", "attention").verdict, RowVerdict::fail) << format_verdict(r);
}

// Any split of the batch is right when each sequence is taken once (issue 46 item 1): the set,
// not the order; a dropped, duplicated or foreign sequence is named by index, and a
// micro-batch holding other sequences than parity's is not compared on its loss part.
TEST(DumpSplit, TheSetIsCheckedNotTheOrder) {
  auto rows = [](std::initializer_list<std::array<int, 3>> r) {
    std::vector<double> v;
    for (const auto& x : r) v.insert(v.end(), {double(x[0]), double(x[1]), double(x[2])});
    return v;
  };
  // B = 5 in 2 micro-batches (parity's: 0..2 | 3..4); W = 2
  const SplitCheck strided = check_split(rows({{0, 0, 0}, {4, 0, 0}, {2, 0, 1}, {1, 1, 0}, {3, 1, 1}}), 5, 2);
  EXPECT_EQ(strided.problem, "");
  EXPECT_EQ(strided.micro_comparable, (std::vector<bool>{false, false}));
  const SplitCheck shuffled = check_split(rows({{2, 1, 0}, {0, 0, 0}, {1, 0, 0}, {4, 1, 1}, {3, 0, 1}}), 5, 2);
  EXPECT_EQ(shuffled.problem, "");
  EXPECT_EQ(shuffled.micro_comparable, (std::vector<bool>{true, true}));
  EXPECT_EQ(check_split(rows({{0, 0, 0}, {1, 0, 0}, {2, 1, 0}, {3, 1, 1}}), 5, 2).problem,
            "sequence missing (no rank took it): 4");
  EXPECT_EQ(check_split(rows({{0, 0, 0}, {1, 0, 0}, {2, 1, 0}, {3, 1, 1}, {4, 0, 1}, {0, 1, 1}}), 5, 2).problem,
            "sequence taken more than once: 0 (2 times: dp rank 0 micro-batch 0, dp rank 1 micro-batch 1)");
  EXPECT_EQ(check_split(rows({{0, 0, 0}, {1, 0, 0}, {2, 1, 0}, {3, 1, 1}, {4, 0, 1}, {7, 1, 1}}), 5, 2).problem,
            "a sequence outside the batch of 5: 7 (dp rank 1 micro-batch 1)");
}

// A noise no rounding can produce (issue 46: forged to 1e300, a doubled gradient passed) is held
// at the ceiling, 1000x the row's floor, at most 0.05 (a genuine twin's noise on a family that is
// all cancellation reached 3.2 in bf16: refusing it refused a correct reference, issue 41).
TEST_F(DumpCompare, ANoiseAboveWhatRoundingCanProduceIsHeldAtTheCeiling) {
  EXPECT_DOUBLE_EQ(noise_ceiling(parse_precision("fp64", "p"), kNoiseGrad), 1e-8);
  EXPECT_DOUBLE_EQ(noise_ceiling(parse_precision("fp32", "p"), kNoiseGrad), 0.05);
  EXPECT_DOUBLE_EQ(noise_ceiling(parse_precision("bf16", "p"), kNoiseLoss), 0.05);
  const fs::path ref = root_dir() / "ref_forged";
  for (const double forged : {1e300, 2e-8}) {
    fs::remove_all(ref);
    fs::copy(dump_of("ref64", "fp64", true), ref, fs::copy_options::recursive);
    nlohmann::json m = nlohmann::json::parse(std::ifstream(ref / "manifest.json"));
    m["steps"][1]["noise"]["grad.router"] = forged;
    std::ofstream(ref / "manifest.json") << m.dump(2);
    const Precision p = parse_precision("fp64", "p");
    const std::vector<double> n = Dump::open(ref.string(), "reference").noise(1, p);
    ASSERT_EQ(n.size(), kNoiseWidth);
    EXPECT_DOUBLE_EQ(n[kNoiseGrad + static_cast<size_t>(Family::router)], noise_ceiling(p, kNoiseGrad)) << forged;
  }
}

// issue 46e item 2: every rank's clip coefficient (the Collector's "clip_coefs"): ranks that
// clipped by different coefficients are named (each by its own norm), agreeing ranks are not,
// and a record that is not numbers or nulls is bad input.
TEST(DumpSplit, RanksThatClipByDifferentCoefficientsAreNamed) {
  using nlohmann::json;
  EXPECT_EQ(clip_by_rank(json(), "w", 0.5, 1e-6), "");
  EXPECT_EQ(clip_by_rank(json::array({0.42, 0.42 * (1 + 1e-9), nullptr}), "w", 0.5, 1e-6), "");
  const std::string s = clip_by_rank(json::array({0.4203, 0.4197, nullptr, 0.4203}), "w", 0.4154, 1e-6);
  EXPECT_EQ(s.rfind("rank 0 clipped by 0.4203, rank 1 by 0.4197, rank 3 by 0.4203 (the reference by 0.4154): the "
                    "ranks clipped by different coefficients, each by its own norm", 0), 0u) << s;
  EXPECT_THROW((void)clip_by_rank(json::array({0.4, "x"}), "w", 0.5, 1e-6), ConfigError);
  EXPECT_THROW((void)clip_by_rank(json::object(), "w", 0.5, 1e-6), ConfigError);
}

}  // namespace
}  // namespace parity::dump_compare_test
