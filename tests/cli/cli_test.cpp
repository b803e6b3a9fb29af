// The `parity` binary as users call it: exit codes, messages, and the dump's contents.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "core/device.h"
#include "core/safetensors.h"
#include "harness/runner/baseline.h"
#include "harness/scenario/scenario.h"
#include "common/parity_cmd.h"

namespace parity {
namespace {

using test::parity_cmd;
using test::Result;

namespace fs = std::filesystem;

std::string tiny_path() { return std::string(PARITY_SOURCE_DIR) + "/scenarios/tiny.json"; }

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("parity_cli_test_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(Cli, RunPrintsEachStepBesideTheEntropyFloor) {
  Result r = parity_cmd("run " + tiny_path() + " --steps 3");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("entropy floor"), std::string::npos) << r.out;
  for (const char* row : {"\n     0 ", "\n     1 ", "\n     2 "})
    EXPECT_NE(r.out.find(row), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\n     3 "), std::string::npos) << r.out;
}

TEST(Cli, EverySubcommandAnswersHelp) {
  for (const char* sub : {"", "run ", "dump "}) {
    Result r = parity_cmd(std::string(sub) + "--help");
    EXPECT_EQ(r.code, 0) << sub << r.out;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << sub << r.out;
  }
}

// `parity --version` and `parity version` (issue 30): the version, the commit built, the
// backends and whether the CUDA kernels are built, as this test binary was configured.
TEST(Cli, VersionNamesVersionCommitBackendsAndCuda) {
  const Result r = parity_cmd("--version");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("^parity [0-9]+\\.[0-9]+\\.[0-9]+\ncommit: ([0-9a-f]{7,40}(-dirty)?"
                                                  "|unknown)\nbackends: gloo, mpi")))
      << r.out;
#ifdef PARITY_HAVE_CUDA
  EXPECT_NE(r.out.find("backends: gloo, mpi, nccl "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\ncuda: kernels built (CUDA "), std::string::npos) << r.out;
#else
  EXPECT_NE(r.out.find("backends: gloo, mpi (nccl not built)\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\ncuda: not built"), std::string::npos) << r.out;
#endif
  const Result sub = parity_cmd("version");
  EXPECT_EQ(sub.code, 0) << sub.out;
  EXPECT_EQ(sub.out, r.out);
}

// A mistyped subcommand or option is bad input (exit 2) named with the close names, not
// CLI11's "A subcommand is required"; nothing runs. A word close to nothing gets no guess.
TEST(Cli, MistypedCommandOrOptionIsExitTwoWithDidYouMean) {
  Result r = parity_cmd("matirx");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("parity: unknown command 'matirx'; did you mean 'matrix'?"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("A subcommand is required"), std::string::npos) << r.out;
  r = parity_cmd("run --stpes 3 " + tiny_path());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("parity run: unknown option '--stpes'; did you mean '--steps'?"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("entropy floor"), std::string::npos) << "it ran: " << r.out;
  r = parity_cmd("run " + tiny_path() + " --steps=3 --precison=fp32");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown option '--precison'; did you mean '--precision'?"), std::string::npos) << r.out;
  r = parity_cmd("ckpt inspetc x");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("parity ckpt: unknown command 'inspetc'; did you mean 'inspect'?"), std::string::npos) << r.out;
  r = parity_cmd("frobnicate");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("parity: unknown command 'frobnicate' (`parity help` lists the commands)"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("did you mean"), std::string::npos) << r.out;
}

// `parity help COMMAND` prints what `parity COMMAND --help` prints; `parity help` the top level.
TEST(Cli, HelpCommandPrintsWhatDashDashHelpPrints) {
  for (const std::string cmd : {"run", "matrix", "zoo", "ckpt inspect", "help"}) {
    const Result a = parity_cmd("help " + cmd), b = parity_cmd(cmd + " --help");
    EXPECT_EQ(a.code, 0) << cmd << a.out;
    EXPECT_EQ(b.code, 0) << cmd << b.out;
    EXPECT_NE(a.out.find("Usage"), std::string::npos) << cmd << a.out;
    EXPECT_EQ(a.out, b.out) << cmd;
  }
  const Result top = parity_cmd("help"), dash = parity_cmd("--help");
  EXPECT_EQ(top.code, 0) << top.out;
  EXPECT_EQ(top.out, dash.out);
  EXPECT_NE(top.out.find("matrix"), std::string::npos) << top.out;
  Result bad = parity_cmd("help matirx");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("parity: unknown command 'matirx'; did you mean 'matrix'?"), std::string::npos) << bad.out;
  bad = parity_cmd("help ckpt inspetc");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("parity ckpt: unknown command 'inspetc'; did you mean 'inspect'?"), std::string::npos)
      << bad.out;
}

