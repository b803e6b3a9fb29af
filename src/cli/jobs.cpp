#include "cli/jobs.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include "cli/self.h"
#include "core/error.h"
#include "core/files.h"

namespace parity::cli {

using Clock = std::chrono::steady_clock;

void run_jobs(const std::vector<Job>& jobs, int at_once, const StartJob& start, const JobDone& done) {
  const size_t limit = static_cast<size_t>(std::max(1, at_once));
  std::map<pid_t, std::pair<size_t, Clock::time_point>> running;  // pid -> (job, start)
  size_t next = 0;
  for (;;) {
    while (running.size() < limit && next < jobs.size()) {
      running[start(jobs[next])] = {next, Clock::now()};
      ++next;
    }
    if (running.empty()) return;
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      throw IoError("jobs: waitpid failed with " + std::to_string(running.size()) + " jobs running");
    }
    const auto it = running.find(pid);
    if (it == running.end()) continue;  // a child that is not a job
    const auto [job, t0] = it->second;
    running.erase(it);
    done(job, {exit_code(st), std::chrono::duration<double>(Clock::now() - t0).count()});
  }
}

pid_t start_self(const Job& job) { return spawn_self(job.args, job.log, job.what); }

int exit_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0); }

std::string jobs_dir(const std::string& out, const std::string& command, DirLock& lock) {
  if (!out.empty()) {
    prepare_output_dir("--out", out);
    lock = DirLock("--out", out);
    return out;
  }
  std::string t = (std::filesystem::temp_directory_path() / ("parity-" + command + "-XXXXXX")).string();
  if (::mkdtemp(t.data()) == nullptr) throw IoError(command + ": cannot create a temporary directory");
  return t;
}

int cpu_jobs() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

void InOrder::done(size_t i) {
  done_.at(i) = true;
  while (next_ < done_.size() && done_[next_]) show_(next_++);
}

}  // namespace parity::cli
