// A resume check's carry (harness/runner/verdict_carry.h): phase 1's moments state, written per
// rank, read back by phase 2's ranks by global element whatever their split; a parameter with an
// element no file holds is not carried; a damaged file is refused.
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "harness/runner/verdict_carry.h"

namespace parity::verdict_carry_test {  // one namespace per file: the tests build as unity batches
namespace {

namespace fs = std::filesystem;
using verdict_taken::Moments;

// A rank of phase 1 holding elements idx of parameter 0 ("a", counted) and all of "b" (not
// counted: another rank's replica); each value of element e in array k is 100 k + e.
Moments phase1_rank(const std::vector<int64_t>& idx) {
  Moments mo;
  mo.idx = {idx, {0, 1}};
  mo.counted = {1, 0};
  for (auto* a : {&mo.m_after, &mo.v_after, &mo.m_tol, &mo.v_tol, &mo.shadow_m, &mo.shadow_v}) a->resize(2);
  int k = 0;
  for (auto* a : {&mo.m_after, &mo.v_after, &mo.m_tol, &mo.v_tol, &mo.shadow_m, &mo.shadow_v}) {
    for (int64_t e : idx) (*a)[0].push_back(100.0 * k + static_cast<double>(e));
    (*a)[1] = {1.0, 2.0};
    ++k;
  }
  return mo;
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "parity-carry-test-XXXXXX").string();
    if (mkdtemp(t.data()) != nullptr) path = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const std::vector<ParamSpec> kSpecs = {{"a", Shape{6}, Family::head}, {"b", Shape{2}, Family::head}};

TEST(VerdictCarry, PhaseTwoRanksReadPhaseOnesElementsWhateverTheirSplit) {
  TempDir d;
  verdict_carry::save(phase1_rank({0, 1, 2}), kSpecs, d.path.string(), 0);  // phase 1: 2 ranks, 3 + 3
  verdict_carry::save(phase1_rank({3, 4, 5}), kSpecs, d.path.string(), 1);
  Moments mo;  // phase 2: this rank counts elements 5, 1, 2 of "a" (any order), and "b"
  mo.idx = {{5, 1, 2}, {0, 1}};
  mo.counted = {1, 1};
  EXPECT_EQ(verdict_carry::load(mo, kSpecs, d.path.string()), 1u);  // "b": no rank counted it in phase 1
  ASSERT_EQ(mo.shadow_v[0].size(), 3u);
  EXPECT_EQ(mo.m_after[0], (std::vector<double>{5, 1, 2}));
  EXPECT_EQ(mo.shadow_v[0], (std::vector<double>{505, 501, 502}));
  EXPECT_EQ(mo.v_tol[0], (std::vector<double>{305, 301, 302}));
  EXPECT_TRUE(mo.m_after[1].empty()) << "a parameter no file holds is not carried";
}

TEST(VerdictCarry, AnElementMissingLeavesItsParameterUncarried) {
  TempDir d;
  verdict_carry::save(phase1_rank({0, 1, 2}), kSpecs, d.path.string(), 0);  // rank 1's file never written
  Moments mo;
  mo.idx = {{2, 3}, {}};
  mo.counted = {1, 0};
  EXPECT_EQ(verdict_carry::load(mo, kSpecs, d.path.string()), 0u);
  EXPECT_TRUE(mo.m_after[0].empty());
  Moments none;  // no directory: nothing carried, no error
  none.idx = {{0}, {}};
  none.counted = {1, 0};
  EXPECT_EQ(verdict_carry::load(none, kSpecs, (d.path / "absent").string()), 0u);
}

TEST(VerdictCarry, ADamagedFileIsRefused) {
  TempDir d;
  verdict_carry::save(phase1_rank({0, 1}), kSpecs, d.path.string(), 0);
  const fs::path f = d.path / "rank0.carry";
  fs::resize_file(f, fs::file_size(f) - 3);  // cut short
  Moments mo;
  mo.idx = {{0}, {}};
  mo.counted = {1, 0};
  EXPECT_THROW(verdict_carry::load(mo, kSpecs, d.path.string()), IoError);
  std::ofstream(f, std::ios::binary | std::ios::trunc) << "not a carry file";
  EXPECT_THROW(verdict_carry::load(mo, kSpecs, d.path.string()), IoError);
}

}  // namespace
}  // namespace parity::verdict_carry_test
