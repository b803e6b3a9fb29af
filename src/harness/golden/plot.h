// Pictures of golden curves (issue 9), drawn by gnuplot (Debian package gnuplot-nox): on top
// the loss of each layout over its baseline and the data's entropy floor as a line; below,
// |layout - baseline| per step on a log axis (an exact 0 is drawn at kZeroDrawnAt). One
// figure per call, for one scenario or a group, written as STEM.png and STEM.svg next to the
// data (STEM.dat) and the script (STEM.gp) that made them, so a figure can be redrawn by hand.
#pragma once
#include <string>
#include <vector>

#include "harness/golden/golden.h"

namespace parity {

inline constexpr double kZeroDrawnAt = 1e-18;

struct PlotOptions {
  std::string stem;               // output path without extension: golden/plots/fsdp
  std::string title;              // figure title
  std::string gnuplot = "gnuplot";  // the program to run
};

// The data file and the script (pure: no files, no processes), for tests and for plot_curves.
std::string plot_data(const std::vector<Golden>& goldens);
std::string plot_script(const std::vector<Golden>& goldens, const PlotOptions& o);

// Writes STEM.dat, STEM.gp and runs gnuplot to draw STEM.png and STEM.svg; returns the
// paths of the two figures. Throws IoError when gnuplot is missing (saying which package
// to install) or fails (with its message), ConfigError when `goldens` is empty.
std::vector<std::string> plot_curves(const std::vector<Golden>& goldens, const PlotOptions& o);

}  // namespace parity
