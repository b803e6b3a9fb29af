// gnuplot data and script for golden curves; gnuplot runs as a subprocess.
#include "harness/golden/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

#include "core/error.h"
#include "core/output.h"
#include "core/philox.h"
#include "harness/verdict/tolerance.h"

namespace parity {

namespace {

std::string gp_num(double x) {
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

// Distinguishable on white, none of them the black, gray and red of the floor, baseline and bound.
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#0e9aa7",
                                    "#a0a01e", "#393b79", "#637939", "#8c6d31", "#7b4173", "#b8860b", "#1b9e77"};

// The layout's words without its degrees of 1: "world 4 = dp_shard 2 x tp 2, etp 2, sp".
std::string short_layout(const std::string& full) {
  const size_t eq = full.find(" = ");
  if (eq == std::string::npos) return full;
  std::string out, rest = full.substr(eq + 3);
  std::string sep;
  while (!rest.empty()) {
    const size_t x = rest.find(" x "), c = rest.find(", ");
    const size_t cut = std::min(x, c);
    const std::string word = rest.substr(0, cut);
    const bool one =
        word.size() > 2 && word.compare(word.size() - 2, 2, " 1") == 0 && word.find(' ') == word.size() - 2;
    if (!one) out += (out.empty() ? "" : sep) + word;
    if (cut == std::string::npos) break;
    sep = rest.substr(cut, cut == x ? 3 : 2);
    rest = rest.substr(cut + sep.size());
  }
  return full.substr(0, eq) + (out.empty() ? ": one device" : " = " + out);
}

// `text` in lines of at most `width` characters where it can, broken after `sep`; at most
// `most` lines (the last takes the rest).
std::vector<std::string> wrap(const std::string& text, const std::string& sep, size_t width, size_t most) {
  std::vector<std::string> lines{""};
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(sep, at);
    end = end == std::string::npos ? text.size() : end + sep.size();
    const std::string piece = text.substr(at, end - at);
    if (!lines.back().empty() && lines.back().size() + piece.size() > width && lines.size() < most)
      lines.emplace_back();
    lines.back() += piece;
    at = end;
  }
  return lines;
}

// |layout - baseline| loss at step t (0 when bitwise equal: a log axis cannot draw it, so it is
// marked apart) and the verdict's loss bound there: the measured one the golden stores (its
// rounding twin's noise, Golden::loss_bound), else the bound's floor (a golden made before the
// twin was stored; the legend says which).
double loss_error(const Golden& g, size_t t) { return std::fabs(g.layout_curves->loss[t] - g.baseline.loss[t]); }
double loss_bound(const Golden& g, size_t t) {
  const double rel = t < g.loss_bound.size()
                         ? g.loss_bound[t]
                         : noise_floor(parse_precision(g.dtype, "golden dtype"), Quantity::loss);
  return rel * std::fabs(g.baseline.loss[t]);
}
size_t layout_steps(const Golden& g) { return std::min(g.baseline.steps(), g.layout_curves->steps()); }
// The resumed phase's loss at step t (NaN before it resumed, or without one) and its error.
double resumed_loss(const Golden& g, size_t t) {
  if (!g.resumed || static_cast<int64_t>(t) < g.resumed->start_step) return NAN;
  const size_t i = t - static_cast<size_t>(g.resumed->start_step);
  return i < g.resumed->steps() ? g.resumed->loss[i] : NAN;
}
double resumed_error(const Golden& g, size_t t) { return std::fabs(resumed_loss(g, t) - g.baseline.loss[t]); }

// The error panel's y range in whole decades (of the non-zero errors and the bound) and a tic
// every `step` decades (at most 5 tics); exact zeros are marked on its lower edge.
struct Decades {
  int lo = -18, hi = -12, step = 2;
  explicit Decades(const Golden& g) {
    double a = 1, b = 0;
    for (size_t t = 0; t < layout_steps(g); ++t)
      for (double v : {loss_error(g, t), loss_bound(g, t), resumed_error(g, t)})
        if (v > 0) a = std::min(a, v), b = std::max(b, v);
    if (b <= 0) return;
    lo = static_cast<int>(std::floor(std::log10(a)));
    hi = std::max(lo + 1, static_cast<int>(std::ceil(std::log10(b))));
    step = (hi - lo + 3) / 4;
  }
};

// The loss panel's y range: the baseline's and the layout's losses with a margin (the band that
// shows a difference), the entropy floor too when it is near; else it is named, not drawn.
struct LossRange {
  double lo = 0, hi = 1;
  bool floor_below = false;
  explicit LossRange(const Golden& g) {
    double a = INFINITY, b = -INFINITY;
    auto take = [&](const std::vector<double>& xs) {
      for (double x : xs)
        if (std::isfinite(x)) a = std::min(a, x), b = std::max(b, x);
    };
    take(g.baseline.loss);
    if (g.layout_curves) take(g.layout_curves->loss);
    if (g.resumed) take(g.resumed->loss);
    if (!(a <= b)) return;  // nothing finite: gnuplot's default range
    const double pad = std::max(0.08 * (b - a), 0.02 * std::max(std::fabs(b), 1e-12));
    lo = a - pad, hi = b + pad;
    if (g.entropy_floor >= lo - 3 * pad) lo = std::min(lo, g.entropy_floor - pad);  // near: drawn
    floor_below = g.entropy_floor < lo;
  }
};

// A panel's title: the scenario's name (broken after '_' when long) and its layout's short words.
struct Title {
  std::vector<std::string> name, layout, resumed;  // resumed: "then from step K: <its layout>"
};

// The figure's geometry in pixels: a header (title, shared legend) over a grid of cells, one per
// golden, each its title, the loss panel and below it the |layout - baseline| panel.
struct Grid {
  size_t n, cols, rows;
  int cell_w, cell_h, header_h = 104, title_h = 0, width, height;
  std::vector<Title> titles;
  explicit Grid(const std::vector<Golden>& gs) : n(gs.size()) {
    for (const Golden& g : gs)  // the legend's 7th entry (a resumed phase) needs a row more
      if (g.resumed) header_h = 124;
    cols = static_cast<size_t>(std::ceil(std::sqrt(static_cast<double>(n))));
    rows = (n + cols - 1) / cols;
    cell_w = std::max(330, 1000 / static_cast<int>(cols));
    size_t name_lines = 1, layout_lines = 1;
    for (const Golden& g : gs) {  // characters of about 9 (bold, 10 pt) and 5.6 pixels (8 pt)
      const size_t chars = static_cast<size_t>((cell_w - 16) / 5.6);
      titles.push_back({wrap(g.scenario, "_", static_cast<size_t>((cell_w - 16) / 9), 3),
                        wrap(short_layout(g.layout), ", ", chars, 3), {}});
      if (g.resumed)
        titles.back().resumed = wrap("then from step " + std::to_string(g.resume_step) + ": " +
                                         short_layout(g.resume_layout), ", ", chars, 3);
      name_lines = std::max(name_lines, titles.back().name.size());
      layout_lines = std::max(layout_lines, titles.back().layout.size() + titles.back().resumed.size());
    }
    title_h = 16 + 14 * static_cast<int>(name_lines) + 12 * static_cast<int>(layout_lines);
    cell_h = title_h + std::max(262, cell_w * 7 / 10 - 28);
    width = cell_w * static_cast<int>(cols);
    height = header_h + cell_h * static_cast<int>(rows) + 8;
  }
  std::string x(double px) const { return gp_num(px / width).substr(0, 8); }
  std::string y(double px_from_top) const { return gp_num(1.0 - px_from_top / height).substr(0, 8); }
  // Plot area of a panel, in screen coordinates; top and bottom in pixels from the figure's top.
  std::string margins(double left, double right, double top, double bottom) const {
    return "set lmargin at screen " + x(left) + "; set rmargin at screen " + x(right) + "; set tmargin at screen " +
           y(top) + "; set bmargin at screen " + y(bottom) + "\n";
  }
};

// One cell: golden i's loss over its baseline and floor, then its error against the bound.
void cell(std::ostringstream& s, const Grid& g, const Golden& gd, size_t i, const std::string& data) {
  const double left = static_cast<double>(i % g.cols) * g.cell_w + 58, right = left - 58 + g.cell_w - 14;
  const double top = g.header_h + static_cast<double>(i / g.cols) * g.cell_h, panel_top = top + g.title_h;
  const double bottom = top + g.cell_h - 34;  // world 1 has no error panel: its loss takes the cell
  const double split = gd.layout_curves ? panel_top + (bottom - panel_top) * 0.56 : bottom;
  const std::string color = "lc rgb '" + layout_color(gd.layout) + "'", mid = g.x(left - 58 + g.cell_w / 2.0);
  s << "# panel " << i + 1 << " of " << g.n << ": " << gd.scenario << " (" << gd.layout << ")\n";
  double at = top + 4;
  int tag = 1;
  for (const std::string& line : g.titles[i].name)
    s << "set label " << tag++ << " " << q("{/:Bold " + label(line) + "}") << " at screen " << mid << ", "
      << g.y(at += 14) << " center font ',10'\n";
  at += 1;
  for (const std::string& line : g.titles[i].layout)
    s << "set label " << tag++ << " " << q(label(line)) << " at screen " << mid << ", " << g.y(at += 12)
      << " center font ',8' tc " << color.substr(3) << "\n";
  const std::string color2 = gd.resumed ? "lc rgb '" + layout_color(gd.resume_layout) + "'" : color;
  for (const std::string& line : g.titles[i].resumed)
    s << "set label " << tag++ << " " << q(label(line)) << " at screen " << mid << ", " << g.y(at += 12)
      << " center font ',8' tc " << color2.substr(3) << "\n";
  const std::string K = gd.resumed ? std::to_string(gd.resume_step) : "";
  if (gd.resumed)  // the step the second layout resumed at, in both panels
    s << "set arrow 1 from " << K << ", graph 0 to " << K << ", graph 1 nohead dt 3 lw 1.2 lc rgb 'gray30'\n";
  if (gd.perf) {  // what the golden run cost, beside its loss
    const auto& p = *gd.perf;
    const double peak = p.peak_rss_mib.empty() ? 0 : *std::max_element(p.peak_rss_mib.begin(), p.peak_rss_mib.end());
    char buf[160];
    std::snprintf(buf, sizeof buf, "wall %.1f s, cpu %.1f + %.1f s, peak %.0f MiB (largest of %zu)", p.wall_s,
                  p.cpu_s, p.ranks_cpu_s, peak, p.peak_rss_mib.size());
    s << "set label " << tag++ << " " << q(buf) << " at graph 0.98, graph 0.92 right font ',7' tc rgb '#505050'\n";
  }
  const LossRange r(gd);
  s << g.margins(left, right, panel_top, split) << "unset logscale y\nset format y '%.1f'\nset autoscale x\n";
  s << "set yrange [" << gp_num(r.lo) << ":" << gp_num(r.hi) << "]\nset ytics autofreq\nset ylabel 'loss' font ',8' "
    << "offset 1.5,0\nset format x " << (gd.layout_curves ? "''" : "'%g'") << "\n";
  if (!gd.layout_curves) s << "set xlabel 'step' font ',8' offset 0,0.6\n";
  if (r.floor_below)  // the curves' band is the picture; the floor is named where it would be
    s << "set label " << tag++ << " " << q("entropy floor " + gp_num(gd.entropy_floor).substr(0, 5) + " (below)")
      << " at graph 0.02, graph 0.06 font ',7'\n";
  s << "plot " << gp_num(gd.entropy_floor) << " with lines lw 1.5 lc rgb 'black' notitle";
  if (gd.layout_curves)
    s << ", \\\n     " << q(data) << " index " << i << " using 1:" << (gd.resumed ? "($1 < " + K + " ? $3 : NaN)" : "3")
      << " with lines lw 2.5 " << color << " notitle";
  if (gd.resumed)
    s << ", \\\n     " << q(data) << " index " << i << " using 1:7 with lines lw 2.5 " << color2 << " notitle";
  s << ", \\\n     " << q(data) << " index " << i << " using 1:2 with lines dt 2 lw 1.5 lc rgb 'gray15' notitle\n";
  s << "unset label\nunset xlabel\n";
  if (!gd.layout_curves) {
    s << "unset ylabel\nunset arrow\n";
    return;
  }
  const Decades d(gd);
  s << g.margins(left, right, split + 12, bottom) << "set logscale y\nset format y '10^{%L}'\nset format x '%g'\n";
  s << "set yrange [1e" << d.lo << ":1e" << d.hi << "]\nset ytics 1e" << d.step << "\n";
  s << "set ylabel '|{/Symbol D} loss|' font ',8' offset 1.5,0\nset xlabel 'step' font ',8' offset 0,0.6\n";
  // the first layout's error up to the resume (a resumed golden), the second's from it
  const std::string err = gd.resumed ? "($1 < " + K + " ? $4 : NaN)" : "4";
  const std::string zero = gd.resumed ? "($1 < " + K + " ? $6 : NaN)" : "$6";
  s << "plot " << q(data) << " index " << i << " using 1:5 with lines dt 2 lw 1.5 lc rgb 'red' notitle, \\\n     "
    << q(data) << " index " << i << " using 1:" << err << " with linespoints pt 7 ps 0.35 lw 1 " << color
    << " notitle, \\\n     " << q(data) << " index " << i << " using 1:((" << zero << ") * 1.5e" << d.lo
    << ") with points pt 9 ps 0.6 " << color << " notitle";
  if (gd.resumed)
    s << ", \\\n     " << q(data) << " index " << i << " using 1:8 with linespoints pt 7 ps 0.35 lw 1 " << color2
      << " notitle, \\\n     " << q(data) << " index " << i << " using 1:(($9) * 1.5e" << d.lo
      << ") with points pt 9 ps 0.6 " << color2 << " notitle";
  s << "\nunset ylabel\nunset xlabel\nunset arrow\n";
}

// The bound line's legend: measured where every golden stores its twin's noise, else which is which.
std::string bound_words(const std::vector<Golden>& gs, const std::string& dtypes) {
  size_t measured = 0;
  for (const Golden& g : gs) measured += g.loss_bound.empty() ? 0 : 1;
  if (measured == gs.size()) return "loss bound (10x the twin's noise, or its floor), " + dtypes;
  if (measured == 0) return "loss bound's floor, " + dtypes + " (the measured one may be higher)";
  return "loss bound (measured, or its floor: no twin stored), " + dtypes;
}

// The figure for one terminal: every cell with its key off, then the one shared legend in the
// header strip, which holds no data.
std::string panels(const std::vector<Golden>& gs, const std::string& data, const PlotOptions& o, const Grid& g) {
  std::ostringstream s;
  s << "# small multiples: " << gs.size() << " panels, " << g.cols << " columns x " << g.rows << " rows\n";
  // One scenario: its panel's title names it, so the figure has no title of its own.
  if (gs.size() > 1)
    s << "set multiplot title " << q(label(o.title)) << " font ',12'\n";
  else
    s << "set multiplot\n";
  s << "unset key\nset grid\nunset xlabel\nunset ylabel\nset tics font ',8'\nset xtics 10\nset offsets 0, 0, graph "
       "0.06, graph 0.06\n";
  for (size_t i = 0; i < gs.size(); ++i) cell(s, g, gs[i], i, data);
  std::string dtypes;
  for (const Golden& gd : gs)
    if (dtypes.find(gd.dtype) == std::string::npos) dtypes += (dtypes.empty() ? "" : ", ") + gd.dtype;
  s << "# shared legend\nunset label\nunset grid\nunset border\nunset tics\nunset logscale y\n";
  s << g.margins(0, g.width, 30, g.header_h - 4) << "set xrange [0:1]\nset yrange [0:1]\n";
  const int cols = std::max(1, g.width / 360);  // the longest entry's width, its sample included
  const bool resumed = std::any_of(gs.begin(), gs.end(), [](const Golden& gd) { return gd.resumed.has_value(); });
  const int entries = resumed ? 7 : 6;  // at most 4 rows fit the strip
  s << "set key at screen 0.5, " << g.y((30 + g.header_h - 4) / 2.0) << " center center horizontal maxrows "
    << (entries + cols - 1) / cols << " samplen 3 font ',9'\n";
  // The layout's marks are drawn in a neutral grey here: in the panels each takes the colour of
  // its layout (the panel's coloured subtitle), so no one colour here could label them all.
  s << "plot NaN with lines lw 2.5 lc rgb 'gray40' title 'layout''s loss (in its layout''s colour, as the "
       "subtitle)', \\\n"
    << "     NaN with lines dt 2 lw 1.2 lc rgb 'gray15' title 'baseline (one device)', \\\n"
    << "     NaN with lines lw 1.5 lc rgb 'black' title 'entropy floor', \\\n"
    << "     NaN with linespoints pt 7 ps 0.35 lc rgb 'gray40' title '|layout - baseline| loss, log axis', \\\n"
    << "     NaN with points pt 9 ps 0.6 lc rgb 'gray40' title 'exactly 0 (bitwise equal), on the axis', \\\n"
    << "     NaN with lines dt 2 lw 1.5 lc rgb 'red' title " << q(bound_words(gs, dtypes));
  if (resumed)
    s << ", \\\n     NaN with lines dt 3 lw 1.2 lc rgb 'gray30' title "
         "'resumed: the 2nd layout (2nd subtitle) from its checkpoint'";
  s << "\n";
  s << "unset key\nset border\nset tics\nunset multiplot\n";
  return s.str();
}

}  // namespace

