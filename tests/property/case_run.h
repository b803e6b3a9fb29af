// Running one drawn case as real rank processes, like a user would: the case is written as a
// scenario file and `parity run FILE --report R.json` launches layout.world ranks; the
// report's rows are the verdict (docs/verdict.md). A failing case is saved as a scenario
// file under $PARITY_PROPERTY_OUT (default ./property-failures), overwritten while
// RapidCheck shrinks, so the file left is the shrunk case; the message names the file and
// the `parity run` line that replays it.
#pragma once
#include <rapidcheck.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "generators.h"
#include "harness/runner/baseline.h"
#include "harness/scenario/scenario.h"
#include "mesh/run_config.h"

namespace parity {
// How RapidCheck prints a drawn case in its failure message (found by ADL): the scenario file.
inline void showValue(const Scenario& s, std::ostream& os) { os << scenario_to_json(s).dump(2); }
}  // namespace parity

namespace parity::property {

inline void showValue(const CkptCase& c, std::ostream& os) {
  Scenario loader = c.save;
  loader.layout = c.load;
  os << "saved under:\n" << scenario_to_json(c.save).dump(2) << "\nloaded under layout "
     << scenario_to_json(loader)["layout"].dump();
}

// CI runs a fixed, small number of cases per property, from a fixed seed, so the gate is
// reproducible and stays within its budget (about 2 minutes on 2 cores); ci/soak sets
// RC_PARAMS itself (thousands of cases, a seed from the clock) to explore.
// Set before RapidCheck reads its configuration, which it does on the first check.
inline const bool kDefaultRcParams = [] {
  ::setenv("RC_PARAMS", "max_success=15 seed=20261122", 0);
  return true;
}();

inline std::string parity_binary() {
  const char* b = std::getenv("PARITY_PROPERTY_BINARY");  // a locally broken build, say
  return b != nullptr && *b != '\0' ? b : PARITY_BINARY;
}

inline std::filesystem::path failure_dir() {
  const char* o = std::getenv("PARITY_PROPERTY_OUT");
  std::filesystem::path p = o != nullptr && *o != '\0' ? o : "property-failures";
  std::filesystem::create_directories(p);
  return std::filesystem::absolute(p);
}

// One scratch directory per test process, for case files, reports and logs; removed when
// the process ends (a failing case is kept in failure_dir(), not here: every run of the
// property suites used to leave one of these in /tmp).
struct ScratchDir {
  std::filesystem::path path;
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};
inline const std::filesystem::path& work_dir() {
  static const ScratchDir dir{[] {
    std::string t = (std::filesystem::temp_directory_path() / "parity-prop-XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    return std::filesystem::path(t);
  }()};
  return dir.path;
}

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct CaseRun {
  int rc = -1;                // parity run's exit code: 0 pass, 1 parity failure, 2 bad input
  nlohmann::json report;      // the --report JSON (null when none was written)
  std::string log;            // what parity run printed
  std::string scenario_file;  // the case as a file
  std::string command;        // the command line that ran it
};

// Writes the case to WORK/TAG.json and runs `parity run` on it; `extra` are more options
// (--backend mpi, say). The fault in PARITY_FAULT, if any, is inherited.
inline CaseRun run_case(const Scenario& s, const std::string& tag, const std::string& extra = "") {
  CaseRun r;
  const auto dir = work_dir();
  r.scenario_file = (dir / (tag + ".json")).string();
  const std::string report = (dir / (tag + ".report.json")).string(), log = (dir / (tag + ".log")).string();
  write_text(r.scenario_file, scenario_to_json(s).dump(2) + "\n");
  std::filesystem::remove(report);
  r.command = parity_binary() + " run " + r.scenario_file + " --report " + report + " --timeout 120" +
              (extra.empty() ? "" : " " + extra);
  const int st = std::system((r.command + " > " + log + " 2>&1").c_str());
  r.rc = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.log = read_text(log);
  if (std::filesystem::exists(report)) r.report = nlohmann::json::parse(read_text(report));
  return r;
}

// The rows a property judges: quantity (and subject, "" = any).
struct RowSel {
  std::string quantity, subject;
};

inline bool selected(const nlohmann::json& row, const std::vector<RowSel>& sel) {
  for (const RowSel& s : sel)
    if (row["quantity"] == s.quantity && (s.subject.empty() || row["subject"] == s.subject)) return true;
  return false;
}

inline std::string num_str(const nlohmann::json& x) {
  if (x.is_string()) return x.get<std::string>();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", x.get<double>());
  return buf;
}

// "" when the run produced a report and every selected row is within tolerance; otherwise
// the failing rows (verdict, quantity, subject, norm_rel, scale ratio, worst element) or
// why there is no verdict at all.
inline std::string failing_rows(const CaseRun& r, const std::vector<RowSel>& sel) {
  if (r.report.is_null() || (r.rc != 0 && r.rc != 1))
    return "no verdict: parity run exited " + std::to_string(r.rc) + "\n" + r.log.substr(0, 2000);
  std::string bad;
  for (const auto& row : r.report["rows"]) {
    if (!selected(row, sel) || row["verdict"] != "FAIL") continue;
    bad += "FAIL " + row["quantity"].get<std::string>() + " " + row["subject"].get<std::string>() + ": norm_rel " +
           num_str(row["norm_rel"]) + ", scale " + num_str(row["scale_ratio"]) + ", worst " +
           row["worst"]["name"].get<std::string>() + " rank " + std::to_string(row["worst"]["rank"].get<int>()) + "\n";
  }
  return bad;
}

// A routing decision within rounding of a tie: the layouts may then legitimately differ
// downstream, so such a case is discarded (RC_PRE), not failed.
inline bool has_near_tie(const CaseRun& r) {
  if (r.report.is_null()) return false;
  for (const auto& row : r.report["rows"])
    if (row["verdict"] == "near-tie") return true;
  return false;
}

// Saves the failing case (the shrunk one, once RapidCheck is done) and logs how to replay it.
// `replay` replaces the default `parity run FILE` line (a property of several runs).
inline void record_failure(const std::string& property, const Scenario& s, const CaseRun& r,
                           const std::string& why, const std::string& replay = "") {
  const auto dir = failure_dir();
  const auto file = dir / (property + ".json");
  write_text(file, scenario_to_json(s).dump(2) + "\n");
  write_text(dir / (property + ".log"), r.command + "\n" + r.log);
  const char* fault = std::getenv("PARITY_FAULT");
  const std::string env = fault != nullptr && *fault != '\0' ? std::string("PARITY_FAULT=") + fault + " " : "";
  RC_LOG() << "failing case written to " << file.string() << "\n"
           << "replay: " << (replay.empty() ? env + parity_binary() + " run " + file.string() : replay) << "\n"
           << why;
}

// Judges the selected rows of one run; on failure records the case. "" when they pass.
inline std::string judge(const std::string& property, const Scenario& s, const CaseRun& r,
                         const std::vector<RowSel>& sel) {
  const std::string bad = failing_rows(r, sel);
  if (!bad.empty()) record_failure(property, s, r, bad);
  return bad;
}

// Whether some expert of some MoE layer receives no token in some step of the baseline.
inline bool has_empty_expert(const Scenario& s) {
  if (s.model.moe_layers() == 0) return false;
  Scenario b = s;
  b.model.set_precision({DType::f64, Low::none, Low::none});
  BaselineRun<double> run(b);
  for (int64_t t = 0; t < s.steps; ++t)
    for (const auto& per_layer : run.step(t).tokens_per_expert)
      for (int64_t n : per_layer)
        if (n == 0) return true;
  return false;
}

// Per-dimension coverage over every case this process ran (shrinking included), printed at
// exit beside RapidCheck's combined RC_CLASSIFY table so each dimension's share is readable.
struct Coverage {
  int cases = 0, folding[4] = {0, 0, 0, 0}, uneven = 0, empty_shard = 0, empty_expert = 0, sp = 0, fp32 = 0,
      mpi = 0, moe = 0, uneven_batch = 0, empty_rank = 0, deepspeed = 0, free_etp = 0;
  ~Coverage() {
    if (cases == 0) return;
    std::printf("coverage over %d cases: dense only %d, dp2ep %d, tp2ep %d, cross-lane %d; uneven shards %d, empty "
                "shards %d, empty experts %d, SP %d, MoE %d, fp32 %d, mpi %d; uneven batch %d, rank with no "
                "sequence %d; deepspeed order %d, etp not 1 or tp %d\n",
                cases, folding[0], folding[1], folding[2], folding[3], uneven, empty_shard, empty_expert, sp, moe,
                fp32, mpi, uneven_batch, empty_rank, deepspeed, free_etp);
  }
};
inline Coverage coverage;

// RC_CLASSIFY: folding mode, rank order, etp outside {1, tp}, uneven shards, experts with
// no tokens, sequence parallel, uneven batches and ranks with no sequence of a micro-batch.
inline void classify_case(const Scenario& s) {
  const Folding f = folding_of(s.layout);
  RC_CLASSIFY(f == Folding::dense, "dense only");
  RC_CLASSIFY(f == Folding::dp2ep, "dp2ep");
  RC_CLASSIFY(f == Folding::tp2ep, "tp2ep");
  RC_CLASSIFY(f == Folding::cross_lane, "cross-lane");
  RC_CLASSIFY(s.layout.order == RankOrder::deepspeed, "deepspeed order");
  RC_CLASSIFY(free_etp(s.layout), "etp not 1 or tp");
  const ShardShape sh = shard_shape(s);
  const bool empty_expert = has_empty_expert(s);
  RC_CLASSIFY(sh.uneven, "uneven shards");
  RC_CLASSIFY(empty_expert, "empty experts");
  RC_CLASSIFY(s.layout.sp, "SP");
  const BatchShape bs = batch_shape(s.model, s.layout);
  RC_CLASSIFY(bs.uneven, "uneven batch");
  RC_CLASSIFY(bs.empty_rank, "rank with no sequence");
  coverage.uneven_batch += bs.uneven, coverage.empty_rank += bs.empty_rank;
  RC_CLASSIFY(fsdp_off_dim0(s.layout, s.model), "FSDP on a dimension other than 0");
  RC_CLASSIFY(s.layout.cp > 1, "CP");
  RC_CLASSIFY(s.model.store == Low::bf16, "bf16");
  RC_CLASSIFY(s.layout.cp > 1 && s.layout.order == RankOrder::deepspeed, "CP with the deepspeed order");
  ++coverage.cases, ++coverage.folding[static_cast<int>(f)];
  coverage.uneven += sh.uneven, coverage.empty_shard += sh.empty, coverage.empty_expert += empty_expert;
  coverage.sp += s.layout.sp, coverage.fp32 += s.model.dtype == DType::f32,
      coverage.mpi += s.layout.backend == comm::Backend::mpi;
  coverage.moe += s.model.moe_layers() > 0;
  coverage.deepspeed += s.layout.order == RankOrder::deepspeed, coverage.free_etp += free_etp(s.layout);
}

}  // namespace parity::property
