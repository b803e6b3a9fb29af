// `parity plot SCENARIO|GOLDEN...`: one figure (PNG and SVG, drawn by gnuplot) of the golden
// curves of one scenario or a group, a panel per scenario: its layout's loss over its baseline
// with the entropy floor, and |layout - baseline| per step on a log axis (harness/golden/plot.h). Reads the golden
// files; runs nothing. Exit 0 drawn, 1 gnuplot missing or failed, 2 bad input.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/files.h"
#include "harness/golden/golden.h"
#include "harness/golden/plot.h"
#include "harness/scenario/scenario.h"

namespace parity::cli {

namespace {

namespace fs = std::filesystem;

struct PlotCmdOptions {
  std::vector<std::string> inputs;
  std::string out, title, golden_dir;
  PlotOptions plot;
};

// A golden file as given, or the golden of a scenario file. Every file is read through the
// bounded, regular-file-only reader (core/files.h), as `golden check` reads it.
Golden load_input(const std::string& path, const PlotCmdOptions& o) {
  const std::string text =
      read_regular(path, kMaxGoldenBytes, Blame::user_input, "plot input (a golden or scenario file)");
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("format") && j.contains("baseline")) return golden_from_json(j, path);
  const Scenario s = load_scenario(path);
  const fs::path dir = o.golden_dir.empty() ? fs::path(path).parent_path() / ".." / "golden" : fs::path(o.golden_dir);
  const std::string g = (dir.lexically_normal() / (s.name + ".json")).string();
  if (!read_regular_if_exists(g, kMaxGoldenBytes, Blame::user_input, "golden file"))
    throw ConfigError(path, "no golden file " + g + "; make it with: parity golden update " + path);
  return load_golden(g);
}

int run_plot(PlotCmdOptions& o) {
  std::vector<Golden> gs;
  for (const std::string& p : o.inputs) gs.push_back(load_input(p, o));
  o.plot.stem = !o.out.empty() ? o.out : gs.size() == 1 ? "golden/plots/" + gs[0].scenario : "golden/plots/group";
  o.plot.title = !o.title.empty()                                  ? o.title
                 : gs.size() == 1 ? gs[0].scenario + ": " + gs[0].layout
                                  : std::to_string(gs.size()) + " scenarios";
  for (const std::string& f : plot_curves(gs, o.plot)) std::printf("parity plot: wrote %s\n", f.c_str());
  return 0;
}

}  // namespace

Command add_plot_command(CLI::App& app) {
  auto o = std::make_shared<PlotCmdOptions>();
  CLI::App* sub = app.add_subcommand(
      "plot",
      "Draw golden curves with gnuplot (PNG and SVG), a panel per scenario: its layout's loss over the\n"
      "baseline and the entropy floor, and |layout - baseline| per step on a log axis; one colour per\n"
      "layout, one legend above the panels. Inputs: scenario files (their golden is read from\n"
      "../golden) or golden files; several make one figure, a grid of panels.");
  sub->add_option("inputs", o->inputs, "Scenario or golden JSON files")->required();
  sub->add_option("-o,--out", o->out,
                  "Output path without extension (default golden/plots/NAME or golden/plots/group)");
  sub->add_option("--title", o->title, "Figure title");
  sub->add_option("--golden-dir", o->golden_dir, "Golden files' directory (default: ../golden next to the scenario)");
  sub->add_option("--gnuplot", o->plot.gnuplot, "The gnuplot program")->capture_default_str();
  sub->add_flag("--force", o->plot.force,
                "Replace regular files at OUT.{dat,gp,png,svg} even when parity did not write them");
  return {sub, [o]() { return run_plot(*o); }};
}

}  // namespace parity::cli