// `parity help env`: every PARITY_* setting of core/knobs.h's table, one line each, with its default.
TEST(Cli, HelpEnvListsEverySetting) {
  const Result r = parity_cmd("help env");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* name : {"PARITY_INJECT", "PARITY_FAULT", "PARITY_COMM_TIMEOUT_MS", "PARITY_GLOO_SHM",
                           "PARITY_SHM_SPIN", "PARITY_CKPT_CRASH", "PARITY_RANK_START"})
    EXPECT_NE(r.out.find(std::string("\n") + name + " "), std::string::npos) << name << " not in:\n" << r.out;
  EXPECT_NE(r.out.find("PARITY_COMM_TIMEOUT_MS    60000"), std::string::npos) << r.out;
}

TEST(Cli, BadInputExitsTwoNamingPathAndRule) {
  fs::path d = temp_dir("bad");
  std::ofstream(d / "unknown.json") << R"({"model": {"vocab": 64, "bogus": 1}})";
  Result r = parity_cmd("run " + (d / "unknown.json").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("$.model.bogus"), std::string::npos) << r.out;
  std::ofstream(d / "heads.json") << R"({"model": {"dim": 16, "heads": 3}})";
  r = parity_cmd("run " + (d / "heads.json").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("$.model.heads"), std::string::npos) << r.out;
  r = parity_cmd("run " + (d / "missing.json").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("missing.json"), std::string::npos) << r.out;
  r = parity_cmd("run");  // no scenario argument
  EXPECT_EQ(r.code, 2) << r.out;
  fs::remove_all(d);
}

// "Done when": the dump of a 3-step run is complete and described by its manifest, and
// its contents are the baseline's.
TEST(Cli, DumpOfThreeStepsIsCompleteAndDescribedByItsManifest) {
  fs::path d = temp_dir("dump");
  Result r = parity_cmd("dump " + tiny_path() + " " + d.string() + " --steps 3");
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json m = nlohmann::json::parse(std::ifstream(d / "manifest.json"));
  ASSERT_EQ(m["files"].size(), 4u);  // init + 3 steps
  for (const auto& f : m["files"]) {
    SafetensorsFile st = SafetensorsFile::read((d / f["file"].get<std::string>()).string());
    EXPECT_EQ(st.names().size(), f["tensors"].size()) << f["file"];
    for (const auto& [name, desc] : f["tensors"].items()) {
      ASSERT_TRUE(st.contains(name)) << f["file"] << " lacks " << name;
      EXPECT_EQ(st.shape(name), desc["shape"].get<Shape>()) << name;
      EXPECT_EQ(dtype_name(st.dtype(name)), desc["dtype"].get<std::string>()) << name;
    }
  }
  // Against an independent baseline run: init, step-1 gradients and parameters.
  Scenario s = load_scenario(tiny_path());
  BaselineRun<double> run(s);
  SafetensorsFile init = SafetensorsFile::read((d / "init.safetensors").string());
  const auto& specs = run.model().params.specs;
  for (size_t p = 0; p < specs.size(); ++p)
    ASSERT_EQ(init.get<double>(specs[p].name).data, run.model().params.tensors[p].data) << specs[p].name;
  run.step(0);
  auto rec = run.step(1, KeepGrads::yes);
  SafetensorsFile s1 = SafetensorsFile::read((d / "step_000001.safetensors").string());
  EXPECT_EQ(s1.get<double>("loss").data[0], rec.loss);
  EXPECT_EQ(s1.get<int64_t>("inputs").data, rec.inputs);
  for (size_t p = 0; p < specs.size(); ++p) {
    ASSERT_EQ(s1.get<double>("grads." + specs[p].name).data, rec.grads->tensors[p].data) << specs[p].name;
    ASSERT_EQ(s1.get<double>("params." + specs[p].name).data, run.model().params.tensors[p].data) << specs[p].name;
  }
  EXPECT_EQ(s1.get<int64_t>("layers.1.moe.tokens_per_expert").data, rec.tokens_per_expert[0]);
  EXPECT_EQ(s1.get<double>("layers.1.moe.expert_bias").data, run.model().expert_bias[0]);
  EXPECT_EQ(m["steps"].size(), 3u);
  fs::remove_all(d);
}

