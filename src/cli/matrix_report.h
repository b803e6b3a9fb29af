// What `parity matrix` knows once its jobs are done, and the reports it writes from that:
// the JUnit XML that CI systems read and the markdown summary that teams read. Everything
// here is pure (text in, text out; no files, no processes), so the writers are unit-tested
// on hand-made entries (tests/cli/matrix_report_test.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include "cli/junit.h"

namespace parity::cli {

// One child process of the matrix: `parity run` or `parity golden check`.
struct MatrixJob {
  int rc = -1;          // exit code; -1: not run (world 1 has no run, no --golden has no check)
  double seconds = 0;
  std::string log;      // its output file
  std::string detail;   // the lines of that output that explain a failure (failure_lines)
};

struct MatrixEntry {
  std::string file, name;
  int64_t world = 1;
  std::string layout;       // "dps 2 x tp 2, ep 2", from the scenario
  std::string golden_file;  // its golden curves: ../golden/<the file's name>.json beside the file
  MatrixJob run, golden;
  nlohmann::json report;  // parity run --report, when it wrote one
};

// "skipped" (world 1), "PASS", "FAIL", "not run" (exit 77), "ERROR (exit N)".
std::string run_verdict(const MatrixEntry& e);
// "-" (not checked), "PASS", "FAIL", "ERROR (exit N)".
std::string golden_verdict(const MatrixEntry& e);
// Whether the entry counts against the matrix: a run or a golden check that did not pass
// (77, not run, counts: a matrix that ran nothing proves nothing).
bool run_failed(const MatrixEntry& e);
bool golden_failed(const MatrixEntry& e);

// From a verdict report: the closest any row came to its tolerance (norm_rel / tol; 0 when
// no row has one) and the root of a failure in one line, "" when none
// ("root grad router x2 at step 0 (2 (= tp)) + 1 more at that step, 20 consequences").
struct ReportSummary {
  double worst_over_tol = 0;
  std::string root;
};
ReportSummary summarize_report(const nlohmann::json& report);

// The lines of a job's output worth quoting in a failure: for a run its root, verdict and
// error lines and at most max_lines FAIL rows; for a golden check at most max_lines: its FAIL
// line and the values that differ.
std::string failure_lines(std::string_view log_text, bool golden, int max_lines = 40);


// One <testsuite>: a testcase per run (classname "verdict"; world 1 and exit 77 <skipped/>)
// and per golden check (classname "golden"), a <failure> with a one-line message and the
// failure's lines as text exactly when that run or check failed.
// `suite` names the run (junit_suite: its time, host and properties); with bugs injected on
// purpose (`on_purpose`, RunContext::on_purpose) every failure's message starts with it.
std::string junit_xml(const std::vector<MatrixEntry>& entries, double wall_seconds, const JunitSuite& suite = {},
                      const std::string& on_purpose = "");

struct SummaryInfo {
  std::string title;      // --summary-title, "" for none
  std::string commit;     // PARITY_COMMIT or GITHUB_SHA, "" when unknown
  std::string date;       // "2025-01-31 12:00 UTC"
  std::string logs_link;  // the logs' directory relative to the summary file (absolute when temporary)
  bool logs_temporary = false;  // no --out: the logs sit in a temporary directory, not beside the summary
  std::string on_purpose;  // RunContext::on_purpose(): bugs or faults injected on purpose, "" none
  std::vector<std::pair<std::string, std::string>> plots;  // group, figure stem relative to the summary
  // Links to the logs and plots, relative to the summary (`--summary-links relative`, for the
  // summary read beside them); false (`none`): the same paths as text and no images, for a
  // place the files are not, a CI step summary ($GITHUB_STEP_SUMMARY).
  bool links = true;
  bool golden = false;    // whether golden checks ran (the column is shown either way)
  double wall_seconds = 0;
};
// Markdown: the verdict as its first line (a heading; "(injected on purpose)" when bugs were),
// commit and counts, failures named, then one row per scenario (scenario, world, layout,
// verdict, root of a failure, worst/tol, golden, time) with links to the logs (info.links):
// the rows that failed in a table of their own, the rest collapsed (<details>), then the plots.
std::string summary_markdown(const std::vector<MatrixEntry>& entries, const SummaryInfo& info);

// The counts and verdict both the table and the reports state.
struct MatrixCounts {
  int passed = 0, failed = 0, skipped = 0, golden_passed = 0, golden_failed = 0;
  bool pass() const { return failed == 0 && golden_failed == 0 && passed + golden_passed > 0; }
};
MatrixCounts count(const std::vector<MatrixEntry>& entries);

// The figure a scenario's golden curves go in: its name's family (fsdp2_tp2 -> fsdp,
// hsdp2x2 -> hsdp, w8_tp2_ep4 -> world_ep, tiny and small -> one_device).
std::string plot_group(const std::string& scenario_name);

}  // namespace parity::cli
