// The verdict's table (what rank 0 prints) and its JSON (--report FILE): the same rows.
#include <cmath>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/verdict/compare.h"
#include "harness/verdict/verdict.h"
#include "harness/verdict/verdict_detail.h"

#include <algorithm>
#include <span>

namespace parity {

using verdict_detail::fmt;

namespace {

std::string scale_str(double s) { return std::isnan(s) ? "-" : fmt("%.6f", s); }

std::string worst_str(const WorstElement& w) {
  if (w.name.empty()) return "-";
  std::string s = w.name + (w.index.empty() ? "" : index_str(w.index)) + " rank " + std::to_string(w.rank);
  return s + " (got " + fmt("%.6g", w.got) + ", ref " + fmt("%.6g", w.ref) + ", |err| " + fmt("%.2e", w.abs_err) +
         ")";
}

std::string row_line(const Row& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-8s %-17s %-17s %10.3e %8.1e %-5s %9s %4lld %4lld %8s  %s",
                std::string(row_verdict_name(r.verdict)).c_str(), r.quantity.c_str(),
                r.subject.empty() ? "-" : r.subject.c_str(), r.norm_rel, r.tol,
                r.bound_from.empty() ? "-" : r.bound_from.c_str(), scale_str(r.scale_ratio).c_str(),
                static_cast<long long>(r.step), static_cast<long long>(r.bad_steps),
                r.compared < 0 ? "-" : std::to_string(r.compared).c_str(), worst_str(r.worst).c_str());
  std::string s = buf;
  if (!r.detail.empty()) s += "\n         " + r.detail;
  return s + "\n";
}

// The rows whose bound reached kLooseBound at some step: a scale of 1.5 would pass there.
std::string loose_line(const std::vector<Row>& rows) {
  std::string names;
  for (const Row& r : rows)
    if (r.loosest >= kLooseBound && r.quantity != "routing")
      names += (names.empty() ? "" : ", ") + r.quantity + (r.subject.empty() ? "" : " " + r.subject) + " " +
               verdict_detail::fmt("%.2g", r.loosest) + " at step " + std::to_string(r.loosest_step);
  if (names.empty()) return "";
  return "loose rows (a bound of " + verdict_detail::fmt("%.2g", kLooseBound) +
         " or more: a scale of 1.5 passes their normwise check there): " + names + "\n";
}

std::string timings_str(const char* who, const Timings& t) {
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "%-13s start-up %.3f s, rendezvous %.3f s, setup %.3f s, baseline %.3f s, layout %.3f s (compute "
                "%.3f s + communication %.3f s in %.0f collectives), compare %.3f s (+ %.3f s reductions)\n",
                who, t.startup, t.rendezvous, t.setup, t.baseline, t.parallel, t.parallel - t.layout_comm,
                t.layout_comm, t.layout_comm_calls, t.compare, t.compare_comm);
  return buf;
}

// Non-finite numbers as strings ("nan", "inf"): JSON has no literal for them.
nlohmann::json json_number(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(fmt("%g", x)); }

nlohmann::json worst_json(const WorstElement& w) {
  return {{"name", w.name},
          {"index", w.index},
          {"rank", w.rank},
          {"got", json_number(w.got)},
          {"ref", json_number(w.ref)},
          {"abs_err", json_number(w.abs_err)}};
}

nlohmann::json timings_json(const Timings& t) {
  return {{"startup_s", t.startup},   {"rendezvous_s", t.rendezvous}, {"setup_s", t.setup},
          {"baseline_s", t.baseline}, {"parallel_s", t.parallel},     {"parallel_comm_s", t.layout_comm},
          {"parallel_collectives", t.layout_comm_calls}, {"compare_s", t.compare}, {"compare_comm_s", t.compare_comm}};
}

}  // namespace

// The run's descriptions and rank 0's / the slowest rank's timings (verdict_detail.h).
namespace verdict_detail {


std::string optim_desc(const OptimConfig& o) {
  char lr[32];
  std::snprintf(lr, sizeof lr, "%g", o.lr);
  return std::string(optim_name(o.kind)) + " lr " + lr;
}

std::string fault_desc(const std::optional<Fault>& f) {
  if (!f) return "";
  static const char* const kWhat[] = {"scale_grad:", "scale_param:", "scale_loss:", "scale_grad_norm:",
                                      "scale_rounded_grad:"};
  const bool scalar = f->target == Fault::Target::loss || f->target == Fault::Target::grad_norm;
  return std::string(kWhat[static_cast<int>(f->target)]) + (scalar ? "all" : std::string(family_name(f->family))) +
         ":" + std::to_string(f->factor) +
         (f->rank >= 0 ? " on rank " + std::to_string(f->rank) : "");
}


}  // namespace verdict_detail

