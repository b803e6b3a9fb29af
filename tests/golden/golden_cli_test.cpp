// `parity golden check` through the real binary: the shipped golden passes, and it fails, with
// the step and the way to regenerate, when the golden is perturbed, stale or missing. These
// are the proof that the golden checks can fire (ARCHITECTURE.md: no check that cannot).
#include <cstdio>
#include <filesystem>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "harness/golden/golden.h"

namespace parity {
namespace {

namespace fs = std::filesystem;

struct Result {
  int rc = -1;
  std::string out;
};

Result run(const std::string& args) {
  const std::string cmd = std::string(PARITY_BINARY) + " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return r;
}

std::string scenario(const std::string& name) {
  return std::string(PARITY_SOURCE_DIR) + "/scenarios/" + name + ".json";
}
std::string golden(const std::string& name) { return std::string(PARITY_SOURCE_DIR) + "/golden/" + name + ".json"; }

class GoldenCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("parity_golden_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A golden copied into the temporary directory, changed by `edit`.
  template <class F> std::string altered(const std::string& name, F edit) {
    Golden g = load_golden(golden(name));
    edit(g);
    save_golden((dir_ / (name + ".json")).string(), g);
    return "--golden-dir " + dir_.string();
  }
  fs::path dir_;
};

TEST_F(GoldenCli, ShippedGoldenPasses) {
  const Result r = run("golden check " + scenario("fsdp2") + " --backend mpi");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("golden check fsdp2: PASS"), std::string::npos) << r.out;
}

// Several scenarios: each checked by a process of its own, -j at a time, the output in the order
// given whatever order they finish in, then one verdict line; one wrong golden fails the whole.
TEST_F(GoldenCli, SeveralScenariosGiveTheirLinesInOrderAndOneVerdict) {
  const std::string dir = altered("tp2", [](Golden& g) { g.baseline.loss[0] *= 1 + 1e-7; });
  fs::copy_file(golden("tiny"), dir_ / "tiny.json");
  const Result r = run("golden check " + scenario("tiny") + " " + scenario("tp2") + " -j 2 " + dir);
  EXPECT_EQ(r.rc, 1) << r.out;
  const size_t tiny = r.out.find("golden check tiny: PASS"), tp2 = r.out.find("golden check tp2: FAIL: 1 of");
  ASSERT_NE(tiny, std::string::npos) << r.out;
  ASSERT_NE(tp2, std::string::npos) << r.out;
  EXPECT_LT(tiny, tp2) << r.out;
  EXPECT_NE(r.out.find("\ngolden verdict: FAIL: 2 scenarios, 1 passed, 1 failed, "), std::string::npos) << r.out;
  // the control: both goldens as shipped
  fs::copy_file(golden("tp2"), dir_ / "tp2.json", fs::copy_options::overwrite_existing);
  const Result ok = run("golden check " + scenario("tiny") + " " + scenario("tp2") + " -j 2 " + dir);
  EXPECT_EQ(ok.rc, 0) << ok.out;
  EXPECT_NE(ok.out.find("\ngolden verdict: PASS: 2 scenarios, 2 passed, 0 failed, "), std::string::npos) << ok.out;
}

// The suite's total (issue 43): each child hands its CPU time and pins to the parent, which sums what was
// compared on this machine (goldens pinned here, generously, so that any machine passes).
TEST_F(GoldenCli, SeveralScenariosTotalTheirCpuTime) {
  const auto here = [](Golden& g) {
    ASSERT_TRUE(g.perf.has_value());
    g.perf->machine = machine_name(), g.perf->cpu_s = 50, g.perf->ranks_cpu_s = 50;
    for (double& m : g.perf->peak_rss_mib) m = 1e5;
  };
  const std::string dir = altered("tp2", here);
  altered("tiny", here);
  const Result r = run("golden check " + scenario("tiny") + " " + scenario("tp2") + " -j 2 " + dir);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("\nperf total PASS: cpu "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" over 2 of 2 scenarios compared on this machine, pinned 200.00 s; limit 322.00 s"),
            std::string::npos)
      << r.out;
  const Result off = run("golden check " + scenario("tiny") + " " + scenario("tp2") + " -j 2 --no-perf " + dir);
  EXPECT_EQ(off.rc, 0) << off.out;
  EXPECT_EQ(off.out.find("perf total"), std::string::npos) << "nothing compared, no total: " << off.out;
}

