// Internals of the verdict (verdict.h): the local sums one rank contributes per compared
// group, flattened into doubles so one allgather per step carries every group, and the
// combination of all ranks' parts in rank order (so every rank gets the same bits).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "harness/verdict/compare.h"
#include "harness/verdict/tolerance.h"
#include "harness/verdict/verdict.h"

namespace parity::verdict_detail {

// One number through a printf format ("%.3g"), for the report's and the rows' text.
inline std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// Digests (the replicas row): a 64-bit mix (splitmix64's finaliser) chained over values,
// order-dependent and the same for two ranks that visit the same values in the same order;
// they travel as doubles, their top 52 bits (exact in a double).
inline uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline double digest_as_double(uint64_t h) { return static_cast<double>(h >> 12); }
// A digest of n words, word(i) for i in [0, n): word i is mixed into lane i % 8, the lanes into h at the end, so
// the eight chains run side by side (a single chain of mix() waits on each multiply: ~15 cycles a word).
template <class F> uint64_t digest_words(uint64_t h, size_t n, F&& word) {
  uint64_t l[8];
  for (uint64_t k = 0; k < 8; ++k) l[k] = mix(h, k);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (size_t k = 0; k < 8; ++k) l[k] = mix(l[k], word(i + k));
  for (; i < n; ++i) l[i % 8] = mix(l[i % 8], word(i));
  for (uint64_t k = 0; k < 8; ++k) h = mix(h, l[k]);
  return h;
}
inline uint64_t bits_of(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
// The digest of a tensor's global flat indices on this rank (LocalSums::key): `tensor_id` its place in its group.
inline uint64_t index_key(int64_t tensor_id, const int64_t* idx, size_t n) {
  return digest_words(mix(0x452821e638d01377ull, static_cast<uint64_t>(tensor_id)), n,
                      [idx](size_t i) { return static_cast<uint64_t>(idx[i]); });
}

// A compared group: one row of the table (a family's gradients, its parameters, the
// tokens_per_expert counts, the expert biases), made of named tensors.
struct GroupSpec {
  std::string quantity, subject;
  Tolerance tol;
  double far_bound = 1;  // the fraction of far elements allowed (tolerance.h kFarRel)
  std::vector<std::string> names;  // per tensor
  std::vector<Shape> shapes;       // per tensor, global
  // The most copies any of its tensors has (copies_of): where every copy agrees, the error over every
  // copy is the counted one reweighted by the copies, at most sqrt(copies) times it
  double copies = 1;
};

// What a model's verdict compares: a grad and a param group per family the model has (in the
// registry's order of first appearance), then tokens_per_expert and expert_bias when it has MoE
// layers; and the rows they fold into, before any row a caller adds (replicas, inputs): loss,
// grad_norm, clip_coef, one per group, routing per MoE layer. `parity run`'s ranks and `parity
// compare` both start from it (verdict_layout.cpp).
struct VerdictLayout {
  std::vector<Family> families;  // per family group
  std::vector<double> elements;  // per family group: its global element count
  std::vector<size_t> group_of;  // per parameter: its family group
  std::vector<GroupSpec> groups;  // grad [0, n), param [n, 2n), then tokens_per_expert, expert_bias
  std::vector<Row> rows;
};
VerdictLayout verdict_layout(const std::vector<ParamSpec>& specs, const ModelConfig& c);
Row make_row(std::string quantity, std::string subject, double tol = 0);  // a row no step has folded into

// One rank's part of one group at one step.
struct LocalSums {
  NormSums once;  // elements this rank counts (first replica)
  NormSums all;   // every element this rank holds (every copy)
  double max_err = -1;  // largest |got - ref| here (inf for a non-finite got), -1 when none
  double tensor = -1, flat = -1, got = 0, ref = 0;  // where it is
  double shape_bad = 0;  // local tensors whose size is not the layout's

  double far = 0, counted_n = 0;  // counted elements that are far (tolerance.h is_far), and all counted
  double sum_got = 0, sum_ref = 0;  // the counted elements' plain sums (a count's scale: its total's ratio)
  double allow2 = 0;  // the counted elements' squared allowances (tolerance.h kReduceRounding), summed
  // Replicas (docs/verdict.md "Replicas, bit for bit"): a digest of the global indices this
  // rank holds (its shard's identity) and of the bits of its values, in its local order.
  // Ranks with the same key hold the same elements and must hold the same bits.
  uint64_t key = kDigestSeed, bits = kDigestSeed;
  static constexpr uint64_t kDigestSeed = 0x243f6a8885a308d3ull;
  static constexpr size_t kWidth = 19;
  // rms: the root mean square of the baseline's whole tensor (is_far's magnitude floor); held: the
  // value the rank holds, whose bits the replicas row compares, where it is not the compared g (the
  // grad rows under bf16-reduce-bf16 compare the reductions' exact result: verdict_part.cpp add_tensors)
  void add(int64_t tensor_id, int64_t flat_index, double g, double r, bool counted, double rms = 0,
           const double* held = nullptr);
  // A tensor's n elements at once, as n add()s but for the digests: the key takes the tensor's index_key, the
  // bits the digest of held(i)'s bits (the rank's value, a double); each add_element(g, r, ...) then does the
  // sums of one element, in order (the same bits as add()'s).
  template <class H> void add_digests(uint64_t tensor_key, size_t n, H&& held) {
    key = mix(key, tensor_key);
    bits = mix(bits, digest_words(kDigestSeed, n, [&held](size_t i) { return bits_of(held(i)); }));
  }
  void add_element(int64_t tensor_id, int64_t flat_index, double g, double r, bool counted, double rms) {
    const double d = g - r;
    if (counted)
      once.diff2 += d * d, once.ref2 += r * r, once.dot += g * r, counted_n += 1, far += is_far(g, r, rms),
          sum_got += g, sum_ref += r;
    all.diff2 += d * d, all.ref2 += r * r, all.dot += g * r;
    double err = std::abs(d);
    if (!std::isfinite(err)) err = std::numeric_limits<double>::infinity();
    if (err > max_err) {
      max_err = err, tensor = static_cast<double>(tensor_id), flat = static_cast<double>(flat_index);
      got = g, ref = r;
    }
  }
  void pack(std::vector<double>& out) const;
  static LocalSums unpack(const double* in);
};

// The world's sums of one group at one step.
struct GroupStep {
  NormSums once, all;
  double max_err = -1;
  int64_t tensor = -1, flat = -1;
  int rank = -1;
  double got = 0, ref = 0;
  int64_t shape_bad = 0;
  double far = 0, counted_n = 0;
  double sum_got = 0, sum_ref = 0;
  double allow2 = 0;
  int replica_a = -1, replica_b = -1;  // two ranks holding the same elements with different bits
  int64_t replica_pairs = 0;           // ranks compared bit for bit with another holder of their elements
};
// parts: every rank's LocalSums of this group, in rank order.
GroupStep combine(const std::vector<LocalSums>& parts);

// The step's verdict of a group: normwise error of the counted elements and of every copy
// against tol.norm_rel, finite values, sizes that match the layout.
struct Outcome {
  double norm_rel = 0, scale_ratio = 1;
  WorstElement worst;
  std::string detail;
  RowVerdict verdict = RowVerdict::ok;
  Bound bound;  // what norm_rel was held to at this step
  double far = 0, far_bound = 0;  // the fraction of far elements and its bound (tensor rows)
  double taken = 0, taken_bound = 0;  // param rows: the gradient the optimizer took (check_taken), and its bound
  int64_t compared = -1;  // elements (tokens for routing) compared; -1 for scalars
  int replica_a = -1, replica_b = -1;  // group rows: two ranks whose copies differ in bits
  int64_t replica_pairs = 0;
  int64_t flow = -1;        // grad rows: the backward position of the first wrong tensor (verdict_flow.h)
  std::string flow_tensor;  // and its name
};
Outcome group_outcome(const GroupSpec& g, const GroupStep& s);
// The second measure (tolerance.h is_far): an ok outcome whose fraction of far elements is
// over its bound fails, saying so; `of` names what was measured ("of the update").
void check_far(Outcome& o, double far_count, double count, double bound, const std::string& of);
// The third measure of a param row (issue 41): the gradient the optimizer took, read back from
// its first moment (clipped, weight decay included where it enters the moment), against the
// baseline's gradient x its clip coefficient: normwise error `rel` and scale `scale`, held to
// `bound` (the family's gradient bound plus the grad norm's). Over it the row fails, with this
// scale and detail (the taken gradient is upstream of the update).
// Its far elements (far of count) are held to the family's gradient far bound (far_bound), as the
// grad row's are: a moment kept in bf16 moves 3/4 of them at the first step.
void check_taken(Outcome& o, double rel, double scale, double bound, double far, double count, double far_bound);

// The replicas row at one step: `bad` names the groups whose copies differ in bits (with
// their ranks), `pairs` the copies compared bit for bit over every group.
Outcome replicas_outcome(const std::vector<std::string>& bad, int64_t pairs);

// Folds one step's outcome into a row: a worse verdict replaces what the row shows; among
// ok steps the largest error is shown; failing and near-tie rows keep their first step.
void update_row(Row& row, int64_t step, const Outcome& o);

// A scalar row's step (loss and micro-batch losses, grad_norm, clip_coef): keeps the worst of
// the values offered, relative to ref (or to `whole`; absolute where it is 0), failing over tol.
// whole: the quantity `ref` is a part of (a micro-batch's loss: the step's loss), whose
// magnitude the error is taken relative to; NaN: ref itself.
void consider_scalar(Outcome& o, double got, double ref, int rank, const std::string& name, double tol,
                     double whole = std::numeric_limits<double>::quiet_NaN());

// The grad norm's parts per family (ref_sq, got_sq: the squared gradient norm per Family,
// kFamilyCount each; groups: the model's family groups, grad: their gradient bounds). Each
// part is held to its family's bound: | ||x|| - ||r|| | <= ||x - r||, so a part off by more is
// a wrong norm even when the total is within its own bound.
bool family_norm_off(const std::vector<double>& ref_sq, const double* got_sq, const std::vector<Family>& groups,
                     const std::vector<Bound>& grad);
// How far the grad norm moves because its families' gradients moved, each within its own row's
// bound (family_norm_off false; else 0): | sqrt(sum got_sq) - sqrt(sum ref_sq) | / sqrt(sum ref_sq)
// over the groups' families. The families' rows judge that difference; the grad norm's row, widened
// by it (tolerance.h with_explained), judges the rest: the total the layout added from them (issue 41:
// a one-token model's families each moved 3-6% within their bounds, and its grad norm 4.8% against a
// bound of 2.5% named "the total is added wrong").
double norm_explained_by_families(const std::vector<double>& ref_sq, const double* got_sq,
                                  const std::vector<Family>& groups, const std::vector<Bound>& grad);
// Which families a wrong grad norm comes from: "squared norm by family, layout / baseline: router
// x4 (the others match)", or "every family matches" (the total is added wrong).
std::string norm_by_family(const std::vector<double>& ref_sq, const double* got_sq, const std::vector<Family>& groups,
                           const std::vector<Bound>& grad, double norm_bound);

// One MoE layer's routing at one step, on one rank.
struct RouteLocal {
  double mismatch = 0, near_tie = 0;
  double gap = -1;  // the largest decision gap among this rank's differing tokens
  double token = -1, slot = -1, base_expert = -1, par_expert = -1;
  double bad_id = 0;  // reported token ids or experts out of range, or sizes that disagree
  double followed = 0;  // near-ties this rank's routing resolved as the baseline did (model/route_oracle.h)

  static constexpr size_t kWidth = 10;
  void pack(std::vector<double>& out) const;
  static RouteLocal unpack(const double* in);
};

// Compares one rank's reported tokens with the baseline's choices. base_chosen (n, K),
// base_scores (n, E): the values top-k ranked. near_tie_rel: a differing decision whose
// baseline gap is <= near_tie_rel * (|v_base| + |v_par|) is a near-tie (tolerance.h); so is
// one whose gap is <= near_tie_abs (kTwinFactor x the rounding twin's score noise).
RouteLocal compare_routes(const std::vector<int64_t>& ids, const std::vector<int64_t>& chosen,
                          const std::vector<int64_t>& base_chosen, const std::vector<double>& base_scores, int64_t K,
                          int64_t E, double near_tie_rel, double near_tie_abs = 0);

// parts in rank order; coverage: how many ranks reported each token (n).
Outcome routing_outcome(const std::vector<RouteLocal>& parts, const std::vector<int64_t>& coverage,
                        const std::string& layer);

// What the report says of the run: "world 8 = dp_replicate 1 x dp_shard 4 x tp 2 (ep 1,
// etp 2)", "adam lr 0.003", the injected fault; and every rank's timings gathered (rank 0's
// and, per field, the slowest rank's). verdict_report.cpp.
std::string optim_desc(const OptimConfig& o);
std::string fault_desc(const std::optional<Fault>& f);

}  // namespace parity::verdict_detail
