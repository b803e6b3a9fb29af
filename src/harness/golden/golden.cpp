// Golden files: the scenario hash, the stable text format, reading back, the compare.
#include "harness/golden/golden.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/output.h"
#include "core/text.h"
#include "harness/scenario/scenario.h"
#include "harness/verdict/tolerance.h"

namespace parity {

namespace {

constexpr const char* kFormat = "parity-golden-1";

std::string fmt_double(double x) {
  if (!std::isfinite(x)) throw Error("golden: a non-finite value (" + std::to_string(x) + ") cannot be pinned");
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

std::string quote(const std::string& s) { return nlohmann::json(s).dump(); }

std::string tpe_name(int64_t layer) { return "tokens_per_expert.layer" + std::to_string(layer); }

// One metric in Megatron's shape; `value(t)` formats step t's value.
template <class F> std::string metric_text(size_t steps, const std::string& ind, F value, int64_t start = 0) {
  std::string s = "{\n";
  s += ind + "  \"end_step\": " + std::to_string(start + static_cast<int64_t>(steps) - 1) + ",\n";
  s += ind + "  \"start_step\": " + std::to_string(start) + ",\n" + ind + "  \"step_interval\": 1,\n";
  s += ind + "  \"values\": {";
  for (size_t t = 0; t < steps; ++t)
    s += std::string(t ? "," : "") + "\n" + ind + "    \"" + std::to_string(start + static_cast<int64_t>(t)) +
         "\": " + value(t);
  s += steps ? "\n" + ind + "  }\n" : "}\n";
  return s + ind + "}";
}

std::string counts_text(const std::vector<int64_t>& c) {
  std::string s = "[";
  for (size_t e = 0; e < c.size(); ++e) s += (e ? ", " : "") + std::to_string(c[e]);
  return s + "]";
}

std::string curves_text(const Curves& c, const std::string& ind) {
  std::map<std::string, std::string> m;  // sorted metric names
  auto scalars = [&](const std::vector<double>& v) {
    return metric_text(c.steps(), ind + "  ", [&](size_t t) { return fmt_double(v[t]); }, c.start_step);
  };
  m["loss"] = scalars(c.loss);
  m["grad_norm"] = scalars(c.grad_norm);
  m["aux_loss"] = scalars(c.aux_loss);
  for (size_t l = 0; l < c.moe_layers.size(); ++l)
    m[tpe_name(c.moe_layers[l])] =
        metric_text(c.steps(), ind + "  ", [&](size_t t) { return counts_text(c.tokens_per_expert[l][t]); },
                    c.start_step);
  std::string s = "{";
  bool first = true;
  for (const auto& [k, v] : m)
    s += std::string(first ? "" : ",") + "\n" + ind + "  " + quote(k) + ": " + v, first = false;
  return s + "\n" + ind + "}";
}

// j's value as a T, or ConfigError naming the JSON path (`where`) and what it holds instead.
template <class T> T value_as(const nlohmann::json& j, const std::string& where) {
  try {
    return j.get<T>();
  } catch (const nlohmann::json::exception&) {
    const char* want = std::is_same_v<T, double>    ? "a number"
                       : std::is_integral_v<T>      ? "an integer"
                       : std::is_same_v<T, std::string> ? "a string"
                                                        : "an array of integers";
    throw ConfigError(where, std::string("expected ") + want + ", got " + j.type_name() + " " +
                                 printable(j.dump(), 40));
  }
}

// Reads one metric object: start_step 0 (or `*first`, which takes any start >= 0 and returns
// it), step_interval 1, values for every step to end_step.
template <class T>
std::vector<T> read_metric(const nlohmann::json& j, const std::string& where, int64_t* first = nullptr) {
  if (!j.is_object() || !j.contains("values") || !j.contains("start_step") || !j.contains("end_step"))
    throw ConfigError(where, "expected {start_step, end_step, step_interval, values}");
  const int64_t start = value_as<int64_t>(j.at("start_step"), where + ".start_step");
  const int64_t end = value_as<int64_t>(j.at("end_step"), where + ".end_step");
  const int64_t interval =
      j.contains("step_interval") ? value_as<int64_t>(j.at("step_interval"), where + ".step_interval") : 1;
  if ((first == nullptr ? start != 0 : start < 0 || start > (int64_t{1} << 40)) || interval != 1)
    throw ConfigError(where, first == nullptr ? "golden curves start at step 0 with step_interval 1"
                                              : "a resumed phase's curves start at a step >= 0, step_interval 1");
  if (first != nullptr) *first = start;
  const nlohmann::json& vals = j.at("values");
  if (end < start - 1 || end - start > (int64_t{1} << 40))
    throw ConfigError(where, "end_step " + std::to_string(end) + " before start_step " + std::to_string(start));
  if (!vals.is_object() || static_cast<int64_t>(vals.size()) != end - start + 1)
    throw ConfigError(where + ".values", "expected one value per step " + std::to_string(start) + ".." +
                                             std::to_string(end) + ", got " + std::to_string(vals.size()));
  std::vector<T> out;
  for (int64_t t = start; t <= end; ++t) {
    const std::string k = std::to_string(t);
    if (!vals.contains(k)) throw ConfigError(where + ".values", "step " + k + " is missing");
    out.push_back(value_as<T>(vals.at(k), where + ".values." + k));
  }
  return out;
}

std::string str_field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j.at(key).is_string()) throw ConfigError(where + ": $." + key, "expected a string");
  return j.at(key).get<std::string>();
}

void compare_scalars(const std::string& run, const std::string& metric, const std::vector<double>& want,
                     const std::vector<double>& got, double tol, GoldenCheck& out, int64_t start) {
  for (size_t t = 0; t < want.size() && t < got.size(); ++t) {
    const double d = std::fabs(got[t] - want[t]);
    const double rel = want[t] != 0 ? d / std::fabs(want[t]) : (d == 0 ? 0 : INFINITY);
    out.compared += 1;
    out.max_rel = std::max(out.max_rel, rel);
    if (!(d <= tol * std::fabs(want[t])))
      out.diffs.push_back(
          {run, metric, start + static_cast<int64_t>(t), fmt_double(got[t]), fmt_double(want[t]), rel, tol});
  }
}

void compare_curves(const std::string& run, const Curves& want, const Curves& got, double tol, GoldenCheck& out) {
  if (want.steps() != got.steps())
    out.structural.push_back(run + ": golden has " + std::to_string(want.steps()) + " steps, this run " +
                             std::to_string(got.steps()));
  compare_scalars(run, "loss", want.loss, got.loss, tol, out, want.start_step);
  compare_scalars(run, "grad_norm", want.grad_norm, got.grad_norm, tol, out, want.start_step);
  compare_scalars(run, "aux_loss", want.aux_loss, got.aux_loss, tol, out, want.start_step);
  if (want.moe_layers != got.moe_layers) {
    out.structural.push_back(run + ": the MoE layers differ from the golden's");
    return;
  }
  for (size_t l = 0; l < want.moe_layers.size(); ++l)
    for (size_t t = 0; t < want.steps() && t < got.steps(); ++t, ++out.compared)
      if (want.tokens_per_expert[l][t] != got.tokens_per_expert[l][t])
        out.diffs.push_back({run, tpe_name(want.moe_layers[l]), want.start_step + static_cast<int64_t>(t),
                             counts_text(got.tokens_per_expert[l][t]), counts_text(want.tokens_per_expert[l][t]), 1,
                             0});
}

// Perf numbers: measurements, not pinned values; four digits are plenty.
std::string fmt_perf(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.4g", std::isfinite(x) && x > 0 ? x : 0.0);
  return buf;
}

std::string perf_text(const Perf& p) {
  std::string rss;
  for (size_t i = 0; i < p.peak_rss_mib.size(); ++i) rss += (i ? ", " : "") + fmt_perf(p.peak_rss_mib[i]);
  return "{\n    \"cpu_s\": " + fmt_perf(p.cpu_s) + ",\n    \"machine\": " + quote(p.machine) +
         ",\n    \"peak_rss_mib\": [" + rss + "],\n    \"ranks_cpu_s\": " + fmt_perf(p.ranks_cpu_s) +
         ",\n    \"wall_s\": " + fmt_perf(p.wall_s) + "\n  }";
}

double perf_number(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw ConfigError(where + "." + key, "missing");
  const double x = value_as<double>(j.at(key), where + "." + key);
  if (!std::isfinite(x) || x < 0) throw ConfigError(where + "." + key, "expected a finite number >= 0");
  return x;
}

Perf perf_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw ConfigError(where, "expected {cpu_s, machine, peak_rss_mib, ranks_cpu_s, wall_s}");
  Perf p;
  p.cpu_s = perf_number(j, "cpu_s", where);
  p.ranks_cpu_s = perf_number(j, "ranks_cpu_s", where);
  p.wall_s = perf_number(j, "wall_s", where);
  p.machine = str_field(j, "machine", where);
  const nlohmann::json& rss = j.value("peak_rss_mib", nlohmann::json());
  if (!rss.is_array() || rss.empty() || rss.size() > 4096)
    throw ConfigError(where + ".peak_rss_mib", "expected an array of 1 to 4096 numbers (the command, then each rank)");
  for (size_t i = 0; i < rss.size(); ++i) {
    const double x = value_as<double>(rss[i], where + ".peak_rss_mib[" + std::to_string(i) + "]");
    if (!std::isfinite(x) || x < 0)
      throw ConfigError(where + ".peak_rss_mib[" + std::to_string(i) + "]", "expected a finite number >= 0");
    p.peak_rss_mib.push_back(x);
  }
  return p;
}

