// The compute_copy row (compute_copy.h).
#include "harness/verdict/compute_copy.h"

#include <cmath>
#include <limits>

namespace parity::compute_copy {

namespace vd = verdict_detail;

void CopyLocal::pack(std::vector<double>& out) const {
  out.insert(out.end(), {masters_equal, gathered, compared, differing, flat, got, ref, master});
}

CopyLocal CopyLocal::unpack(const double* in) {
  CopyLocal c;
  c.masters_equal = in[0], c.gathered = in[1], c.compared = in[2], c.differing = in[3];
  c.flat = in[4], c.got = in[5], c.ref = in[6], c.master = in[7];
  return c;
}

namespace {

bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }
double rounded(Low low, double x) { return low == Low::fp16 ? round_fp16(x) : round_bf16(x); }

std::string value(double x) { return vd::fmt("%.9g", x); }

// "lm_head.weight[3, 5]" from a flat index of its global shape
std::string element(const ParamInfo& p, double flat) {
  auto f = static_cast<int64_t>(flat);
  Shape idx(p.shape.size(), 0);
  for (size_t d = p.shape.size(); d-- > 0;)
    if (p.shape[d] > 0) idx[d] = f % p.shape[d], f /= p.shape[d];
  std::string out = p.name;
  for (size_t d = 0; d < idx.size(); ++d) out += (d ? ", " : "[") + std::to_string(idx[d]);
  return idx.empty() ? out : out + "]";
}

}  // namespace

std::string reading(double got, double ref, double master, const ParamInfo& p, const Precision& policy, DType dtype) {
  const std::string master_word(dtype_name(dtype));
  const std::string store(low_name(policy.store, dtype));
  const bool fp8 = p.fp8 && policy.fp8;
  const std::string required = fp8 ? "E4M3 (from " + store + ")" : store;
  if (same(got, master) && !same(ref, master))
    return master_word + " where " + required + " is required (the master's value, not rounded)";
  if (fp8 && policy.store != Low::none && same(got, rounded(policy.store, master)))
    return store + " where " + required + " is required (rounded, not quantized)";
  if (fp8)
    return "quantized otherwise than one device (another E4M3 scale, or from values other than its " + store +
           " copy)";
  for (const Low other : {Low::bf16, Low::fp16})
    if (other != policy.store && same(got, rounded(other, master)))
      return std::string(low_name(other, dtype)) + " where " + required + " is required";
  return "a value no rounding of its master gives (another element's, or a gather that moved it)";
}

vd::Outcome outcome(const std::vector<const double*>& parts, const std::vector<ParamInfo>& params,
                    const Precision& policy, DType dtype) {
  vd::Outcome o;
  o.scale_ratio = std::numeric_limits<double>::quiet_NaN();
  double compared = 0, differing = 0;
  std::vector<std::string> bad, skipped;
  for (size_t q = 0; q < params.size(); ++q) {
    bool premise = true;
    for (const double* part : parts)
      premise = premise && CopyLocal::unpack(part + q * CopyLocal::kWidth).masters_equal != 0;
    if (!premise) {
      skipped.push_back(params[q].name);
      continue;
    }
    double diff_q = 0;
    for (size_t r = 0; r < parts.size(); ++r) {
      const CopyLocal c = CopyLocal::unpack(parts[r] + q * CopyLocal::kWidth);
      compared += c.compared, differing += c.differing, diff_q += c.differing;
      if (c.differing > 0 && o.worst.rank < 0 && c.flat < 0) {  // a piece of another shape (verdict_copies.h)
        o.worst.name = params[q].name, o.worst.rank = static_cast<int>(r);
        o.detail = "; first: " + params[q].name + " on rank " + std::to_string(r) + ": a copy of " + value(c.got) +
                   " elements where its piece of the one-device tensor has " + value(c.ref);
      } else if (c.differing > 0 && o.worst.rank < 0) {
        o.worst.name = params[q].name, o.worst.rank = static_cast<int>(r);
        auto f = static_cast<int64_t>(c.flat);
        o.worst.index.assign(params[q].shape.size(), 0);
        for (size_t d = params[q].shape.size(); d-- > 0;)
          if (params[q].shape[d] > 0) o.worst.index[d] = f % params[q].shape[d], f /= params[q].shape[d];
        o.worst.got = c.got, o.worst.ref = c.ref, o.worst.abs_err = std::fabs(c.got - c.ref);
        o.detail = "; first: " + element(params[q], c.flat) + " on rank " + std::to_string(r) + " = " +
                   value(c.got) + " where one device computes with " + value(c.ref) + " (its master " +
                   value(c.master) + "): " + reading(c.got, c.ref, c.master, params[q], policy, dtype);
      }
    }
    if (diff_q > 0) bad.push_back(params[q].name);
  }
  o.compared = static_cast<int64_t>(compared);
  o.norm_rel = compared > 0 ? differing / compared : 0.0;
  std::string uncompared;
  if (!skipped.empty())
    uncompared = std::to_string(skipped.size()) + " of " + std::to_string(params.size()) +
                 " parameters not compared: their masters before the step are not the baseline's (a resumed "
                 "phase's first step, or the trajectory verdict after step 0)";
  if (bad.empty()) {
    o.detail = uncompared;
    return o;
  }
  o.verdict = RowVerdict::fail;
  std::string names;
  for (const std::string& n : bad) names += (names.empty() ? "" : ", ") + n;
  o.detail = "compute copy differs from the one-device copy: " + names + " (" + std::to_string(bad.size()) + " of " +
             std::to_string(params.size()) + " parameters, " + value(differing) + " of " + value(compared) +
             " elements)" + o.detail + (uncompared.empty() ? "" : "; " + uncompared);
  return o;
}

}  // namespace parity::compute_copy
