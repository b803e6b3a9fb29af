// The one run protocol (docs/architecture.md "Data flow"): what a command asks of a set of
// ranks, as one record. Every command that starts ranks (`parity run`, `golden`, `bench
// comm`) fills a RunRequest and hands it to launch() (harness/runner/launch_run.h); the
// launcher writes it as a JSON file and each rank runs `parity rank FILE`, which reads it
// back (rank_main.h). No value travels as command-line text: a comment of run_cmd.cpp once
// recorded why (--lr 1e-7 reached the ranks as 0), and the file replays by hand:
// `parity launch -n W -- parity rank FILE`.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "comm/bench.h"
#include "mesh/run_config.h"

namespace parity {

// What each rank does.
enum class RankJob {
  verdict,     // baseline and layout side by side; rank 0 prints the verdict (and writes --report)
  curves,      // the layout's golden curves; rank 0 writes them to `out`
  comm_bench,  // nccl-tests columns for every collective; no scenario
};

// The command line's overrides of a scenario file, applied by resolve_scenario.
struct Overrides {
  int64_t steps = -1;
  std::string precision, backend, device, optim;  // "" keeps the file's
  double lr = -1;
  bool trajectory = false;  // --trajectory: the free-running verdict (Scenario::trajectory)
};

// The scenario file with `o` applied (to the resume layout too, where the key is the
// layout's), checked once as a whole: ConfigError (exit 2) names the file and the JSON path.
// proof: where given, the main layout's proof of that check (a rank that runs it: RunRequest::valid).
Scenario resolve_scenario(const std::string& path, const Overrides& o, std::optional<ValidLayout>* proof = nullptr);

struct RunRequest {
  RankJob job = RankJob::verdict;
  // verdict and curves: the resolved scenario, with the layout of the phase that runs; a
  // request holds no resume object (each phase of a resume check is a request of its own).
  std::optional<Scenario> scenario;
  // verdict: rank 0 writes the report to `report` ("" none); the layout saves its state
  // after save_at steps into ckpt (-1 none) and/or starts from the checkpoint in resume.
  std::string report;
  int64_t save_at = -1;
  std::string ckpt, resume;
  bool trace = false;  // --trace: the verdict's traced step even when it passes (harness/runner/trace_run.h)
  std::string carry;  // a resume check's verdict carry directory (harness/runner/verdict_carry.h), "" none
  std::string out;  // curves: where rank 0 writes them
  // comm_bench: the world, its backend, the element type and the sizes.
  int64_t bench_world = 1;
  std::string bench_backend = "gloo", bench_dtype = "fp32";
  comm::CommBenchOptions bench;
  // The rank side: --timeout given to a rank itself (overrides PARITY_COMM_TIMEOUT_MS); 0:
  // the launcher's, through the environment.
  double rank_timeout_s = 0;
  // What else a rank needs, filled by the launcher (launch) so that the file replays the run:
  // the named bugs (--inject / PARITY_INJECT, "a,b"), the fault (PARITY_FAULT's syntax), the
  // launch's wall clock (ns since the epoch: the startup time a verdict prints) and the host's
  // shared baseline file (a rank whose file is gone or another run's trains its own). Each is
  // written only where set, so a request without them reads as before.
  std::string inject, fault;
  int64_t launch_t0_ns = 0;
  std::string baseline_file;

  // A rank's proof that scenario->layout met the rules: read_request's validation (not written;
  // a request built in memory has none). ParallelRun takes it and checks nothing again.
  std::optional<ValidLayout> valid;

  // The launch (not written to the file: the launcher's own).
  double timeout_s = 60;   // per collective
  double deadline_s = 0;   // wall clock of the launch (0: none)
  std::string log_dir;     // each rank's output in DIR/rank<r>.log; the request kept as DIR/request.json
  int nnodes = 1, node_rank = 0;
  std::string master;
  int64_t first_block = 0;  // verdict: the shared baseline's first step block (a resumed phase)

  int64_t world() const;                    // the ranks the request needs
  comm::Backend backend() const;
};

// The file's JSON (the rank-side fields and the scenario, scenario_to_json) and back:
// read_request checks the keys (ConfigError naming FILE and the path).
nlohmann::json request_json(const RunRequest& r);
RunRequest read_request(const std::string& path);

std::string_view rank_job_name(RankJob j);  // "verdict", "curves", "comm_bench"

}  // namespace parity
