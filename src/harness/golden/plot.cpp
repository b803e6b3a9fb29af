// gnuplot data and script for golden curves; gnuplot runs as a subprocess.
#include "harness/golden/plot.h"

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

#include "core/error.h"
#include "harness/verdict/tolerance.h"

namespace parity {

namespace {

std::string num(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// gnuplot strings in single quotes: a quote is doubled.
std::string q(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// gnuplot enhanced text treats _ ^ @ & as markup.
std::string label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '_' || c == '^' || c == '@' || c == '&' || c == '{' || c == '}') out += "\\";
    out += c;
  }
  return out;
}

// A shell word in single quotes.
std::string sh(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool has_layout(const std::vector<Golden>& gs) {
  for (const Golden& g : gs)
    if (g.layout_curves) return true;
  return false;
}

// Index of the first golden with the same baseline loss curve (draw each baseline once).
size_t first_same_baseline(const std::vector<Golden>& gs, size_t i) {
  for (size_t j = 0; j < i; ++j)
    if (gs[j].baseline.loss == gs[i].baseline.loss) return j;
  return i;
}

// The two panels, for one terminal.
std::string panels(const std::vector<Golden>& gs, const std::string& data, const PlotOptions& o) {
  const bool lower = has_layout(gs);
  std::ostringstream s;
  s << "set multiplot layout " << (lower ? 2 : 1) << ",1 title " << q(label(o.title)) << "\n";
  s << "set lmargin 12\nset rmargin 34\nset key outside right top Left reverse samplen 2 font ',9'\n";
  s << "set grid\nset xlabel 'step'\nset ylabel 'loss (nats/token)'\nunset logscale y\nset format y '%.2f'\n";
  s << "plot ";
  std::vector<double> floors;
  for (size_t i = 0; i < gs.size(); ++i) {
    const std::string color = "lc " + std::to_string(i + 1);
    if (first_same_baseline(gs, i) == i)
      s << q(data) << " index " << i << " using 1:2 with lines dt 2 lw 2 "
        << (gs.size() > 1 ? color : "lc rgb 'gray40'") << " title "
        << q(label("baseline" + (gs.size() > 1 ? " (" + gs[i].scenario + ")" : std::string()))) << ", \\\n     ";
    if (gs[i].layout_curves)
      s << q(data) << " index " << i << " using 1:3 with lines lw 1.5 " << color << " title "
        << q(label(gs[i].scenario)) << ", \\\n     ";
    bool seen = false;
    for (double f : floors) seen = seen || f == gs[i].entropy_floor;
    if (!seen) floors.push_back(gs[i].entropy_floor);
  }
  for (size_t k = 0; k < floors.size(); ++k)
    s << (k ? ", \\\n     " : "") << num(floors[k]) << " with lines lw 2 lc rgb 'black' title "
      << q("entropy floor " + num(floors[k]).substr(0, 6));
  s << "\n";
  if (lower) {
    s << "set logscale y\nset format y '10^{%L}'\nset ylabel '|layout - baseline| loss'\n";
    s << "set label 1 " << q("0 drawn at 1e-18") << " at graph 0.01, graph 0.06 font ',8'\n";
    s << "plot ";
    bool first = true;
    for (size_t i = 0; i < gs.size(); ++i) {
      if (!gs[i].layout_curves) continue;
      if (first)
        s << q(data) << " index " << i << " using 1:5 with lines dt 2 lw 2 lc rgb 'red' title "
          << q(label("verdict's loss bound (" + gs[i].dtype + ")")) << ", \\\n     ";
      s << (first ? "" : ", \\\n     ") << q(data) << " index " << i
        << " using 1:4 with linespoints pt 7 ps 0.5 lw 0.5 lc " << i + 1 << " title " << q(label(gs[i].scenario));
      first = false;
    }
    s << "\nunset label 1\n";
  }
  s << "unset multiplot\n";
  return s.str();
}

}  // namespace

std::string plot_data(const std::vector<Golden>& gs) {
  std::ostringstream s;
  for (size_t i = 0; i < gs.size(); ++i) {
    const Golden& g = gs[i];
    const double bound = tolerance_for(parse_precision(g.dtype, "golden dtype"), Quantity::loss).norm_rel;
    s << (i ? "\n\n" : "") << "# " << g.scenario << " (" << g.layout
      << "): step baseline layout |layout-baseline| bound\n";
    for (size_t t = 0; t < g.baseline.steps(); ++t) {
      s << t << " " << num(g.baseline.loss[t]);
      if (g.layout_curves && t < g.layout_curves->steps()) {
        const double d = std::fabs(g.layout_curves->loss[t] - g.baseline.loss[t]);
        s << " " << num(g.layout_curves->loss[t]) << " " << num(d > 0 ? d : kZeroDrawnAt) << " "
          << num(bound * std::fabs(g.baseline.loss[t]));
      } else {
        s << " ? ? ?";
      }
      s << "\n";
    }
  }
  return s.str();
}

std::string plot_script(const std::vector<Golden>& gs, const PlotOptions& o) {
  const std::string data = o.stem + ".dat";
  std::ostringstream s;
  s << "# parity plot: redraw with `gnuplot " << o.stem << ".gp`\n";
  s << "set datafile missing '?'\nset encoding utf8\n";
  s << "set terminal pngcairo size 1200," << (has_layout(gs) ? 900 : 500) << " font 'sans,10'\n";
  s << "set output " << q(o.stem + ".png") << "\n" << panels(gs, data, o);
  s << "set terminal svg size 1200," << (has_layout(gs) ? 900 : 500) << " font 'sans,10' dynamic\n";
  s << "set output " << q(o.stem + ".svg") << "\n" << panels(gs, data, o);
  s << "set output\n";
  return s.str();
}

std::vector<std::string> plot_curves(const std::vector<Golden>& gs, const PlotOptions& o) {
  if (gs.empty()) throw ConfigError("parity plot", "nothing to plot");
  const std::filesystem::path stem(o.stem);
  if (stem.has_parent_path()) std::filesystem::create_directories(stem.parent_path());
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream f(path);
    f << text;
    if (!f.flush()) throw IoError("cannot write " + path);
  };
  write(o.stem + ".dat", plot_data(gs));
  write(o.stem + ".gp", plot_script(gs, o));
  const std::string err = o.stem + ".gnuplot.log";
  const std::string cmd = sh(o.gnuplot) + " " + sh(o.stem + ".gp") + " > " + sh(err) + " 2>&1";
  const int status = std::system(cmd.c_str());
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::ifstream ef(err);
  std::stringstream msg;
  msg << ef.rdbuf();
  if (rc == 127)
    throw IoError("parity plot: '" + o.gnuplot +
                  "' not found: install gnuplot (Debian package gnuplot-nox, which ci/setup installs)");
  if (rc != 0) throw IoError("parity plot: gnuplot failed (exit " + std::to_string(rc) + "): " + msg.str());
  std::filesystem::remove(err);
  return {o.stem + ".png", o.stem + ".svg"};
}

}  // namespace parity
