// The verdict's building blocks that do not depend on the element type: faults, the
// first-replica rule, local sums and their combination over ranks, rows, routing.
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <limits>
#include <string>

#include "core/error.h"
#include "harness/verdict/verdict_detail.h"

namespace parity {

using verdict_detail::fmt;


Fault parse_fault(std::string_view spec) {
  const std::string rule =
      "expected scale_grad:FAMILY:FACTOR, scale_rounded_grad:FAMILY:FACTOR or scale_param:FAMILY:FACTOR (FAMILY: "
      "embedding, attention, layernorm, "
      "router, routed_experts, shared_experts, dense_mlp, head), scale_loss:all:FACTOR or "
      "scale_grad_norm:all:FACTOR (FACTOR a finite number, nan or inf), with @RANK to apply it on one world rank, "
      "got \"" +
      std::string(spec) + "\"";
  const size_t a = spec.find(':'), b = a == std::string_view::npos ? a : spec.find(':', a + 1);
  if (b == std::string_view::npos) throw ConfigError("PARITY_FAULT", rule);
  Fault f;
  const std::string_view what = spec.substr(0, a), fam = spec.substr(a + 1, b - a - 1);
  if (what == "scale_grad") f.target = Fault::Target::grad;
  else if (what == "scale_param") f.target = Fault::Target::param;
  else if (what == "scale_loss") f.target = Fault::Target::loss;
  else if (what == "scale_grad_norm") f.target = Fault::Target::grad_norm;
  else if (what == "scale_rounded_grad") f.target = Fault::Target::rounded_grad;
  else throw ConfigError("PARITY_FAULT", rule);
  const bool scalar = f.target == Fault::Target::loss || f.target == Fault::Target::grad_norm;
  bool found = scalar && fam == "all";
  if (scalar != found) throw ConfigError("PARITY_FAULT", rule);
  for (Family x : {Family::embedding, Family::attention, Family::layernorm, Family::router, Family::routed_experts,
                   Family::shared_experts, Family::dense_mlp, Family::head})
    if (!scalar && family_name(x) == fam) f.family = x, found = true;
  if (!found) throw ConfigError("PARITY_FAULT", rule);
  std::string num(spec.substr(b + 1));
  char* end = nullptr;
  if (const size_t at = num.find('@'); at != std::string::npos) {
    const std::string r = num.substr(at + 1);
    const long v = std::strtol(r.c_str(), &end, 10);
    if (r.empty() || end != r.c_str() + r.size() || v < 0 || v > 1 << 20) throw ConfigError("PARITY_FAULT", rule);
    f.rank = static_cast<int>(v);
    num.resize(at);
  }
  f.factor = std::strtod(num.c_str(), &end);
  // nan and inf only when spelled so (a layout that goes non-finite, docs/faults.md); a number
  // that overflows (1e999) stays refused
  const bool word = num == "nan" || num == "inf" || num == "-inf";
  if (num.empty() || end != num.c_str() + num.size() || (!std::isfinite(f.factor) && !word))
    throw ConfigError("PARITY_FAULT", rule);
  return f;
}

bool counted_copy(const mesh::Mesh& m, const mesh::TensorLayout& l, int rank) {
  return mesh::first_replica(m, l, rank) && mesh::partial_root(m, l, rank);
}

double copies_of(const mesh::Mesh& m, const mesh::TensorLayout& l) {
  const std::vector<int64_t> sizes = m.sizes(l.view);
  double c = l.stages.size() > 1 ? static_cast<double>(l.stages.size()) : 1.0;
  for (size_t i = 0; i < l.placements.size() && i < sizes.size(); ++i)
    if (l.placements[i].kind == mesh::PlacementKind::replicate || l.placements[i].kind == mesh::PlacementKind::partial)
      c *= static_cast<double>(sizes[i]);
  return c;
}

std::string_view row_verdict_name(RowVerdict v) {
  switch (v) {
    case RowVerdict::fail: return "FAIL";
    case RowVerdict::near_tie: return "near-tie";
    case RowVerdict::ok: return "ok";
  }
  return "?";
}

bool VerdictReport::passed() const {
  for (const Row& r : rows)
    if (r.verdict == RowVerdict::fail) return false;
  return true;
}

namespace verdict_detail {

namespace {
double as_double(uint64_t h) { return digest_as_double(h); }
uint64_t as_digest(double x) { return static_cast<uint64_t>(x) << 12; }
}  // namespace

void LocalSums::add(int64_t tensor_id, int64_t flat_index, double g, double r, bool counted, double rms,
                    const double* held) {
  add_digests(index_key(tensor_id, &flat_index, 1), 1, [&](size_t) { return held ? *held : g; });
  add_element(tensor_id, flat_index, g, r, counted, rms);
}

void LocalSums::pack(std::vector<double>& out) const {
  out.insert(out.end(), {once.diff2, once.ref2, once.dot, all.diff2, all.ref2, all.dot, max_err, tensor, flat, got,
                         ref, shape_bad, far, counted_n, as_double(key), as_double(bits), sum_got, sum_ref, allow2});
}

LocalSums LocalSums::unpack(const double* in) {
  LocalSums s;
  s.once = {in[0], in[1], in[2]};
  s.all = {in[3], in[4], in[5]};
  s.max_err = in[6], s.tensor = in[7], s.flat = in[8], s.got = in[9], s.ref = in[10], s.shape_bad = in[11];
  s.far = in[12], s.counted_n = in[13];
  s.key = as_digest(in[14]), s.bits = as_digest(in[15]);
  s.sum_got = in[16], s.sum_ref = in[17], s.allow2 = in[18];
  return s;
}

GroupStep combine(const std::vector<LocalSums>& parts) {
  GroupStep g;
  std::vector<std::pair<uint64_t, size_t>> first;  // per shard key seen: its first holder
  for (size_t r = 0; r < parts.size(); ++r) {
    const LocalSums& p = parts[r];
    if (p.key != LocalSums::kDigestSeed) {  // a rank holding elements of this group
      size_t i = 0;
      while (i < first.size() && first[i].first != p.key) ++i;
      if (i == first.size()) {
        first.push_back({p.key, r});
      } else {
        ++g.replica_pairs;
        if (parts[first[i].second].bits != p.bits && g.replica_a < 0)
          g.replica_a = static_cast<int>(first[i].second), g.replica_b = static_cast<int>(r);
      }
    }
    g.once.add(p.once);
    g.all.add(p.all);
    g.shape_bad += static_cast<int64_t>(p.shape_bad);
    g.far += p.far, g.counted_n += p.counted_n, g.sum_got += p.sum_got, g.sum_ref += p.sum_ref;
    g.allow2 += p.allow2;
    if (p.max_err > g.max_err) {
      g.max_err = p.max_err, g.tensor = static_cast<int64_t>(p.tensor), g.flat = static_cast<int64_t>(p.flat);
      g.rank = static_cast<int>(r), g.got = p.got, g.ref = p.ref;
    }
  }
  return g;
}

// Whether a row's error is (nearly) a uniform scale of the reference: what is left of it after
// the best scale, ||x - s ref||^2 = diff2 - <x - ref, ref>^2 / ||ref||^2, is under a sixteenth of
// it (a quarter of the norm). One bf16 rounding of a value a whole tiny family flows through (a
// softmax probability near 1, the one activation of a dim-2 model) scales every element by the
// same 0.1%: each element is then "far", yet nothing was rounded element by element, which moves
// them by different amounts (and leaves the residual as large as the error). Such a row is held
// to its normwise bound only (docs/verdict.md "Bounds", issue 41).
static bool pure_scale(const NormSums& n) {
  if (!(n.diff2 > 0) || !(n.ref2 > 0)) return false;
  const double along = n.dot - n.ref2;  // <x - ref, ref>
  return n.diff2 - along * along / n.ref2 < n.diff2 / 16;
}

Outcome group_outcome(const GroupSpec& g, const GroupStep& s) {
  Outcome o;
  o.compared = static_cast<int64_t>(s.counted_n);
  o.replica_a = s.replica_a, o.replica_b = s.replica_b, o.replica_pairs = s.replica_pairs;
  int64_t expected = 0;
  for (const Shape& sh : g.shapes) expected += numel(sh);
  o.norm_rel = s.once.norm_rel_err();
  o.scale_ratio = s.once.scale_ratio();
  // counts: the ratio of their totals (counted over a rank's tokens alone: exactly 1/dp), where
  // <x, ref> / |ref|^2 of a count vector mixes in how the tokens spread over the experts
  if (g.quantity == "tokens_per_expert" && s.sum_ref != 0) o.scale_ratio = s.sum_got / s.sum_ref;
  const double all_rel = s.all.norm_rel_err();
  if (s.tensor >= 0 && s.tensor < static_cast<int64_t>(g.names.size())) {
    const auto t = static_cast<size_t>(s.tensor);
    o.worst = {g.names[t], unravel(s.flat, g.shapes[t]), s.rank, s.got, s.ref, s.max_err};
  }
  o.bound = {g.tol.norm_rel, false};
  o.far = s.counted_n > 0 ? s.far / s.counted_n : 0.0, o.far_bound = g.far_bound;
  const bool finite = std::isfinite(s.max_err) || s.max_err < 0;
  if (!(o.norm_rel <= g.tol.norm_rel)) {
    o.verdict = RowVerdict::fail;
  } else if (!(all_rel <= std::sqrt(g.copies) * g.tol.norm_rel)) {  // the counted copy agrees, a replica does not
    // (every copy agreeing, all_rel <= sqrt(copies) x the counted error: kv_heads 1 under tp 2 replicates wv
    // inside the attention family, whose explained update read 4.3e-3 over every copy, 3.7e-3 counted)
    o.verdict = RowVerdict::fail;
    o.detail = "replicas disagree: normwise error over every copy " + fmt("%.3e", all_rel) +
               " (the counted copies: " + fmt("%.3e", o.norm_rel) + ")";
  } else if (!pure_scale(s.once)) {
    check_far(o, s.far, s.counted_n, g.far_bound, "");
  } else {  // a uniform scale within the bound moves every element the same way: not a rounding's signature
    o.far = s.counted_n > 0 ? s.far / s.counted_n : 0.0;
  }
  if (!finite) o.verdict = RowVerdict::fail, o.detail = "non-finite value";
  if (s.shape_bad == 0 && (expected == 0 || o.compared != expected)) {  // no row is ok on what it did not see
    o.verdict = RowVerdict::fail;
    o.detail = "compared " + std::to_string(o.compared) + " of " + std::to_string(expected) +
               " elements: every element must be compared exactly once (a tensor skipped, or counted twice)";
  }
  if (s.shape_bad > 0) {
    o.verdict = RowVerdict::fail;
    o.detail = std::to_string(s.shape_bad) + " local tensors have the wrong size for their layout";
  }
  return o;
}

void check_far(Outcome& o, double far_count, double count, double bound, const std::string& of) {
  const double far = count > 0 ? far_count / count : 0.0;
  o.far = far, o.far_bound = bound;
  // within the normwise bound, but most of (enough) elements moved
  if (o.verdict != RowVerdict::ok || !(far > bound) || far_count < kFarMinCount) return;
  o.verdict = RowVerdict::fail;
  o.detail = fmt("%.1f%%", 100 * far) + " of the elements " + (of.empty() ? "" : of + " ") +
             "are far (|err| > 2^-11 of their magnitude; bound " + fmt("%.1f%%", 100 * bound) +
             "): every value moved a little, as a rounding to 16 bits moves them";
}

void check_taken(Outcome& o, double rel, double scale, double bound, double far, double count, double far_bound) {
  if (std::isnan(rel)) return;  // not measured (no first moment on this optimizer's ranks)
  o.taken = rel, o.taken_bound = bound;
  const double frac = count > 0 ? far / count : 0.0;
  const bool by_far = frac > far_bound && far >= kFarMinCount;
  if (!(rel > bound) && !by_far) return;
  // upstream of the update: where the taken gradient is wrong, it is why the update is
  o.verdict = RowVerdict::fail;
  o.scale_ratio = scale;
  if (by_far) o.far = frac, o.far_bound = far_bound;  // the row's far elements: the taken gradient's
  o.detail = "the gradient the optimizer took (its first moment's step: clipped, with weight decay) is off by " +
             fmt("%.3e", rel) + " (bound " + fmt("%.1e", bound) + "), " + fmt("%.1f%%", 100 * frac) +
             " of its elements far (bound " + fmt("%.1f%%", 100 * far_bound) + "), scale " + fmt("%.6f", scale);
}

void update_row(Row& row, int64_t step, const Outcome& o) {
  if (o.verdict == RowVerdict::fail) ++row.bad_steps;
  if (o.bound.value > row.loosest) row.loosest = o.bound.value, row.loosest_step = step;
  const bool worse = static_cast<int>(o.verdict) < static_cast<int>(row.verdict);
  // among ok steps: the one that came closest to its bound
  auto closeness = [](double err, double bound) { return bound > 0 ? err / bound : err; };
  const bool larger = o.verdict == row.verdict && row.verdict == RowVerdict::ok &&
                      closeness(o.norm_rel, o.bound.value) > closeness(row.norm_rel, row.tol);
  if (row.step < 0 || worse || larger) {
    if (o.bound.value > 0 || row.quantity != "routing") row.tol = o.bound.value;
    row.bound_from = o.bound.value > 0 ? (o.bound.from_twin ? "twin" : o.bound.widened > 1 ? "model" : "floor")
                                       : "exact";
    row.floor = o.bound.floor, row.twin = o.bound.twin, row.explained = o.bound.explained;
    row.reduction = o.bound.reduction;
    row.norm_rel = o.norm_rel, row.scale_ratio = o.scale_ratio, row.step = step;
    row.far = o.far, row.far_bound = o.far_bound, row.compared = o.compared;
    row.taken = o.taken, row.taken_bound = o.taken_bound;
    row.flow = o.flow, row.flow_tensor = o.flow_tensor;
    row.worst = o.worst, row.detail = o.detail, row.verdict = o.verdict;
  }
}

Outcome replicas_outcome(const std::vector<std::string>& bad, int64_t pairs) {
  Outcome o;
  o.scale_ratio = std::numeric_limits<double>::quiet_NaN();
  o.compared = pairs;
  o.norm_rel = static_cast<double>(bad.size());
  if (bad.empty()) return o;
  o.verdict = RowVerdict::fail;
  for (const std::string& b : bad) o.detail += (o.detail.empty() ? "" : "; ") + b;
  o.detail = "copies of the same elements differ in their bits: " + o.detail +
             " (a reduction whose result differs from rank to rank, or a replica updated apart)";
  return o;
}

void consider_scalar(Outcome& o, double got, double ref, int rank, const std::string& name, double tol,
                     double whole) {
  const double of = std::isnan(whole) ? ref : whole;
  const double err = std::abs(got - ref) / (of != 0 ? std::abs(of) : 1.0);
  if (o.norm_rel < 0 || err > o.norm_rel || std::isnan(err)) {
    o.norm_rel = std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
    o.scale_ratio = ref != 0 ? got / ref : std::numeric_limits<double>::quiet_NaN();
    o.worst = {name, {}, rank, got, ref, std::abs(got - ref)};
    o.verdict = o.norm_rel <= tol ? RowVerdict::ok : RowVerdict::fail;
  }
}

bool family_norm_off(const std::vector<double>& ref_sq, const double* got_sq, const std::vector<Family>& groups,
                     const std::vector<Bound>& grad) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto f = static_cast<size_t>(groups[g]);
    // A family whose baseline gradient is exactly zero is judged by its own row alone, against
    // the model's gradient scale (tolerance.h gradient_magnitude), as every family far below it:
    // held to its bound x 0 here, a few 1e-19 on the layout failed the grad norm with its error
    // at 3e-8 of a 6.5e-3 bound (drawn4101, fp32, step 22: attention and the experts at zero);
    // with the twin's bound inf there, inf x 0 was NaN (a drawn layout's router under NCCL's order).
    if (ref_sq[f] == 0 || std::isinf(grad[g].value)) continue;
    if (!(std::abs(std::sqrt(got_sq[f]) - std::sqrt(ref_sq[f])) <= grad[g].value * std::sqrt(ref_sq[f]))) return true;
  }
  return false;
}