std::string format_verdict(const VerdictReport& r) {
  std::string out = "parity " + r.command + " " + r.scenario + ": " + r.precision + ", " + r.backend + ", " + r.layout +
                    (r.mode.empty() ? "" : ", " + r.mode) + ", " + std::to_string(r.steps) + " steps, " + r.optim +
                    "\n";
  if (!r.fault.empty()) out += "injected (PARITY_FAULT / --inject): " + r.fault + "\n";
  if (!r.checkpoint.empty()) out += "checkpoint: " + r.checkpoint + "\n";
  if (!r.remeasured.empty())
    out += (r.remeasured.rfind("not measured", 0) == 0 ? "" : "measured again: ") + r.remeasured + "\n";
  if (!r.twin.empty()) out += "twin: " + r.twin + "\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%5s %16s %11s %10s %13s %10s %9s %9s\n", "step", "loss", "loss - ref", "micro rel",
                "grad_norm rel", "clip_coef", "routing", "near-tie");
  out += buf;
  for (const StepLine& s : r.step_lines) {
    std::snprintf(buf, sizeof buf, "%5lld %16.10f %+11.2e %10.2e %13.2e %10.6f %9lld %9lld\n",
                  static_cast<long long>(s.step), s.loss, s.loss_diff, s.micro_rel, s.grad_norm_rel, s.clip_coef,
                  static_cast<long long>(s.route_diff), static_cast<long long>(s.near_ties));
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "%-8s %-17s %-17s %10s %8s %-5s %9s %4s %4s %8s  %s\n", "verdict", "quantity",
                "subject", "norm_rel", "bound", "from", "scale", "step", "bad", "compared", "worst element");
  out += buf;
  int fail = 0, tie = 0;
  for (const Row& row : r.rows) {
    out += row_line(row);
    fail += row.verdict == RowVerdict::fail, tie += row.verdict == RowVerdict::near_tie;
  }
  out += root_line(r, find_root(r));
  for (const std::string& line : r.trace_lines) out += line + "\n";  // the traced step (trace_verdict.h)
  out += loose_line(r.rows);
  if (r.command == "run") out += timings_str("time rank 0:", r.rank0) + timings_str("slowest rank:", r.slowest);
  if (!r.compared())
    out += "verdict: nothing compared: the run starts at step " + std::to_string(r.first_step) +
           ", its last (steps = " + std::to_string(r.steps) + "); no row holds a compared value\n";
  else if (fail > 0)
    out += "verdict: FAIL: " + std::to_string(fail) + " of " + std::to_string(r.rows.size()) +
           " rows out of tolerance" + (tie ? ", " + std::to_string(tie) + " near-tie" : std::string()) + "\n";
  else
    out += "verdict: PASS: " + std::to_string(r.rows.size()) + " rows within tolerance" +
           (tie ? " (" + std::to_string(tie) + " near-tie routing decisions, shown above)" : std::string()) + "\n";
  return out;
}

nlohmann::json verdict_json(const VerdictReport& r) {
  nlohmann::json steps = nlohmann::json::array(), rows = nlohmann::json::array();
  for (const StepLine& s : r.step_lines)
    steps.push_back({{"step", s.step},
                     {"loss", json_number(s.loss)},
                     {"loss_ref", json_number(s.loss_ref)},
                     {"loss_diff", json_number(s.loss_diff)},
                     {"micro_rel", json_number(s.micro_rel)},
                     {"grad_norm_rel", json_number(s.grad_norm_rel)},
                     {"clip_coef", json_number(s.clip_coef)},
                     {"clip_ref", json_number(s.clip_ref)},
                     {"routing_diff", s.route_diff},
                     {"near_ties_followed", s.near_ties}});
  for (const Row& row : r.rows)
    rows.push_back({{"verdict", row_verdict_name(row.verdict)},
                    {"quantity", row.quantity},
                    {"subject", row.subject},
                    {"norm_rel", json_number(row.norm_rel)},
                    {"tol", row.tol},
                    {"bound_from", row.bound_from},
                    {"floor", row.floor},
                    {"twin", json_number(row.twin)},
                    {"far", row.far},
                    {"far_bound", row.far_bound},
                    {"taken", row.taken},
                    {"taken_bound", row.taken_bound},
                    {"explained", row.explained},
                    {"reduction", row.reduction},
                    {"loosest", row.loosest},
                    {"scale_ratio", json_number(row.scale_ratio)},
                    {"step", row.step},
                    {"bad_steps", row.bad_steps},
                    {"compared", row.compared},
                    {"worst", worst_json(row.worst)},
                    {"detail", row.detail}});
  nlohmann::json out{{"scenario", r.scenario},
          {"dtype", r.dtype},
          {"precision", r.precision},
          {"backend", r.backend},
          {"layout", r.layout},
          {"world", r.world},
          {"steps", r.steps},
          {"first_step", r.first_step},
          {"compared_steps", r.steps - r.first_step},
          {"checkpoint", r.checkpoint},
          {"optim", r.optim},
          {"verdict_mode", r.mode},
          {"fault", r.fault},
          {"remeasured", r.remeasured},
          {"twin", r.twin},
          {"passed", r.passed()},
          {"root", root_json(r, find_root(r))},
          {"step_table", steps},
          {"rows", rows},
          {"command", r.command},
          {"time_rank0", timings_json(r.rank0)},
          {"time_slowest", timings_json(r.slowest)}};
  if (!r.trace_lines.empty())  // the traced step (trace_verdict.h): only where one ran
    out["trace"] = {{"first_diverging", r.trace_root}, {"lines", r.trace_lines}, {"placements", r.trace_placements}};
  return out;
}

}  // namespace parity