std::string one_decimal(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.1f", x);
  return buf;
}
std::string two_decimals(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  return buf;
}

}  // namespace

std::string scenario_hash(const Scenario& s) {
  Scenario c = s;
  c.source.clear();
  const std::string text = scenario_to_json(c).dump();
  uint64_t h = 14695981039346656037ull;  // FNV-1a, 64 bit
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}


std::string golden_to_text(const Golden& g) {
  std::map<std::string, std::string> top;  // sorted keys, values already formatted
  top["backend"] = quote(g.backend);
  top["baseline"] = curves_text(g.baseline, "  ");
  top["commit"] = quote(g.commit);
  top["dtype"] = quote(g.dtype);
  top["entropy_floor"] = fmt_double(g.entropy_floor);
  top["format"] = quote(kFormat);
  top["layout"] = g.layout_curves ? curves_text(*g.layout_curves, "  ") : "null";
  top["layout_shape"] = quote(g.layout);
  if (!g.loss_bound.empty())
    top["loss_bound"] =
        metric_text(g.loss_bound.size(), "  ", [&](size_t t) { return fmt_double(g.loss_bound[t]); });
  if (g.perf) top["perf"] = perf_text(*g.perf);
  if (g.resumed)
    top["resume"] = "{\n    \"curves\": " + curves_text(*g.resumed, "    ") + ",\n    \"layout_shape\": " +
                    quote(g.resume_layout) + ",\n    \"save_at\": " + std::to_string(g.resume_step) + "\n  }";
  top["scenario"] = quote(g.scenario);
  top["scenario_hash"] = quote(g.scenario_hash);
  top["steps"] = std::to_string(g.baseline.steps());
  top["world"] = std::to_string(g.world);
  std::string s = "{";
  bool first = true;
  for (const auto& [k, v] : top) s += std::string(first ? "" : ",") + "\n  " + quote(k) + ": " + v, first = false;
  return s + "\n}\n";
}

