#include "proc/mpi_ranks.h"

#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>

#include "comm/diagnose.h"

namespace parity::proc {

using comm::proc_stat_fields;

namespace {

// The children of every thread of `pid` (the thread that forks the ranks is not always the
// main one); empty when /proc has no children files (a kernel without CONFIG_PROC_CHILDREN).
std::set<pid_t> children_of(pid_t pid) {
  std::set<pid_t> out;
  std::error_code ec;
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& t : std::filesystem::directory_iterator(task, ec)) {
    std::ifstream f(t.path() / "children");
    for (long c; f >> c;) out.insert(static_cast<pid_t>(c));
  }
  return out;
}

// OMPI_COMM_WORLD_RANK from the process's environment (set by mpirun before its exec); -1
// when unreadable or not there (yet: a child between fork and exec).
int mpi_rank_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  const std::string env((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  static const std::string key = "OMPI_COMM_WORLD_RANK=";
  for (size_t at = 0; at < env.size();) {
    const size_t end = env.find('\0', at);
    const std::string_view e(env.data() + at, (end == std::string::npos ? env.size() : end) - at);
    if (e.substr(0, key.size()) == key) return std::atoi(std::string(e.substr(key.size())).c_str());
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return -1;
}

}  // namespace

void MpiRankWatch::look(clock::time_point now) {
  if (now - last_look_ < kLookEvery) return;
  last_look_ = now;
  for (const pid_t c : children_of(mpirun_)) {
    const auto f = proc_stat_fields(c);
    if (f.empty() || f[0].empty()) continue;
    Seen& s = ranks_[c];
    if (s.rank < 0) s.rank = mpi_rank_of(c);
    if (s.start.empty() && f.size() > 19) s.start = f[19];
    const bool stopped = f[0][0] == 'T' || f[0][0] == 't';
    if (!stopped) {  // the last stop's span is kept: stopped_at judges whether it is recent
      s.last_running = now;
      continue;
    }
    // A look that finds it stopped again after a look that found it running starts a new span.
    if (s.stopped_looks == 0 || s.stop_last < s.last_running) s.stopped_looks = 0, s.stop_first = now;
    ++s.stopped_looks;
    s.stop_last = now;
  }
}

std::optional<MpiRankWatch::Stopped> MpiRankWatch::stopped_at(clock::time_point failed_at,
                                                              std::chrono::milliseconds slack) const {
  std::optional<Stopped> best;
  for (const auto& [pid, s] : ranks_) {
    if (s.rank < 0 || s.stopped_looks < 2 || s.stop_first > failed_at || s.stop_last < failed_at - slack) continue;
    const auto span = std::chrono::duration_cast<std::chrono::milliseconds>(s.stop_last - s.stop_first);
    if (!best || span > best->for_at_least) best = Stopped{s.rank, pid, span};
  }
  return best;
}

std::optional<MpiRankWatch::Stopped> MpiRankWatch::stopped_longer_than(std::chrono::milliseconds span) const {
  for (const auto& [pid, s] : ranks_) {
    const auto lasted = std::chrono::duration_cast<std::chrono::milliseconds>(s.stop_last - s.stop_first);
    if (s.rank >= 0 && s.stopped_looks >= 2 && s.stop_last == last_look_ && lasted >= span)
      return Stopped{s.rank, pid, lasted};
  }
  return std::nullopt;
}

void MpiRankWatch::kill_survivors() const {
  for (const auto& [pid, s] : ranks_) {
    const auto f = proc_stat_fields(pid);
    if (f.size() > 19 && !s.start.empty() && f[19] == s.start && f[0] != "Z") ::kill(pid, SIGKILL);
  }
}

}  // namespace parity::proc
