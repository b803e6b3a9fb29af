// The verdict's wire format: what one rank contributes to a step, exchanged between the ranks
// (harness/runner/verdict_run.cpp: the step's one allgather, or an alltoallv to rank 0 in a
// simulated world) and folded into the rows. One rank's part is a vector of doubles made of
// named sections in a fixed order; every rank's part has the same layout, so the world's parts
// are `world` parts of `stride()` doubles and the fold reads a section of a rank by its name
// (`Layout::of`), never by an offset counted from the end of the vector.
//
// The per-family sums that travel in it (LocalSums per group, verdict_detail.h; UpdateSums per
// param group, below) are also what `parity compare` (dump_compare.cpp) adds up on two dumps,
// a world of one rank.
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "harness/verdict/compare.h"
#include "harness/verdict/tolerance.h"

namespace parity::verdict_wire {

// The sections of one rank's part, in the order they are written.
enum class Section : size_t {
  scalars,         // loss, grad_norm, clip_coef, loss_scale, skipped (kScalarCount)
  family_norm_sq,  // the squared gradient norm per Family (kFamilyCount), then that of the exact reductions'
  micro_losses,    // one per micro-batch
  groups,          // per compared group (grad, param, tokens_per_expert, expert_bias): LocalSums
  routes,          // per MoE layer: RouteLocal (this rank's routing against the baseline's)
  coverage,        // per MoE layer, per token of the batch: how often this rank reported it
  state,           // per optimizer-state entry: key and bits digests (verdict_state.h, the replicas row)
  tensors,         // per parameter: its gradient's normwise sums (verdict_flow.h, the first wrong tensor)
  updates,         // per param group: UpdateSums, then the taken gradient's sums (verdict_taken.h)
  copies,          // per parameter: its gathered compute copy against the one-device copy (compute_copy.h);
                   // empty under a policy without a compute copy (fp32, fp64)
};
inline constexpr size_t kSectionCount = 10;
const char* section_name(Section s);

// Section::scalars, by position.
inline constexpr size_t kLoss = 0, kGradNorm = 1, kClipCoef = 2, kScalarCount = 5;
inline constexpr size_t kLossScale = 3, kSkipped = 4;  // fp16's (1 and 0 under any other policy)

// How many items of each section a rank's part holds (the same on every rank of a run).
struct Counts {
  size_t micro_losses = 0;
  size_t groups = 0;         // compared groups (verdict_detail.h VerdictLayout::groups)
  size_t moe_layers = 0;
  size_t tokens = 0;         // per MoE layer: the batch's tokens (the coverage section)
  size_t state_entries = 0;  // optimizer-state entries digested
  size_t tensors = 0;        // parameters
  size_t param_groups = 0;   // family groups (one UpdateSums each)
  size_t taken_width = 0;    // per param group, after its UpdateSums: the taken gradient's sums
  size_t copies = 0;         // parameters whose compute copy is compared (0: no compute_copy row)
};

// Where each section of one rank's part starts and how many doubles it holds.
class Layout {
 public:
  Layout() = default;
  explicit Layout(const Counts& c);
  const Counts& counts() const { return counts_; }
  size_t at(Section s) const { return at_[static_cast<size_t>(s)]; }
  size_t size(Section s) const { return size_[static_cast<size_t>(s)]; }
  size_t stride() const { return stride_; }  // one rank's part
  // Section s of rank r's part among the world's parts `all` (world parts of stride()).
  const double* of(const std::vector<double>& all, int rank, Section s) const {
    return all.data() + static_cast<size_t>(rank) * stride_ + at(s);
  }
  // A part being written is about to start section s: throws std::logic_error naming the
  // section when what was written so far does not end where s starts.
  void expect(const std::vector<double>& part, Section s) const;
  // A written part (or the world's parts) has the layout's size: std::logic_error otherwise.
  void expect_whole(const std::vector<double>& parts, int world) const;

 private:
  Counts counts_;
  std::array<size_t, kSectionCount> at_{}, size_{};
  size_t stride_ = 0;
};

// One param group's sums of the update (after - before) on the elements a rank counts: its
// normwise sums against the baseline's update, its far elements (tolerance.h is_far) and the
// elements counted. The same sums on a rank's shards (verdict_run.cpp) and on two dumps
// (dump_compare.cpp).
struct UpdateSums {
  NormSums update;
  double far = 0, count = 0;
  static constexpr size_t kWidth = 5;
  // x: the layout's update of one element, r: the baseline's; rms: is_far's magnitude floor
  void add(double x, double r, double rms) {  // inline: once per element of every update, every step
    update.diff2 += (x - r) * (x - r), update.ref2 += r * r, update.dot += x * r;
    far += is_far(x, r, rms), count += 1;
  }
  void add(const UpdateSums& o);  // another rank's part
  void pack(std::vector<double>& out) const;
  static UpdateSums unpack(const double* in);
};

}  // namespace parity::verdict_wire
