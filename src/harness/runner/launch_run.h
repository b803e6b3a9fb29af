// The one launch (docs/architecture.md "Data flow"): every command that starts ranks hands
// its RunRequest (run_request.h) here. The request is written as a JSON file ($TMPDIR,
// removed after; DIR/request.json kept with --log-dir) and each rank runs
// `parity rank FILE` (rank_main.h). One baseline per host is trained here beside a verdict's
// ranks (shared_baseline.h). Ranks start by fork alone where they can (every rank on this
// host, gloo, the CPU; PARITY_RANK_START=exec forces fork + exec), else fork + exec, or
// mpirun for backend mpi (proc/launch.h).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "harness/runner/run_request.h"

namespace parity {

// How this binary starts itself as a rank: `self` is the command prefix (the binary's
// path), `in_process` runs a rank's argv inside a forked child (the CLI's own entry).
struct RankStart {
  std::vector<std::string> self;
  std::function<int(const std::vector<std::string>& argv)> in_process;
};

// Starts the request's ranks and waits for them: the exit code of proc::launch_main (core/
// exit_codes.h). `checks` runs after the request's own checks (the hosts split the world
// evenly, the device exists) and before anything starts. A verdict prints its "time to
// verdict" line.
int launch(const RunRequest& r, const RankStart& how, const std::function<void()>& checks = {});

// In a rank forked by launch (proc/launch.h LaunchOptions::in_process): the launcher's request
// when `path` is the file it wrote it to, in the memory the fork copied, so that the rank need not
// parse and validate it again (a seventh of an 8-rank run's rank-side CPU at one step); nullptr
// anywhere else (an exec'd rank, `parity rank FILE` by hand), which reads the file.
const RunRequest* inherited_request(const std::string& path);

// The request as a file for its ranks: keep_dir empty: $TMPDIR/parity-run-<pid>-<n>.json,
// removed by the destructor (and, after a kill -9, by a later launcher); else
// keep_dir/request.json, kept.
class RequestFile {
 public:
  RequestFile(const RunRequest& r, const std::string& keep_dir);
  ~RequestFile();
  RequestFile(const RequestFile&) = delete;
  RequestFile& operator=(const RequestFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool keep_ = false;
};

// Removes $TMPDIR/<prefix><pid>-* whose <pid> is no running process: what a launcher killed
// by kill -9 could not remove ("parity-run-", "parity-baseline-", "parity-golden-").
void sweep_stale_temp(const std::string& prefix);

}  // namespace parity
