// Every layout rule as a user meets it through a scenario: the exact JSON path and rule text,
// for the main layout ($.layout.*) and the resume layout ($.resume.layout.*), which must
// follow the same rules (docs/scenario.md). One case per rule; the rules' single
// implementation is validate_layout (plus the scenario's backend rule).
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "harness/scenario/scenario.h"

namespace parity::layout_rules_test {  // one namespace per file: the tests build as unity batches
namespace {

using nlohmann::json;

json tiny() {  // vocab 64, dim 16, heads 2, seq 8, batch 4, microbatches 2, experts 4
  std::ifstream in(std::string(PARITY_SOURCE_DIR) + "/scenarios/tiny.json");
  return json::parse(in);
}

struct Case {
  json layout;        // keys over tiny.json's layout (world 1, every degree 1)
  std::string field;  // the path below "$.layout." / "$.resume.layout."
  std::string rule;   // the whole rule text
  int64_t seq = 8;    // model.seq
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {{{"world", 0}}, "world", "must be >= 1, got 0"},
      {{{"dp_replicate", 0}}, "dp_replicate", "must be >= 1, got 0"},
      {{{"dp_shard", 0}}, "dp_shard", "must be >= 1, got 0"},
      {{{"tp", 0}}, "tp", "must be >= 1, got 0"},
      {{{"ep", 0}}, "ep", "must be >= 1, got 0"},
      {{{"etp", 0}}, "etp", "must be >= 1, got 0"},
      {{{"cp", 0}}, "cp", "must be >= 1, got 0"},
      {{{"world", 2097152}, {"dp_shard", 2097152}}, "world", "must be <= 1048576, got 2097152"},
      {{{"world", 4}, {"dp_shard", 2}}, "world", "must equal dp_replicate*dp_shard*tp (1*2*1), got 4"},
      {{{"world", 2}, {"cp", 2}, {"tp", 2}}, "world", "must equal dp_replicate*dp_shard*cp*tp (1*1*2*2), got 2"},
      {{{"world", 2}, {"dp_shard", 2}, {"ep", 4}},
       "ep",
       "dp_replicate*ep*etp (1*4*1) must divide layout.world (2) so that edp_shard is whole"},
      {{{"world", 6}, {"dp_shard", 6}, {"ep", 3}},
       "ep",
       "must divide model.experts (4) so that each EP rank holds whole experts, got 3"},
      {{{"world", 4}, {"tp", 4}}, "tp", "must divide model.heads (2) so that each TP rank holds whole heads, got 4"},
      // both broken (heads 2 % tp 4, experts 4 % ep 3): the experts' rule is named first
      {{{"world", 12}, {"dp_shard", 3}, {"tp", 4}, {"ep", 3}},
       "ep",
       "must divide model.experts (4) so that each EP rank holds whole experts, got 3"},
      {{{"sp", true}}, "sp", "sequence parallel requires layout.tp > 1"},
      {{{"world", 2}, {"tp", 2}, {"sp", true}},
       "sp",
       "sequence parallel requires layout.tp (2) to divide model.seq (7)",
       7},
      {{{"world", 3}, {"cp", 3}},
       "cp",
       "must divide model.seq (8) so that each CP rank holds an equal chunk of every sequence, got 3"},
      {{{"world", 16}, {"cp", 8}, {"tp", 2}, {"sp", true}},
       "sp",
       "sequence parallel with context parallel requires layout.cp*layout.tp (8*2) to divide model.seq (8)"},
  };
  return all;
}

// Runs `fn`, which must throw ConfigError; returns it as (path, rule).
std::pair<std::string, std::string> refusal(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return {e.path(), e.rule()};
  }
  ADD_FAILURE() << "accepted";
  return {};
}

TEST(LayoutRules, MainLayoutNamesTheFieldAndTheRule) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.layout.dump());
    json j = tiny();
    j["model"]["seq"] = c.seq;
    j["layout"].update(c.layout);
    const auto [path, rule] = refusal([&] { parse_scenario(j, "t"); });
    EXPECT_EQ(path, "$.layout." + c.field);
    EXPECT_EQ(rule, c.rule);
  }
}

TEST(LayoutRules, ResumeLayoutFollowsTheSameRulesUnderItsOwnPath) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.layout.dump());
    json j = tiny();
    j["model"]["seq"] = c.seq;
    j["steps"] = 4;
    json l = j["layout"];
    l.update(c.layout);
    j["resume"] = {{"save_at", 2}, {"layout", l}};
    const auto [path, rule] = refusal([&] { parse_scenario(j, "t"); });
    EXPECT_EQ(path, "$.resume.layout." + c.field);
    EXPECT_EQ(rule, c.rule);
  }
}

// fsdp_dim's rule (mesh::check_fsdp_dim) under both paths.
TEST(LayoutRules, FsdpDimNamesTheFamily) {
  json j = tiny();
  const json bad = {{"world", 4}, {"dp_shard", 4}, {"fsdp_dim", {{"routed_experts", 3}}}};
  j["layout"].update(bad);
  auto [path, rule] = refusal([&] { parse_scenario(j, "t"); });
  EXPECT_EQ(path, "$.layout.fsdp_dim.routed_experts");
  EXPECT_EQ(rule.rfind("dim 3 is outside [-3, 3) for ", 0), 0u) << rule;
  j = tiny();
  j["steps"] = 4;
  json l = j["layout"];
  l.update(bad);
  j["resume"] = {{"save_at", 2}, {"layout", l}};
  std::tie(path, rule) = refusal([&] { parse_scenario(j, "t"); });
  EXPECT_EQ(path, "$.resume.layout.fsdp_dim.routed_experts");
  EXPECT_EQ(rule.rfind("dim 3 is outside [-3, 3) for ", 0), 0u) << rule;
}

}  // namespace
}  // namespace parity::layout_rules_test