double norm_explained_by_families(const std::vector<double>& ref_sq, const double* got_sq,
                                  const std::vector<Family>& groups, const std::vector<Bound>& grad) {
  if (family_norm_off(ref_sq, got_sq, groups, grad)) return 0;
  double r = 0, g = 0;
  for (const Family f : groups) r += ref_sq[static_cast<size_t>(f)], g += got_sq[static_cast<size_t>(f)];
  return r > 0 ? std::abs(std::sqrt(g) - std::sqrt(r)) / std::sqrt(r) : 0.0;
}

std::string norm_by_family(const std::vector<double>& ref_sq, const double* got_sq, const std::vector<Family>& groups,
                           const std::vector<Bound>& grad, double norm_bound) {
  std::string off;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto f = static_cast<size_t>(groups[g]);
    const double tol = std::max(norm_bound, grad[g].value);
    if (ref_sq[f] == 0 && got_sq[f] == 0) continue;
    const double ratio = ref_sq[f] != 0 ? got_sq[f] / ref_sq[f] : std::numeric_limits<double>::infinity();
    if (std::abs(ratio - 1) <= 2 * tol) continue;
    off += (off.empty() ? "" : ", ") + std::string(family_name(static_cast<Family>(f))) + fmt(" x%.4g", ratio);
  }
  if (off.empty()) return "squared norm by family, layout / baseline: every family matches (the total is added wrong)";
  return "squared norm by family, layout / baseline: " + off + " (the others match)";
}

