// The one job loop of `parity matrix` and `parity zoo`: child processes of this binary (a
// `parity run`, a `parity golden check`), each writing its output to a log file, at most N at
// a time, started in the order given. Each command prints its own progress from the callback,
// called once per job in the order the jobs finish; InOrder turns that into the jobs' order
// for a table that must not depend on timing. Unit-tested in tests/cli/jobs_test.cpp with a
// starter of its own (the commands pass start_self).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/output.h"

namespace parity::cli {

struct Job {
  std::vector<std::string> args;  // this binary's arguments: `parity ARGS...`
  std::string log;                // its stdout and stderr
  std::string what;               // names it when it cannot start ("zoo: tp_grad_not_summed")
};

struct JobEnd {
  int rc = -1;         // its exit code; 128 + N when signal N ended it (as a shell says)
  double seconds = 0;  // from its start to its reaping
};

// Starts a job's process and returns its pid (throws when it cannot).
using StartJob = std::function<pid_t(const Job&)>;
// Called as each job ends, in the order they end: its index in the list and how it ended.
using JobDone = std::function<void(size_t job, const JobEnd& end)>;

// Runs every job, at most at_once (>= 1) at a time, starting them in the order given; returns
// when all have ended. Children of this process that are not its jobs are reaped and ignored.
void run_jobs(const std::vector<Job>& jobs, int at_once, const StartJob& start, const JobDone& done);

// spawn_self(job.args, job.log, job.what) (cli/self.h): the starter of the commands.
pid_t start_self(const Job& job);

// A wait status as an exit code: the child's own, or 128 + the signal that ended it.
int exit_code(int wait_status);

// Where the jobs' reports and logs go: `out` (--out, checked and prepared: core/files.h, and
// held by `lock`, one writer per directory: core/output.h), or when it is "" a new temporary
// directory /tmp/parity-COMMAND-XXXXXX.
std::string jobs_dir(const std::string& out, const std::string& command, DirLock& lock);

// The default of --jobs: the number of CPUs (at least 1).
int cpu_jobs();

// Calls show(i) for 0, 1, 2, ... each as soon as it and every one before it are done: the
// table in the jobs' order, each row printed once the rows above it are.
class InOrder {
 public:
  InOrder(size_t n, std::function<void(size_t)> show) : done_(n, false), show_(std::move(show)) {}
  void done(size_t i);
  size_t shown() const { return next_; }

 private:
  std::vector<bool> done_;
  std::function<void(size_t)> show_;
  size_t next_ = 0;
};

}  // namespace parity::cli
