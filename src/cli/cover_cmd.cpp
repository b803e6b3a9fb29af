// `parity cover [PATH...] [--write DIR]`: pairwise coverage of a scenario set (docs/coverage.md).
// Reads every scenario file (a directory: its *.json, top level only; default scenarios/),
// prints which (option value, folding mode) pairs it covers and names every missing one,
// then proposes the scenarios (greedy covering array, harness/scenario/cover_gen.h) that would cover
// them; --write DIR writes those as DIR/NAME.json. Exit 0 when the set covers every possible
// pair, 1 when a pair is missing (with or without --write), 2 for bad input.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/output.h"
#include "harness/scenario/cover_gen.h"
#include "harness/scenario/coverage.h"
#include "harness/scenario/scenario.h"

namespace parity::cli {
namespace {

namespace fs = std::filesystem;

struct CoverOptions {
  std::vector<std::string> paths{"scenarios"};
  std::string write;  // directory for the proposed scenarios
};

std::string layout_text(const LayoutConfig& l) {
  std::string out = "world " + std::to_string(l.world) + ":";
  for (coverage::Mode m : coverage::modes_of(l)) out += " " + std::string(coverage::mode_name(m));
  return out;
}

void write_proposals(const coverage::Proposals& p, const std::string& dir) {
  fs::create_directories(dir);
  for (const coverage::Proposal& x : p.scenarios) {
    const fs::path file = fs::path(dir) / (x.scenario.name + ".json");
    const Replace new_only{.signature = {}, .force = false, .create_only = true};
    if (!replace_problem(file.string(), new_only).empty())  // a dangling link too
      throw ConfigError(file.string(), "exists: cover --write never overwrites a scenario");
    write_file_atomically(file.string(), coverage::scenario_file_text(x.scenario), new_only, "scenario file",
                          "--write");
    std::printf("written: %s\n", file.string().c_str());
  }
}

int run_cover(const CoverOptions& o) {
  std::vector<Scenario> set;
  for (const std::string& f : scenario_files(o.paths)) set.push_back(load_scenario(f));
  const coverage::CoverageReport report = coverage::check_coverage(set);
  std::printf("parity cover: %zu scenario files\n\n%s", set.size(), coverage::format_coverage(report).c_str());
  const size_t n_missing = report.missing.size() + report.option_missing.size();
  if (n_missing == 0) {
    std::printf("cover verdict: PASS: every possible pair is covered\n");
    return 0;
  }
  const coverage::Proposals p = coverage::propose(set);
  std::printf("\nproposal: %zu scenarios cover the %zu missing pairs (no fewer than %zu can):\n", p.scenarios.size(),
              n_missing, p.lower_bound);
  for (const coverage::Proposal& x : p.scenarios) {
    std::string layouts = layout_text(x.scenario.layout);
    if (x.scenario.resume) layouts += " -> " + layout_text(x.scenario.resume->layout);
    std::printf("  %s (%s), %zu new pairs:\n   ", x.scenario.name.c_str(), layouts.c_str(),
                x.covers.size() + x.option_covers.size());
    for (const coverage::Pair& q : x.covers) std::printf(" %s;", coverage::pair_name(q).c_str());
    for (const coverage::OptionPair& q : x.option_covers) std::printf(" %s;", coverage::option_pair_name(q).c_str());
    std::printf("\n");
  }
  for (const coverage::Pair& q : p.left) std::printf("  no candidate covers: %s\n", coverage::pair_name(q).c_str());
  for (const coverage::OptionPair& q : p.option_left)
    std::printf("  no candidate covers: %s\n", coverage::option_pair_name(q).c_str());
  if (!o.write.empty()) write_proposals(p, o.write);
  std::printf("cover verdict: FAIL: %zu pairs missing%s\n", n_missing,
              o.write.empty() ? " (parity cover --write scenarios writes the proposal)" : "");
  return 1;
}

}  // namespace

Command add_cover_command(CLI::App& app) {
  auto o = std::make_shared<CoverOptions>();
  CLI::App* sub = app.add_subcommand(
      "cover",
      "Pairwise coverage of scenario files: which (option value, folding mode) and (option value,\n"
      "option value) pairs they cover, every missing pair, and the fewest scenarios found (greedy)\n"
      "that add the missing ones. Exit 0 every possible pair covered, 1 a pair missing, 2 bad input");
  sub->add_option("paths", o->paths, "Scenario files or directories of them (top level only; default: scenarios)");
  sub->add_option("--write", o->write, "Write the proposed scenarios as DIR/NAME.json (never overwrites)");
  return {sub, [o]() { return run_cover(*o); }};
}

}  // namespace parity::cli