// One host, gloo, the CPU: the ranks start by fork alone (proc/launch.h in_process) unless
// PARITY_RANK_START=exec. Both give the same report, every value but the timings, and the
// launcher's last line says which way the ranks started; any other value is bad input.
TEST(Cli, RanksStartedByForkAndByExecGiveTheSameReport) {
  const fs::path d = temp_dir("rank_start");
  const std::string scen = std::string(PARITY_SOURCE_DIR) + "/scenarios/fsdp4_tp2_ep2_etp2.json";
  Result fork = parity_cmd("run " + scen + " --report " + (d / "fork.json").string());
  ASSERT_EQ(fork.code, 0) << fork.out;
  EXPECT_NE(fork.out.find("(launcher wall clock, 8 ranks started by fork, exit 0)"), std::string::npos) << fork.out;
  setenv("PARITY_RANK_START", "exec", 1);
  Result exec = parity_cmd("run " + scen + " --report " + (d / "exec.json").string());
  setenv("PARITY_RANK_START", "sometimes", 1);
  Result bad = parity_cmd("run " + scen);
  unsetenv("PARITY_RANK_START");
  ASSERT_EQ(exec.code, 0) << exec.out;
  EXPECT_NE(exec.out.find("(launcher wall clock, 8 ranks started by exec, exit 0)"), std::string::npos) << exec.out;
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("PARITY_RANK_START: must be fork or exec, got 'sometimes'"), std::string::npos) << bad.out;
  auto values = [](const fs::path& p) {
    nlohmann::json r = nlohmann::json::parse(std::ifstream(p));
    r.erase("time_rank0");
    r.erase("time_slowest");
    return r;
  };
  const nlohmann::json a = values(d / "fork.json"), b = values(d / "exec.json");
  EXPECT_FALSE(a["rows"].empty());
  EXPECT_EQ(a, b);
  fs::remove_all(d);
}

}  // namespace
}  // namespace parity

namespace parity {
namespace {

// --device cuda: without a GPU nothing starts and the exit code is 77 (ctest's skip),
// never 0; with one, the layout runs on it and passes. A misspelt device is bad input.
TEST(Cli, DeviceCudaRunsOnTheGpuOrExits77NamingWhy) {
  const std::string tp2 = std::string(PARITY_SOURCE_DIR) + "/scenarios/tp2.json";
  Result r = parity_cmd("run " + tp2 + " --device cuda --steps 2");
  if (cuda_unavailable_reason().empty()) {
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("verdict: PASS"), std::string::npos) << r.out;
  } else {
    EXPECT_EQ(r.code, 77) << r.out;
    EXPECT_NE(r.out.find("not run: layout.device cuda"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("rank"), std::string::npos) << "ranks started: " << r.out;
  }
  Result bad = parity_cmd("run " + tp2 + " --device tpu");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--device: tpu not in {cpu,cuda,gpu}"), std::string::npos) << bad.out;
}

TEST(Cli, NcclBackendWithoutAGpuIsRefusedBeforeLaunchWith77) {
  if (cuda_unavailable_reason().empty()) GTEST_SKIP() << "a GPU is here: gpu.nccl_layouts covers nccl";
  Result r = parity_cmd("run " + std::string(PARITY_SOURCE_DIR) + "/scenarios/tp2.json --backend nccl --steps 1");
  EXPECT_EQ(r.code, 77) << r.out;
  EXPECT_NE(r.out.find("backend nccl"), std::string::npos) << r.out;
}

TEST(Cli, MatrixOnCudaWithoutAGpuRunsNothingAndExits77) {
  if (cuda_unavailable_reason().empty()) GTEST_SKIP() << "a GPU is here: gpu.matrix runs the matrix on it";
  Result r = parity_cmd("matrix --device cuda " + std::string(PARITY_SOURCE_DIR) + "/scenarios/tp2.json");
  EXPECT_EQ(r.code, 77) << r.out;
  EXPECT_EQ(r.out.find("[1/"), std::string::npos) << "a scenario started: " << r.out;
}

}  // namespace
}  // namespace parity