nlohmann::json curves_to_json(const Curves& c) { return nlohmann::json::parse(curves_text(c, "")); }

Curves curves_from_json(const nlohmann::json& j, const std::string& where, bool any_start) {
  if (!j.is_object()) throw ConfigError(where, "expected an object of metrics");
  Curves c;
  int64_t s0 = 0, s1 = 0, s2 = 0;
  int64_t* first[3] = {any_start ? &s0 : nullptr, any_start ? &s1 : nullptr, any_start ? &s2 : nullptr};
  c.loss = read_metric<double>(j.value("loss", nlohmann::json()), where + ".loss", first[0]);
  c.grad_norm = read_metric<double>(j.value("grad_norm", nlohmann::json()), where + ".grad_norm", first[1]);
  c.aux_loss = read_metric<double>(j.value("aux_loss", nlohmann::json()), where + ".aux_loss", first[2]);
  if (s1 != s0 || s2 != s0) throw ConfigError(where, "every metric must cover the same steps");
  c.start_step = s0;
  const std::string prefix = "tokens_per_expert.layer";
  for (const auto& [k, v] : j.items()) {
    if (k == "loss" || k == "grad_norm" || k == "aux_loss") continue;
    if (k.rfind(prefix, 0) != 0) throw ConfigError(where + "." + k, "unknown metric");
    const std::string n = k.substr(prefix.size());
    if (n.empty() || n.size() > 6 || n.find_first_not_of("0123456789") != std::string::npos)
      throw ConfigError(where + "." + printable(k, 64), "unknown metric (tokens_per_expert.layerN, N a layer)");
    c.moe_layers.push_back(std::stoll(n));
  }
  std::sort(c.moe_layers.begin(), c.moe_layers.end());
  for (int64_t layer : c.moe_layers) {
    int64_t s3 = 0;
    c.tokens_per_expert.push_back(
        read_metric<std::vector<int64_t>>(j.at(tpe_name(layer)), where + "." + tpe_name(layer),
                                          any_start ? &s3 : nullptr));
    if (s3 != s0) throw ConfigError(where, "every metric must cover the same steps");
  }
  if (c.grad_norm.size() != c.steps() || c.aux_loss.size() != c.steps())
    throw ConfigError(where, "every metric must cover the same steps");
  for (const auto& l : c.tokens_per_expert)
    if (l.size() != c.steps()) throw ConfigError(where, "every metric must cover the same steps");
  return c;
}

