// The verdict's wire format (verdict_wire.h).
#include "harness/verdict/verdict_wire.h"

#include <stdexcept>

#include "harness/verdict/compute_copy.h"
#include "harness/verdict/tolerance.h"
#include "harness/verdict/verdict_detail.h"
#include "harness/verdict/verdict_flow.h"
#include "harness/verdict/verdict_state.h"
#include "model/params.h"

namespace parity::verdict_wire {

const char* section_name(Section s) {
  switch (s) {
    case Section::scalars: return "scalars";
    case Section::family_norm_sq: return "family_norm_sq";
    case Section::micro_losses: return "micro_losses";
    case Section::groups: return "groups";
    case Section::routes: return "routes";
    case Section::coverage: return "coverage";
    case Section::state: return "state";
    case Section::tensors: return "tensors";
    case Section::updates: return "updates";
    case Section::copies: return "copies";
  }
  return "?";
}

Layout::Layout(const Counts& c) : counts_(c) {
  namespace vd = verdict_detail;
  const std::array<size_t, kSectionCount> sizes = {
      kScalarCount,
      2 * kFamilyCount,
      c.micro_losses,
      c.groups * vd::LocalSums::kWidth,
      c.moe_layers * vd::RouteLocal::kWidth,
      c.moe_layers * c.tokens,
      c.state_entries * verdict_state::kWidth,
      c.tensors * verdict_flow::kTensorWidth,
      c.param_groups * (UpdateSums::kWidth + c.taken_width),
      c.copies * compute_copy::CopyLocal::kWidth,
  };
  for (size_t s = 0; s < kSectionCount; ++s) at_[s] = stride_, size_[s] = sizes[s], stride_ += sizes[s];
}

void Layout::expect(const std::vector<double>& part, Section s) const {
  if (part.size() != at(s))
    throw std::logic_error(std::string("verdict wire: section ") + section_name(s) + " starts at " +
                           std::to_string(at(s)) + " of a rank's part, but " + std::to_string(part.size()) +
                           " doubles were written before it");
}

void Layout::expect_whole(const std::vector<double>& parts, int world) const {
  if (parts.size() != stride_ * static_cast<size_t>(world))
    throw std::logic_error("verdict wire: " + std::to_string(parts.size()) + " doubles for " + std::to_string(world) +
                           " rank parts of " + std::to_string(stride_));
}

void UpdateSums::add(const UpdateSums& o) {
  update.add(o.update);
  far += o.far, count += o.count;
}

void UpdateSums::pack(std::vector<double>& out) const {
  out.insert(out.end(), {update.diff2, update.ref2, update.dot, far, count});
}

UpdateSums UpdateSums::unpack(const double* in) {
  UpdateSums u;
  u.update = {in[0], in[1], in[2]};
  u.far = in[3], u.count = in[4];
  return u;
}

}  // namespace parity::verdict_wire