TEST_F(GoldenCli, PerturbedLayoutLossFailsAtItsStep) {
  const std::string dir = altered("fsdp2", [](Golden& g) { g.layout_curves->loss[3] *= 1 + 1e-7; });
  const Result r = run("golden check " + scenario("fsdp2") + " --backend mpi " + dir);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("golden check fsdp2: FAIL: 1 of"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layout   loss                       step   3: got"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parity golden update"), std::string::npos) << r.out;
}

TEST_F(GoldenCli, PerturbedTokenCountFailsExactly) {
  const std::string dir = altered("tiny", [](Golden& g) {
    auto& c = g.baseline.tokens_per_expert.at(0).at(5);
    c.at(0) += 1, c.at(1) -= 1;
  });
  const Result r = run("golden check " + scenario("tiny") + " " + dir);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("baseline tokens_per_expert.layer1   step   5"), std::string::npos) << r.out;
}

TEST_F(GoldenCli, StaleHashFailsWithoutRunningAndSaysHowToRegenerate) {
  const std::string dir = altered("fsdp2", [](Golden& g) { g.scenario_hash = "fnv1a64:0000000000000000"; });
  const Result r = run("golden check " + scenario("fsdp2") + " " + dir);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("made from another version of the scenario"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parity golden update " + scenario("fsdp2")), std::string::npos) << r.out;
}

TEST_F(GoldenCli, MissingGoldenFails) {
  const Result r = run("golden check " + scenario("fsdp2") + " --golden-dir " + dir_.string());
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("no golden file"), std::string::npos) << r.out;
}

TEST_F(GoldenCli, UpdateWritesWhatCheckAccepts) {
  const Result up = run("golden update " + scenario("tiny") + " --golden-dir " + dir_.string());
  ASSERT_EQ(up.rc, 0) << up.out;
  const Result r = run("golden check " + scenario("tiny") + " --golden-dir " + dir_.string());
  EXPECT_EQ(r.rc, 0) << r.out;
  // The same values as the shipped golden (only the commit may differ).
  Golden a = load_golden((dir_ / "tiny.json").string()), b = load_golden(golden("tiny"));
  a.commit = b.commit;
  ASSERT_TRUE(a.perf.has_value()) << "update pins the time and memory";
  EXPECT_EQ(a.perf->machine, machine_name());
  a.perf = b.perf;  // measured, not computed: the check's band judges them
  EXPECT_EQ(golden_to_text(a), golden_to_text(b));
}

// Perf pinned on this machine is checked: a planted pin of 1 MiB peak memory is a memory jump
// for any real run (the band lets it reach 5.25 MiB; a parity process holds about 10); --no-perf
// skips it, saying so; a pin from another machine is not compared, and the line says why.
TEST_F(GoldenCli, PerfIsCheckedOnTheMachineThatPinnedItOnly) {
  const std::string dir = altered("tiny", [](Golden& g) { g.perf = Perf{machine_name(), 100, 100, 100, {1.0}}; });
  const Result r = run("golden check " + scenario("tiny") + " " + dir);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("golden check tiny: FAIL: 0 of"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("perf over its band: peak memory of the command"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--no-perf"), std::string::npos) << r.out;
  const Result off = run("golden check " + scenario("tiny") + " --no-perf " + dir);
  EXPECT_EQ(off.rc, 0) << off.out;
  EXPECT_NE(off.out.find("perf not checked (--no-perf)"), std::string::npos) << off.out;
  altered("tiny", [](Golden& g) { g.perf = Perf{"Another CPU x 96 CPUs", 100, 100, 100, {1.0}}; });
  const Result other = run("golden check " + scenario("tiny") + " " + dir);
  EXPECT_EQ(other.rc, 0) << other.out;
  EXPECT_NE(other.out.find("perf not checked: pinned on another machine (Another CPU x 96 CPUs; this is "),
            std::string::npos)
      << other.out;
  // the control: the same planted pin with room for this run passes
  altered("tiny", [](Golden& g) { g.perf = Perf{machine_name(), 100, 100, 100, {4096.0}}; });
  const Result fits = run("golden check " + scenario("tiny") + " " + dir);
  EXPECT_EQ(fits.rc, 0) << fits.out;
  EXPECT_NE(fits.out.find("perf PASS"), std::string::npos) << fits.out;
}

}  // namespace
}  // namespace parity