Golden golden_from_json(const nlohmann::json& j, const std::string& where) {
  try {
    if (!j.is_object() || j.value("format", std::string()) != kFormat)
      throw ConfigError(where + ": $.format", std::string("expected \"") + kFormat + "\"");
    Golden g;
    g.scenario = str_field(j, "scenario", where);
    g.scenario_hash = str_field(j, "scenario_hash", where);
    g.dtype = str_field(j, "dtype", where);
    (void)parse_precision(g.dtype, where + ": $.dtype");  // fp64, fp32, bf16, bf16-reduce-bf16, fp16, fp8, fp8-delayed
    g.commit = str_field(j, "commit", where);
    g.backend = str_field(j, "backend", where);
    g.layout = str_field(j, "layout_shape", where);
    g.world = value_as<int64_t>(j.at("world"), where + ": $.world");
    g.entropy_floor = value_as<double>(j.at("entropy_floor"), where + ": $.entropy_floor");
    g.baseline = curves_from_json(j.at("baseline"), where + ": $.baseline");
    if (!j.at("layout").is_null()) g.layout_curves = curves_from_json(j.at("layout"), where + ": $.layout");
    if (j.contains("loss_bound")) {
      g.loss_bound = read_metric<double>(j.at("loss_bound"), where + ": $.loss_bound");
      if (g.loss_bound.size() != g.baseline.steps())
        throw ConfigError(where + ": $.loss_bound", "expected one bound per step of the baseline");
    }
    if (j.contains("perf")) g.perf = perf_from_json(j.at("perf"), where + ": $.perf");
    if (j.contains("resume")) {
      const nlohmann::json& r = j.at("resume");
      if (!r.is_object() || !r.contains("curves") || !r.contains("save_at"))
        throw ConfigError(where + ": $.resume", "expected {curves, layout_shape, save_at}");
      g.resume_layout = str_field(r, "layout_shape", where + ": $.resume");
      g.resume_step = value_as<int64_t>(r.at("save_at"), where + ": $.resume.save_at");
      g.resumed = curves_from_json(r.at("curves"), where + ": $.resume.curves", true);
      if (g.resume_step < 0 || g.resumed->start_step != g.resume_step)
        throw ConfigError(where + ": $.resume", "the resumed curves start at save_at (" +
                                                    std::to_string(g.resume_step) + ")");
    }
    return g;
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(where, std::string("not a golden file: ") + e.what());
  }
}