void RouteLocal::pack(std::vector<double>& out) const {
  out.insert(out.end(), {mismatch, near_tie, gap, token, slot, base_expert, par_expert, bad_id, followed, 0.0});
}

RouteLocal RouteLocal::unpack(const double* in) {
  RouteLocal r;
  r.mismatch = in[0], r.near_tie = in[1], r.gap = in[2], r.token = in[3], r.slot = in[4];
  r.base_expert = in[5], r.par_expert = in[6], r.bad_id = in[7], r.followed = in[8];
  return r;
}

RouteLocal compare_routes(const std::vector<int64_t>& ids, const std::vector<int64_t>& chosen,
                          const std::vector<int64_t>& base_chosen, const std::vector<double>& base_scores, int64_t K,
                          int64_t E, double near_tie_rel, double near_tie_abs) {
  RouteLocal out;
  const int64_t n = K > 0 ? static_cast<int64_t>(base_chosen.size()) / K : 0;
  if (chosen.size() != ids.size() * static_cast<size_t>(K)) out.bad_id += 1;
  for (size_t i = 0; i < ids.size() && (i + 1) * static_cast<size_t>(K) <= chosen.size(); ++i) {
    const int64_t tok = ids[i];
    if (tok < 0 || tok >= n) {
      out.bad_id += 1;
      continue;
    }
    for (int64_t k = 0; k < K; ++k) {
      const int64_t b = base_chosen[static_cast<size_t>(tok * K + k)];
      const int64_t p = chosen[i * static_cast<size_t>(K) + static_cast<size_t>(k)];
      if (p == b) continue;
      out.mismatch += 1;
      double gap = std::numeric_limits<double>::infinity();
      bool tie = false;
      if (p >= 0 && p < E) {
        const double vb = base_scores[static_cast<size_t>(tok * E + b)];
        const double vp = base_scores[static_cast<size_t>(tok * E + p)];
        gap = std::abs(vb - vp);
        tie = gap <= near_tie_rel * (std::abs(vb) + std::abs(vp)) || gap <= near_tie_abs;
        if (std::isnan(gap)) gap = std::numeric_limits<double>::infinity();  // scores unknown: no near-tie
      }
      if (tie) out.near_tie += 1;
      if (gap > out.gap) {
        out.gap = gap, out.token = static_cast<double>(tok), out.slot = static_cast<double>(k);
        out.base_expert = static_cast<double>(b), out.par_expert = static_cast<double>(p);
      }
      break;  // one decision per token: the first slot that differs
    }
  }
  return out;
}