std::string layout_color(const std::string& layout) {
  const uint64_t h = name_hash(layout);
  return kPalette[(h ^ (h >> 32)) % std::size(kPalette)];
}

std::string plot_data(const std::vector<Golden>& gs) {
  std::ostringstream s;
  for (size_t i = 0; i < gs.size(); ++i) {
    const Golden& g = gs[i];
    s << (i ? "\n\n" : "") << "# " << g.scenario << " (" << g.layout
      << "): step baseline layout |layout-baseline| bound exact_zero resumed |resumed-baseline| resumed_zero\n";
    for (size_t t = 0; t < g.baseline.steps(); ++t) {
      s << t << " " << gp_num(g.baseline.loss[t]);
      if (g.layout_curves && t < layout_steps(g)) {
        const double e = loss_error(g, t);  // an exact 0: NaN in its column (a gap), 1 in the zero column
        s << " " << gp_num(g.layout_curves->loss[t]) << " " << (e > 0 ? gp_num(e) : "NaN") << " "
          << gp_num(loss_bound(g, t)) << " " << (e > 0 ? "NaN" : "1");
        const double rl = resumed_loss(g, t), re = resumed_error(g, t);
        if (std::isfinite(rl))
          s << " " << gp_num(rl) << " " << (re > 0 ? gp_num(re) : "NaN") << " " << (re > 0 ? "NaN" : "1");
        else
          s << " ? ? ?";
      } else {
        s << " ? ? ? ? ? ? ?";
      }
      s << "\n";
    }
  }
  return s.str();
}