Golden load_golden(const std::string& path) {
  // A FIFO or a device where the golden should be: refused, never a blocking read.
  const auto text = read_regular_if_exists(path, kMaxGoldenBytes, Blame::user_input, "golden file");
  if (!text) throw IoError(path + ": no golden file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path, std::string("invalid JSON: ") + e.what());
  }
  return golden_from_json(j, path);
}

void save_golden(const std::string& path, const Golden& g) {
  const std::string text = golden_to_text(g);
  const std::filesystem::path p(path);
  if (std::error_code ec; p.has_parent_path() && (std::filesystem::create_directories(p.parent_path(), ec), ec))
    throw ConfigError("golden update", p.parent_path().string() + ": cannot be made a directory: " + ec.message());
  write_file_atomically(path, text, Replace{kGoldenSignature}, "golden file", "golden update");
}

GoldenCheck compare_golden(const Golden& want, const Golden& got) {
  GoldenCheck out;
  if (want.dtype != got.dtype) out.structural.push_back("dtype: golden " + want.dtype + ", this run " + got.dtype);
  const double tol = tolerance_for(parse_precision(got.dtype, "golden dtype"), Quantity::golden_curve).norm_rel;
  compare_curves("baseline", want.baseline, got.baseline, tol, out);
  if (want.layout_curves.has_value() != got.layout_curves.has_value())
    out.structural.push_back(std::string("layout: ") + (want.layout_curves ? "golden has" : "golden has no") +
                             " layout curves, this run " + (got.layout_curves ? "has" : "has none"));
  else if (want.layout_curves)
    compare_curves("layout", *want.layout_curves, *got.layout_curves, tol, out);
  if (want.resumed && got.resumed) {
    if (want.resume_step != got.resume_step)
      out.structural.push_back("resume: golden resumes at step " + std::to_string(want.resume_step) + ", this run at " +
                               std::to_string(got.resume_step));
    else
      compare_curves("resumed", *want.resumed, *got.resumed, tol, out);
  } else if (want.resumed) {
    out.structural.push_back("resume: golden has the resumed phase's curves, this run none");
  }  // a golden made before the resumed phase was pinned: not compared (the check says so)
  return out;
}

PerfCheck compare_perf(const std::optional<Perf>& want, const Perf& got, bool enabled, const PerfBand& band) {
  using State = PerfCheck::State;
  if (!enabled) return {State::off, "perf not checked (--no-perf)", {}};
  if (!want)
    return {State::not_pinned, "perf not pinned (this golden records no time or memory; `golden update` pins them)",
            {}};
  if (want->machine != got.machine)
    return {State::other_machine,
            "perf not checked: pinned on another machine (" + want->machine + "; this is " + got.machine + ")", {}};
  PerfCheck c{State::pass, "", {}};
  auto cpu = [&](const char* what, double got_s, double want_s, double factor, double slack) {
    const double limit = factor * want_s + slack;
    if (!(got_s <= limit))
      c.fails.push_back(std::string(what) + " " + two_decimals(got_s) + " s > " + two_decimals(limit) + " s (" +
                        fmt_perf(factor) + " x the pinned " + two_decimals(want_s) + " s + " + fmt_perf(slack) +
                        " s)");
  };
  cpu("cpu time of the command (the baseline)", got.cpu_s, want->cpu_s, band.cpu_factor, band.cpu_slack_s);
  cpu("cpu time of the ranks' computing", got.ranks_cpu_s, want->ranks_cpu_s, band.ranks_factor, band.ranks_slack_s);
  double worst = 0, worst_want = 0;
  for (size_t i = 0; i < want->peak_rss_mib.size() && i < got.peak_rss_mib.size(); ++i) {
    const double w = want->peak_rss_mib[i], g = got.peak_rss_mib[i];
    worst = std::max(worst, g), worst_want = std::max(worst_want, w);  // the largest process's
    const double limit = band.rss_factor * w + band.rss_slack_mib;
    if (!(g <= limit))
      c.fails.push_back("peak memory of " + (i == 0 ? std::string("the command") : "rank " + std::to_string(i - 1)) +
                        " " + one_decimal(g) + " MiB > " + one_decimal(limit) + " MiB (" + fmt_perf(band.rss_factor) +
                        " x the pinned " + one_decimal(w) + " MiB + " + fmt_perf(band.rss_slack_mib) + " MiB)");
  }
  if (want->peak_rss_mib.size() != got.peak_rss_mib.size())
    c.fails.push_back("peak memory: the golden pins " + std::to_string(want->peak_rss_mib.size()) +
                      " processes, this run has " + std::to_string(got.peak_rss_mib.size()));
  c.state = c.fails.empty() ? State::pass : State::fail;
  c.summary = std::string("perf ") + (c.fails.empty() ? "PASS" : "FAIL") + " (cpu " + two_decimals(got.cpu_s) +
              " s + ranks " + two_decimals(got.ranks_cpu_s) + " s, pinned " + two_decimals(want->cpu_s) + " + " +
              two_decimals(want->ranks_cpu_s) + "; largest peak memory " + one_decimal(worst) +
              " MiB, pinned " + one_decimal(worst_want) + "; wall " + one_decimal(got.wall_s) + " s, pinned " +
              one_decimal(want->wall_s) + ")";
  return c;
}

