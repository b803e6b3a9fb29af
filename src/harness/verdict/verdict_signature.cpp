// The classic signatures of a framework's data-parallel bugs (verdict_signature.h).
#include "harness/verdict/verdict_signature.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "harness/verdict/verdict.h"

namespace parity {

namespace {

bool close_to(double x, double c, double rel) { return std::fabs(x - c) <= rel * std::fabs(c); }

std::string g4(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", x);
  return b;
}

// "5, 4 of 9" (each dp rank's sequences of the batch)
std::string split_words(const LayoutDegrees& d) {
  std::string s;
  for (size_t r = 0; r < d.rank_sequences.size(); ++r) s += (r ? ", " : "") + std::to_string(d.rank_sequences[r]);
  return s + " of " + std::to_string(d.batch);
}

bool uneven(const LayoutDegrees& d) {
  return d.rank_sequences.size() > 1 &&
         std::adjacent_find(d.rank_sequences.begin(), d.rank_sequences.end(), std::not_equal_to<>()) !=
             d.rank_sequences.end();
}

// The grad rows failing first at `step`, with a finite scale; empty when any grad row does
// not (a uniform pattern needs every family).
std::vector<const Row*> every_grad_at(const VerdictReport& r, int64_t step) {
  std::vector<const Row*> out;
  for (const Row& row : r.rows) {
    if (row.quantity != "grad") continue;
    if (row.verdict != RowVerdict::fail || row.step != step || !std::isfinite(row.scale_ratio)) return {};
    out.push_back(&row);
  }
  return out;
}

std::string own_mean(const VerdictReport& r, const RootCause& root, const Row& rr) {
  const LayoutDegrees& d = r.degrees;
  if (rr.quantity != "loss" || root.step < 0 || static_cast<size_t>(root.step) >= d.own_mean_ratio.size() ||
      !uneven(d))
    return "";
  const double k = d.own_mean_ratio[static_cast<size_t>(root.step)];
  const double rel = std::max(1e-9, 100 * rr.tol);
  const int64_t ranks = static_cast<int64_t>(d.rank_sequences.size());
  const int64_t micro = d.of(LayoutDegrees::kMicrobatches);
  for (const int64_t pieces : {ranks * micro, ranks, micro, int64_t{1}}) {
    if (!std::isfinite(k) || !close_to(k, 1.0 / static_cast<double>(pieces), rel)) continue;
    return "each rank's loss part is the mean over its own sequences (divided by its count, not by the global "
           "batch): the parts weighted by each rank's sequences give the reference's loss / " +
           std::to_string(pieces) + " (the pieces: dp x micro-batches), right only when every rank holds as many; "
           "here the dp ranks hold " + split_words(d) + " sequences";
  }
  return "";
}

std::string clip_before_sync(const VerdictReport& r, const RootCause& root, const Row& rr) {
  if (rr.quantity != "grad") return "";
  const auto line = std::find_if(r.step_lines.begin(), r.step_lines.end(),
                                 [&](const StepLine& s) { return s.step == root.step; });
  if (line == r.step_lines.end() || !(line->clip_ref < 1 - 1e-9) || !close_to(line->clip_coef, 1.0, 1e-9)) return "";
  const std::vector<const Row*> g = every_grad_at(r, root.step);
  if (g.empty()) return "";
  double lo = g[0]->scale_ratio, hi = lo;
  for (const Row* x : g) lo = std::min(lo, x->scale_ratio), hi = std::max(hi, x->scale_ratio);
  if (!(lo > 0 && hi < 1 && hi <= 1.25 * lo)) return "";
  return "every gradient family shrunk by " + g4(lo) + " .. " + g4(hi) + " while the candidate's clip_coef is 1 " +
         "and the reference clips by " + g4(line->clip_ref) +
         ": the gradients clipped before the sync, each rank by its own norm (clip after the all-reduce)";
}

std::string averaged_twice(const VerdictReport& r, const RootCause& root, const Row& rr) {
  const LayoutDegrees& d = r.degrees;
  const int64_t dp = d.of("dp");
  if (rr.quantity != "grad" || dp < 2) return "";
  const std::vector<const Row*> g = every_grad_at(r, root.step);
  const double w = 1.0 / static_cast<double>(dp);
  if (g.empty() || !std::all_of(g.begin(), g.end(), [&](const Row* x) { return close_to(x->scale_ratio, w, 2e-3); }))
    return "";
  const std::string named = factor_meaning(rr.scale_ratio, d);  // "1/4 (= 1/dp) or ...: averaged where ..."
  return named.substr(0, named.find(':')) + ": every gradient family at this scale: the gradients averaged over " +
         "the dp ranks twice (DDP already averages; a second division by the world size)";
}

std::string rank_share(const VerdictReport& r, const Row& rr) {
  const LayoutDegrees& d = r.degrees;
  if (!uneven(d) || !std::isfinite(rr.scale_ratio)) return "";
  for (size_t k = 0; k < d.rank_sequences.size(); ++k) {
    const double share = static_cast<double>(d.rank_sequences[k]) / static_cast<double>(d.batch);
    if (!close_to(rr.scale_ratio, share, 2e-3)) continue;
    const bool counts = rr.quantity == "tokens_per_expert";
    return g4(share) + " = dp rank " + std::to_string(k) + "'s share of the batch (" +
           std::to_string(d.rank_sequences[k]) + " of " + std::to_string(d.batch) + " sequences): that rank's own " +
           (counts ? "counts" : "part") + ", not summed over the ranks (the dp ranks hold " + split_words(d) + ")";
  }
  return "";
}

}  // namespace

// Averaged twice before clipping before the sync: an exact 1/dp on every family also leaves the
// candidate's norm under the clip (clip_coef 1) where the reference clips.
std::string signature_meaning(const VerdictReport& r, const RootCause& root) {
  if (r.command != "compare" || !root.found || root.row >= r.rows.size()) return "";
  const Row& rr = r.rows[root.row];
  for (const std::string& s :
       {own_mean(r, root, rr), averaged_twice(r, root, rr), clip_before_sync(r, root, rr), rank_share(r, rr)})
    if (!s.empty()) return s;
  return "";
}

}  // namespace parity
