// verdict_wire.h: a rank's part of a step in named sections, and the update's sums that
// `parity run`'s ranks and `parity compare` both add up.
#include "harness/verdict/verdict_wire.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "harness/verdict/compute_copy.h"
#include "harness/verdict/tolerance.h"
#include "harness/verdict/verdict_detail.h"
#include "model/params.h"

namespace parity::verdict_wire_test {  // one namespace per file: the tests build as unity batches
namespace {

using verdict_wire::Counts;
using verdict_wire::Layout;
using verdict_wire::Section;
using verdict_wire::UpdateSums;

const Counts kCounts{/*micro_losses=*/3, /*groups=*/6, /*moe_layers=*/2, /*tokens=*/10, /*state_entries=*/4,
                     /*tensors=*/7, /*param_groups=*/2, /*taken_width=*/6, /*copies=*/3};

TEST(VerdictWire, SectionsFollowEachOtherInOrderWithTheirItemsWidths) {
  const Layout w(kCounts);
  const std::vector<std::pair<Section, size_t>> sizes = {
      {Section::scalars, 5},  // loss, grad_norm, clip_coef, and fp16's loss_scale and skipped
      {Section::family_norm_sq, 2 * kFamilyCount},  // the rounded gradients' parts, then the exact reductions'
      {Section::micro_losses, 3},
      {Section::groups, 6 * verdict_detail::LocalSums::kWidth},
      {Section::routes, 2 * verdict_detail::RouteLocal::kWidth},
      {Section::coverage, 2 * 10},
      {Section::state, 4 * 2},
      {Section::tensors, 7 * 2},
      {Section::updates, 2 * (UpdateSums::kWidth + 6)},
      {Section::copies, 3 * compute_copy::CopyLocal::kWidth},  // issue 41: the compute_copy row
  };
  size_t at = 0;
  for (const auto& [s, n] : sizes) {
    EXPECT_EQ(w.at(s), at) << verdict_wire::section_name(s);
    EXPECT_EQ(w.size(s), n) << verdict_wire::section_name(s);
    at += n;
  }
  EXPECT_EQ(w.stride(), at);
}

// Rank r's section is read where rank r wrote it, whatever the other ranks' values.
TEST(VerdictWire, EachRanksSectionIsReadByName) {
  const Layout w(kCounts);
  std::vector<double> all;
  for (int r = 0; r < 3; ++r) {
    std::vector<double> part;
    for (size_t s = 0; s < verdict_wire::kSectionCount; ++s) {
      const auto sec = static_cast<Section>(s);
      w.expect(part, sec);
      part.resize(part.size() + w.size(sec), 100.0 * r + static_cast<double>(s));
    }
    w.expect_whole(part, 1);
    all.insert(all.end(), part.begin(), part.end());
  }
  w.expect_whole(all, 3);
  for (int r = 0; r < 3; ++r)
    for (size_t s = 0; s < verdict_wire::kSectionCount; ++s)
      EXPECT_EQ(*w.of(all, r, static_cast<Section>(s)), 100.0 * r + static_cast<double>(s));
}

// A part whose sections do not line up with the layout is a logic error naming the section.
TEST(VerdictWire, AMisplacedSectionIsNamed) {
  const Layout w(kCounts);
  std::vector<double> part(w.at(Section::routes) + 1, 0.0);
  try {
    w.expect(part, Section::routes);
    FAIL() << "a part one double too long was accepted";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("section routes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(w.expect_whole(part, 1), std::logic_error);
  part.resize(w.stride());
  EXPECT_NO_THROW(w.expect_whole(part, 1));
}

TEST(VerdictWire, UpdateSumsTravelAndAddUp) {
  UpdateSums a, b;
  a.add(2.0, 1.0, 0.0);  // twice the baseline's update: far
  a.add(1.0, 1.0, 0.0);
  b.add(-3.0, -3.0, 0.0);
  EXPECT_EQ(a.update.diff2, 1.0);
  EXPECT_EQ(a.update.ref2, 2.0);
  EXPECT_EQ(a.update.dot, 3.0);
  EXPECT_EQ(a.far, 1.0);
  EXPECT_EQ(a.count, 2.0);
  std::vector<double> wire;
  a.pack(wire);
  b.pack(wire);
  ASSERT_EQ(wire.size(), 2 * UpdateSums::kWidth);
  UpdateSums world;
  world.add(UpdateSums::unpack(wire.data()));
  world.add(UpdateSums::unpack(wire.data() + UpdateSums::kWidth));
  EXPECT_EQ(world.update.ref2, 11.0);
  EXPECT_EQ(world.update.dot, 12.0);
  EXPECT_EQ(world.far, 1.0);
  EXPECT_EQ(world.count, 3.0);
}

}  // namespace
}  // namespace parity::verdict_wire_test
