// The host's shared baseline file (src/harness/runner/shared_baseline.h) read by several ranks
// of one process, as the threads of a simulated world read it: they share one mapping of the
// file (issue 50: each used to map it, and at W = 4096 the mappings alone passed a 24 GB
// `ulimit -v`), and every reader gets the same records.
#include "harness/runner/shared_baseline.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/buffer.h"
#include "core/error.h"
#include "core/exit_codes.h"
#include "harness/runner/shared_baseline_format.h"
#include "harness/scenario/scenario.h"
#include "harness/verdict/family_sums.h"
#include "harness/verdict/verdict_detail.h"

namespace parity {
namespace {

// The lines of /proc/self/maps that map `path`.
int mappings_of(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find(path) != std::string::npos;
  return n;
}

TEST(SharedBaselineFile, TheReadersOfOneProcessShareOneMapping) {
  Scenario s = load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/fsdp4.json");
  s.steps = 2;
  const std::string path = ::testing::TempDir() + "parity-shared-base-" + std::to_string(::getpid());
  constexpr int kReaders = 6;
  BaselineProducer producer(s, path, kReaders, 0);
  producer.start();
  std::vector<std::unique_ptr<BaselineSource<double>>> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.push_back(make_baseline_source<double>(s, r, path));
    ASSERT_TRUE(readers.back()->shared()) << "reader " << r << " trained its own";
  }
  EXPECT_EQ(mappings_of(path), 2);  // the producer's, and the readers' one
  for (int64_t t = 0; t < s.steps; ++t) {
    const auto first = readers[0]->step(t);
    for (int r = 1; r < kReaders; ++r) EXPECT_EQ(readers[static_cast<size_t>(r)]->step(t)->loss, first->loss);
  }
  readers.clear();
  EXPECT_EQ(mappings_of(path), 1);  // unmapped with its last reader
}

// A step read once is released to the producer, whose ring may reuse its block: asking for it
// again is refused, never answered with whatever step the block holds now (issue 45's traced
// re-run got step 8's record for step 0).
TEST(SharedBaselineFile, AStepReleasedIsNotReadAgain) {
  Scenario s = load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/fsdp4.json");
  s.steps = 3;
  const std::string path = ::testing::TempDir() + "parity-shared-again-" + std::to_string(::getpid());
  BaselineProducer producer(s, path, 1, 0);
  producer.start();
  auto reader = make_baseline_source<double>(s, 0, path);
  ASSERT_TRUE(reader->shared());
  (void)reader->step(0);
  (void)reader->step(1);
  EXPECT_THROW((void)reader->step(0), std::logic_error);
  EXPECT_NO_THROW((void)reader->step(2));
}

// The producer keeps a ring of four step blocks (issue 43): a rank holds two while it compares a step (it reads
// them in place), so four let the producer run two steps ahead, and the file's pages (and every rank's mapping
// of them) are reused from the fifth step on instead of first touched in each of ten blocks. A run of ten steps
// needs a file no larger than a run of four.
TEST(SharedBaselineFile, TenStepsNeedAFileNoLargerThanFour) {
  Scenario s = load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/fsdp4.json");
  auto file_bytes = [&](int64_t steps) {
    s.steps = steps;
    const std::string path = ::testing::TempDir() + "parity-shared-ring-" + std::to_string(::getpid()) + "-" +
                             std::to_string(steps);
    const BaselineProducer producer(s, path, 1, 0);  // not started: the file is made and reserved
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    return static_cast<int64_t>(f.tellg());
  };
  const int64_t four = file_bytes(4), three = file_bytes(3);
  EXPECT_GT(four, three);  // a step block each
  EXPECT_EQ(file_bytes(10), four);
}

// On the CPU a rank reads a step's gradients and parameters in place, in the file (no copy, no fresh memory per
// rank: issue 43), so the block must stay the step's while any handle of the record reads it: a record held
// while the next three steps are read keeps its block from the producer (which would otherwise write step 4
// into it), bit for bit the record a rank's own baseline gives; let go, the producer goes on.
TEST(SharedBaselineFile, ARecordHeldKeepsItsBlockFromTheProducer) {
  Scenario s = load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/fsdp4.json");
  s.steps = 8;
  const std::string path = ::testing::TempDir() + "parity-shared-pin-" + std::to_string(::getpid());
  BaselineProducer producer(s, path, 1, 0);
  producer.start();
  auto shared = make_baseline_source<double>(s, 0, path);
  auto own = make_baseline_source<double>(s, 0, "");
  ASSERT_TRUE(shared->shared());
  std::shared_ptr<const StepRecord<double>> held = shared->step(0);
  const auto want = own->step(0);
  ASSERT_FALSE(held->grads->tensors.empty());
  EXPECT_TRUE(buffer_detail::lent(held->grads->tensors[0].ptr()));  // read in place
  EXPECT_TRUE(buffer_detail::lent(shared->params()[0].ptr()));
  for (int64_t t = 1; t < 4; ++t) (void)shared->step(t);  // the ring's other three blocks
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // time for a producer that ignored the pin
  for (size_t p = 0; p < want->grads->tensors.size(); ++p)
    EXPECT_EQ(to_vector(held->grads->tensors[p].data), to_vector(want->grads->tensors[p].data)) << "tensor " << p;
  held.reset();
  for (int64_t t = 4; t < s.steps; ++t) EXPECT_EQ(shared->step(t)->step, t);
}

// A baseline that diverges at step t leaves the steps published before it readable: a rank still short of them
// reads them, and meets the divergence at step t, where every rank meets it. Issue 26's diverge_baseline said "rank
// 1 exited during the collective" in about 1 run of 8: rank 1 met the failure at a step the producer had published,
// exited with 4 and said nothing (rank 0 says it), while rank 0 waited for it in the step's exchange.
TEST(SharedBaselineFile, StepsPublishedBeforeADivergenceStayReadable) {
  Scenario s = load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/fsdp4.json");
  s.steps = 4, s.optim.lr = 1e100;
  const std::string path = ::testing::TempDir() + "parity-shared-diverge-" + std::to_string(::getpid());
  BaselineProducer producer(s, path, 1, 0);
  producer.start();
  // the producer's failure published before any step is read (what the slow rank met)
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* m = ::mmap(nullptr, shared_file::kHeader, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(m, MAP_FAILED);
  auto* h = static_cast<shared_file::Header*>(m);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (shared_file::ready_of(h).load() != shared_file::kFailed && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(shared_file::ready_of(h).load(), shared_file::kFailed) << "the baseline did not diverge";
  ASSERT_EQ(h->error_code, exit_code::diverged) << h->error;
  const int64_t readable = h->readable;
  ::munmap(m, shared_file::kHeader);
  ASSERT_GE(readable, 1) << "diverged before step 0 was published: nothing to read";
  auto reader = make_baseline_source<double>(s, 0, path);  // the initial parameters
  for (int64_t t = 0; t < readable; ++t) EXPECT_TRUE(std::isfinite(reader->step(t)->loss)) << "step " << t;
  EXPECT_THROW((void)reader->step(readable), DivergedError);
}

// The producer forms each step's sums over the whole model once per host and writes them into the
// step's block (family_sums.h StepSums, issue 43): every rank's verdict reads them instead of forming
// them itself. They are the sums a rank with a baseline of its own forms from the same step's
// gradient and parameters before and after it, bit for bit (weight decay and clipping on, so the
// taken gradient's sums have both terms), with the verdict's family groups.
TEST(SharedBaselineFile, EveryStepCarriesTheSumsARankWouldForm) {
  Scenario s = load_scenario(std::string(PARITY_SOURCE_DIR) + "/scenarios/fsdp4.json");
  s.steps = 4, s.optim.weight_decay = 0.01, s.optim.clip = 0.05;
  const std::string path = ::testing::TempDir() + "parity-shared-sums-" + std::to_string(::getpid());
  BaselineProducer producer(s, path, 1, 0);
  producer.start();
  auto shared = make_baseline_source<double>(s, 0, path);
  auto own = make_baseline_source<double>(s, 0, "");  // trained here, as PARITY_SHARED_BASELINE=0
  ASSERT_TRUE(shared->shared());
  ASSERT_FALSE(own->shared());
  const verdict_detail::VerdictLayout v = verdict_detail::verdict_layout(param_specs(s.model), s.model);
  bool clipped = false;
  for (int64_t t = 0; t < s.steps; ++t) {
    const std::vector<Tensor<double>> before = own->params();
    const auto mine = own->step(t);
    const auto read = shared->step(t);
    EXPECT_EQ(mine->sums, nullptr);  // a rank with its own baseline forms them (verdict_part.cpp sums_of)
    ASSERT_NE(read->sums, nullptr) << "step " << t;
    clipped = clipped || read->clip_coef < 1;
    const family_sums::StepSums want =
        family_sums::step_sums(mine->grads->tensors, before, own->params(), mine->clip_coef,
                               family_sums::moment_decay(s.optim), v.group_of, v.families.size());
    const family_sums::StepSums& got = *read->sums;
    EXPECT_TRUE(got.fits(mine->clip_coef, 0.01, v.group_of)) << "step " << t;
    EXPECT_EQ(got.grad_sq, want.grad_sq) << "step " << t;
    EXPECT_EQ(got.param_sq, want.param_sq) << "step " << t;
    EXPECT_EQ(got.update_sq, want.update_sq) << "step " << t;
    EXPECT_EQ(got.n, want.n) << "step " << t;
    EXPECT_EQ(got.taken_sq, want.taken_sq) << "step " << t;
  }
  EXPECT_TRUE(clipped);  // the clip coefficient entered some step's sums
}

}  // namespace
}  // namespace parity
