// layout.fsdp_dim in scenario files: the three forms, the refusals (each naming its JSON
// path), and the round trip through scenario_to_json.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "mesh/fsdp_dim_json.h"
#include "harness/scenario/scenario.h"
#include "model/params.h"

namespace parity::fsdp_dim_json_test {  // one namespace per file: the tests build as unity batches
namespace {

using nlohmann::json;

const FsdpDimRule kLargest{FsdpDimRule::Kind::largest, 0};
FsdpDimRule dim(int64_t d) { return {FsdpDimRule::Kind::dim, d}; }
const FsdpDimRule& of(const FsdpDimConfig& c, Family f) { return c[static_cast<size_t>(f)]; }

TEST(FsdpDimJson, ThreeForms) {
  const FsdpDimConfig one = parse_fsdp_dim(json(1), "$.layout.fsdp_dim");
  for (const auto& r : one) EXPECT_EQ(r, dim(1));
  const FsdpDimConfig big = parse_fsdp_dim(json("largest"), "$.layout.fsdp_dim");
  for (const auto& r : big) EXPECT_EQ(r, kLargest);
  const FsdpDimConfig per = parse_fsdp_dim(json::parse(R"({"routed_experts": -1, "attention": "largest"})"), "p");
  EXPECT_EQ(of(per, Family::routed_experts), dim(-1));
  EXPECT_EQ(of(per, Family::attention), kLargest);
  EXPECT_EQ(of(per, Family::layernorm), dim(0));  // no "default": 0
  const FsdpDimConfig def = parse_fsdp_dim(json::parse(R"({"default": "largest", "layernorm": 0})"), "p");
  EXPECT_EQ(of(def, Family::head), kLargest);
  EXPECT_EQ(of(def, Family::layernorm), dim(0));
}

void expect_refused(const std::string& text, const std::string& path, const std::string& rule_part) {
  try {
    parse_fsdp_dim(json::parse(text), "$.layout.fsdp_dim");
    ADD_FAILURE() << text << ": no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), path) << text;
    EXPECT_NE(e.rule().find(rule_part), std::string::npos) << e.rule();
  }
}

TEST(FsdpDimJson, RefusalsNameThePath) {
  expect_refused(R"("biggest")", "$.layout.fsdp_dim", "expected a tensor dimension");
  expect_refused(R"(1.5)", "$.layout.fsdp_dim", "got number 1.5");
  expect_refused(R"(true)", "$.layout.fsdp_dim", "got boolean true");
  expect_refused(R"(100)", "$.layout.fsdp_dim", "must be in [-64, 64), got 100");
  expect_refused(R"({"experts": 1})", "$.layout.fsdp_dim.experts", "unknown parameter family; expected one of");
  expect_refused(R"({"routed_experts": [1]})", "$.layout.fsdp_dim.routed_experts", "got array");
  expect_refused(R"({"default": null})", "$.layout.fsdp_dim.default", "got null");
}

TEST(FsdpDimJson, WritesTheShortestForm) {
  EXPECT_FALSE(fsdp_dim_json(FsdpDimConfig{}).has_value());
  FsdpDimConfig c{};
  c.fill(kLargest);
  EXPECT_EQ(*fsdp_dim_json(c), json("largest"));
  EXPECT_EQ(fsdp_dim_str(c), "largest");
  c = FsdpDimConfig{};
  c[static_cast<size_t>(Family::routed_experts)] = dim(-1);
  EXPECT_EQ(*fsdp_dim_json(c), json::parse(R"({"default": 0, "routed_experts": -1})"));
  EXPECT_EQ(fsdp_dim_str(c), "default 0, routed_experts -1");
}

// A scenario file with fsdp_dim reads back to the same scenario; a dimension a family's
// tensors lack is refused with the scenario's path, resume layouts included.
TEST(FsdpDimJson, ScenarioRoundTripAndModelRule) {
  json j = json::parse(R"({"layout": {"world": 4, "dp_shard": 4, "fsdp_dim": {"routed_experts": 2}}})");
  const Scenario s = parse_scenario(j, "s");
  EXPECT_EQ(of(s.layout.fsdp_dim, Family::routed_experts), dim(2));
  EXPECT_EQ(scenario_to_json(s)["layout"]["fsdp_dim"], json::parse(R"({"default": 0, "routed_experts": 2})"));
  EXPECT_EQ(parse_scenario(scenario_to_json(s), "s").layout.fsdp_dim, s.layout.fsdp_dim);
  EXPECT_FALSE(scenario_to_json(parse_scenario(json::parse(R"({"layout": {"world": 1}})"), "t"))["layout"].contains(
      "fsdp_dim"));
  j["layout"]["fsdp_dim"] = 1;
  try {
    parse_scenario(j, "s");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "$.layout.fsdp_dim.layernorm");
  }
  j["layout"]["fsdp_dim"] = {{"routed_experts", 3}};
  try {
    parse_scenario(j, "s");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "$.layout.fsdp_dim.routed_experts");
    EXPECT_NE(e.rule().find("dim 3 is outside [-3, 3)"), std::string::npos) << e.rule();
  }
  json r = json::parse(R"({"steps": 4, "layout": {"world": 1},
      "resume": {"save_at": 2, "layout": {"world": 4, "dp_shard": 4, "fsdp_dim": {"head": -3}}}})");
  try {
    parse_scenario(r, "s");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "$.resume.layout.fsdp_dim.head");
  }
}

}  // namespace
}  // namespace parity::fsdp_dim_json_test