std::string plot_script(const std::vector<Golden>& gs, const PlotOptions& o) {
  const std::string data = o.stem + ".dat";
  const Grid g(gs);
  const std::string size = " size " + std::to_string(g.width) + "," + std::to_string(g.height);
  std::ostringstream s;
  s << "# parity plot: redraw with `gnuplot " << o.stem << ".gp`\n";
  s << "set datafile missing '?'\nset encoding utf8\n";
  s << "set terminal pngcairo" << size << " font 'sans,9'\n";
  s << "set output " << q(o.stem + ".png") << "\n" << panels(gs, data, o, g);
  s << "set terminal svg" << size << " font 'sans,9' dynamic\n";
  s << "set output " << q(o.stem + ".svg") << "\n" << panels(gs, data, o, g);
  s << "set output\n";
  return s.str();
}

std::vector<std::string> plot_curves(const std::vector<Golden>& gs, const PlotOptions& o) {
  namespace fs = std::filesystem;
  if (gs.empty()) throw ConfigError("parity plot", "nothing to plot");
  const fs::path stem(o.stem);
  if (std::error_code ec; stem.has_parent_path() && (fs::create_directories(stem.parent_path(), ec), ec))
    throw ConfigError("--out", stem.parent_path().string() + ": cannot be made a directory: " + ec.message());
  // What stands at the four outputs is replaced only when it is parity's (core/output.h): the
  // script and data by their signatures, the images when the script beside them is parity's.
  const std::string dat = o.stem + ".dat", gp = o.stem + ".gp", png = o.stem + ".png", svg = o.stem + ".svg";
  const Replace script{"# parity plot:", o.force}, data{"): step baseline layout", o.force};
  const bool own = !fs::is_symlink(gp) && fs::exists(gp) && replace_problem(gp, script).empty();
  const Replace image{own ? "" : "\x01(an image parity drew has its .gp beside it)", o.force};
  for (const auto& [path, r] : {std::pair{dat, data}, {gp, script}, {png, image}, {svg, image}})
    check_replaceable("--out", path, r);
  // gnuplot writes into a private directory beside the outputs; its files are renamed into place.
  std::string tmpl = (stem.has_parent_path() ? stem.parent_path() / ".parity-plot-XXXXXX"
                                              : fs::path(".parity-plot-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw IoError(tmpl + ": cannot create a temporary directory for gnuplot: " + std::strerror(errno));
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{tmpl};
  PlotOptions private_o = o;
  private_o.stem = tmpl + "/plot";
  write_file_atomically(private_o.stem + ".dat", plot_data(gs), {}, "plot data");
  write_file_atomically(private_o.stem + ".gp", plot_script(gs, private_o), {}, "plot script");
  const std::string err = private_o.stem + ".gnuplot.log";
  const std::string cmd = sh(o.gnuplot) + " " + sh(private_o.stem + ".gp") + " > " + sh(err) + " 2>&1";
  const int status = std::system(cmd.c_str());
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::ifstream ef(err);
  std::stringstream msg;
  msg << ef.rdbuf();
  if (rc == 127)
    throw IoError("parity plot: '" + o.gnuplot +
                  "' not found: install gnuplot (Debian package gnuplot-nox, which ci/setup installs)");
  if (rc != 0) throw IoError("parity plot: gnuplot failed (exit " + std::to_string(rc) + "): " + msg.str());
  write_file_atomically(dat, plot_data(gs), data, "plot data", "--out");
  write_file_atomically(gp, plot_script(gs, o), script, "plot script", "--out");
  install_file(private_o.stem + ".png", png, image, "--out");
  install_file(private_o.stem + ".svg", svg, image, "--out");
  return {png, svg};
}

}  // namespace parity
