// Pictures of golden curves (issue 9), drawn by gnuplot (Debian package gnuplot-nox): small
// multiples, one panel per golden in a grid sized to the count, each titled with the scenario and
// its layout: on top the layout's loss over its baseline and the data's entropy floor; below,
// |layout - baseline| per step on a log axis (an exact 0, bitwise equal, marked on the axis's
// lower edge, not drawn as a value) under the verdict's loss bound. The loss axis is fitted to the
// curves (the entropy floor is drawn when near, else named); axes labelled. No key inside a
// panel: one shared legend above the grid. A layout's colour is layout_color, the same in
// every figure. One figure per call, for one scenario or a group, written as STEM.png and
// STEM.svg next to the data (STEM.dat) and the script (STEM.gp) that made them, so a figure can
// be redrawn by hand.
#pragma once
#include <string>
#include <vector>

#include "harness/golden/golden.h"

namespace parity {

struct PlotOptions {
  std::string stem;               // output path without extension: golden/plots/fsdp
  std::string title;              // figure title
  std::string gnuplot = "gnuplot";  // the program to run
  bool force = false;             // replace regular files at the outputs that parity did not write
};

// The colour of a layout's curves: its words (Golden::layout) hashed into a fixed palette of 14
// distinguishable colours, so a layout has the same colour in every figure; two layouts may
// share one (a panel holds one layout, and its title names it).
std::string layout_color(const std::string& layout);

// The data file and the script (pure: no files, no processes), for tests and for plot_curves.
std::string plot_data(const std::vector<Golden>& goldens);
std::string plot_script(const std::vector<Golden>& goldens, const PlotOptions& o);

// Writes STEM.dat, STEM.gp and runs gnuplot (in a private directory beside them) to draw
// STEM.png and STEM.svg, each put in place through core/output.h: what stands there is
// replaced only when it is parity's (or o.force), never a link, FIFO or device. Returns the
// paths of the two figures. Throws IoError when gnuplot is missing (saying which package
// to install) or fails (with its message), ConfigError when `goldens` is empty.
std::vector<std::string> plot_curves(const std::vector<Golden>& goldens, const PlotOptions& o);

}  // namespace parity