PerfShare perf_share(const std::optional<Perf>& want, const Perf& got, const PerfCheck& c) {
  using State = PerfCheck::State;
  if (!want || (c.state != State::pass && c.state != State::fail)) return {};
  return {true, got.cpu_s, got.ranks_cpu_s, want->cpu_s, want->ranks_cpu_s};
}

std::string perf_share_json(const PerfShare& s) {
  return nlohmann::json{{"compared", s.compared},
                        {"cpu_s", s.cpu_s},
                        {"ranks_cpu_s", s.ranks_cpu_s},
                        {"pinned_cpu_s", s.pinned_cpu_s},
                        {"pinned_ranks_cpu_s", s.pinned_ranks_cpu_s}}
      .dump();
}

PerfShare parse_perf_share(const std::string& text, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("compared") || !j.at("compared").is_boolean())
    throw ConfigError(where, "expected {compared, cpu_s, ranks_cpu_s, pinned_cpu_s, pinned_ranks_cpu_s}");
  PerfShare s;
  s.compared = j.at("compared").get<bool>();
  s.cpu_s = perf_number(j, "cpu_s", where);
  s.ranks_cpu_s = perf_number(j, "ranks_cpu_s", where);
  s.pinned_cpu_s = perf_number(j, "pinned_cpu_s", where);
  s.pinned_ranks_cpu_s = perf_number(j, "pinned_ranks_cpu_s", where);
  return s;
}

SuitePerf suite_perf(const std::vector<PerfShare>& shares, size_t scenarios, const PerfBand& band) {
  double got = 0, want = 0;
  size_t n = 0;
  for (const PerfShare& s : shares)
    if (s.compared) got += s.cpu_s + s.ranks_cpu_s, want += s.pinned_cpu_s + s.pinned_ranks_cpu_s, ++n;
  SuitePerf out;
  if (n == 0) return out;  // nothing compared on this machine: no total to judge
  out.compared = true;
  const double limit = band.suite_factor * want + band.suite_slack_s;
  out.failed = !(got <= limit);
  out.line = "perf total " + std::string(out.failed ? "FAIL" : "PASS") + ": cpu " + two_decimals(got) +
             " s (the baselines and the ranks' computing) over " + std::to_string(n) + " of " +
             std::to_string(scenarios) + " scenarios compared on this machine, pinned " + two_decimals(want) +
             " s; limit " + two_decimals(limit) + " s (" + fmt_perf(band.suite_factor) + " x pinned + " +
             fmt_perf(band.suite_slack_s) + " s)";
  return out;
}

}  // namespace parity