Outcome routing_outcome(const std::vector<RouteLocal>& parts, const std::vector<int64_t>& coverage,
                        const std::string& layer) {
  Outcome o;
  o.scale_ratio = std::numeric_limits<double>::quiet_NaN();
  double mismatch = 0, near_tie = 0, bad_id = 0, gap = -1, followed = 0;
  for (size_t r = 0; r < parts.size(); ++r) {
    const RouteLocal& p = parts[r];
    mismatch += p.mismatch, near_tie += p.near_tie, bad_id += p.bad_id, followed += p.followed;
    if (p.gap > gap) {
      gap = p.gap;
      o.worst = {layer + " token " + std::to_string(static_cast<int64_t>(p.token)),
                 {static_cast<int64_t>(p.token), static_cast<int64_t>(p.slot)}, static_cast<int>(r), p.par_expert,
                 p.base_expert, p.gap};
    }
  }
  int64_t missing = 0, twice = 0;
  for (int64_t c : coverage) missing += c == 0, twice += c > 1;
  const auto n = static_cast<double>(coverage.size());
  o.norm_rel = n > 0 ? mismatch / n : 0;
  o.compared = static_cast<int64_t>(coverage.size());
  const auto i = [](double x) { return std::to_string(static_cast<int64_t>(x)); };
  if (mismatch > 0)
    o.detail = i(mismatch) + " of " + i(n) + " tokens chose other experts (" + i(near_tie) +
               " near-tie); largest baseline score gap " + fmt("%.3e", gap) + ": token " +
               i(o.worst.index[0]) + " slot " + i(o.worst.index[1]) + " expert " + i(o.worst.got) +
               " instead of " + i(o.worst.ref);
  if (missing + twice > 0 || bad_id > 0)
    o.detail += (o.detail.empty() ? "" : "; ") + std::to_string(missing) + " tokens unreported, " +
                std::to_string(twice) + " reported twice, " + i(bad_id) + " bad ids or sizes";
  if (followed > 0)
    o.detail += (o.detail.empty() ? "" : "; ") + i(followed) +
                " near-tie tokens followed the baseline's choice (their scores within the rounding noise)";
  if (mismatch > near_tie || missing + twice > 0 || bad_id > 0) o.verdict = RowVerdict::fail;
  else if (near_tie > 0 || followed > 0) o.verdict = RowVerdict::near_tie;
  return o;
}

}  // namespace verdict_detail
}  // namespace parity
