#include "proc/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <regex>
#include <sstream>

#include "comm/diagnose.h"
#include "comm/gloo/shm_communicator.h"
#include "proc/launch_env.h"
#include "proc/leftovers.h"
#include "proc/mpi_ranks.h"
#include "core/error.h"
#include "core/exit_codes.h"
#include "core/resources.h"

extern char** environ;

namespace parity::proc {

using comm::Backend;
using comm::proc_stat_fields;
using comm::remove_shm_segments_of;

namespace {

using clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

// ---- signals: the handler only records the signal and wakes poll() ----
std::atomic<int> g_signal{0};
int g_wake_fd = -1;

void wake_poll() {
  if (g_wake_fd >= 0) {
    const int saved = errno;
    char c = 1;
    [[maybe_unused]] auto n = write(g_wake_fd, &c, 1);
    errno = saved;
  }
}

// A rank that ended wakes the launcher at once: its exit is reaped now, not at the end of
// a 50 ms poll (every run's time to verdict waited for it: the last rank closes its pipe
// just before it can be reaped, and then nothing is left to poll but the clock).
void on_child(int) { wake_poll(); }

void on_signal(int sig) {
  g_signal.store(sig);
  wake_poll();
}

// The signals that end a launch the way SIGTERM does: every rank stopped, the summary printed,
// the store directory and shared-memory segments removed, exit 128 + the signal. SIGHUP (the
// terminal or the ssh session closed), SIGQUIT (Ctrl-\\), SIGPIPE (`parity run ... | head -1`:
// the reader of stdout went away) once killed the launcher on the spot and left its ranks to
// PR_SET_PDEATHSIG, its segments and its store behind.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE};
constexpr size_t kNumStopSignals = sizeof kStopSignals / sizeof kStopSignals[0];

class SignalGuard {
 public:
  SignalGuard() {
    if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw IoError("launch: pipe failed: " + describe_errno(errno));
    g_signal.store(0);
    g_wake_fd = wake_[1];
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kNumStopSignals; ++i) sigaction(kStopSignals[i], &sa, &old_[i]);
    struct sigaction sc {};
    sc.sa_handler = on_child;
    sc.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    sigemptyset(&sc.sa_mask);
    sigaction(SIGCHLD, &sc, &old_chld_);
  }
  ~SignalGuard() {
    for (size_t i = 0; i < kNumStopSignals; ++i) sigaction(kStopSignals[i], &old_[i], nullptr);
    // After a SIGPIPE the reader is gone for good: what is still printed (the verdict, an
    // error) must fail quietly (EPIPE), not kill the process before its clean-up.
    if (pipe_broken_) signal(SIGPIPE, SIG_IGN);
    sigaction(SIGCHLD, &old_chld_, nullptr);
    g_wake_fd = -1;
    close(wake_[0]);
    close(wake_[1]);
  }
  int fd() const { return wake_[0]; }
  void saw(int sig) { pipe_broken_ = pipe_broken_ || sig == SIGPIPE; }

 private:
  int wake_[2];
  bool pipe_broken_ = false;
  struct sigaction old_[kNumStopSignals] {}, old_chld_ {};
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int fd = -1;              // read end of its stdout+stderr pipe
  std::string partial;      // an unfinished line
  std::optional<int> status;  // waitpid status once reaped
  bool stopped = false;     // signalled by the launcher
  bool hung = false;        // still running when the others had failed: the rank that did not answer
  std::string hung_state;   // its /proc state then
  std::ofstream log;
  std::string log_path;
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) +
                                  " (" + strsignal(WTERMSIG(status)) + ")";
  return "ended with status " + std::to_string(status);
}

// The scheduler state of a live child from /proc ("T (stopped)", "R (running)", ...), "" if unknown.
std::string proc_state(pid_t pid) {
  const auto f = proc_stat_fields(pid);
  if (f.empty() || f[0].empty()) return "";
  switch (f[0][0]) {
    case 'T': case 't': return "T (stopped)";
    case 'R': return "R (running)";
    case 'S': return "S (sleeping)";
    case 'D': return "D (in uninterruptible I/O)";
    case 'Z': return "Z (exited)";
    default: return f[0];
  }
}

// A wait status as a shell reports it: the exit code, or 128 + the signal.
int status_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return exit_code::parity_broken;
}

// The child's half of a fork-started rank (LaunchOptions::in_process): the launcher's
// signal handling undone, no descriptor of the launcher's left open, the rank's environment
// and name; runs the rank and exits with its code without the launcher's exit handlers.
[[noreturn]] void run_in_child(const LaunchOptions& o, int rank, const std::vector<std::string>& argv_s,
                               std::vector<char*>& envp) {
  signal(SIGCHLD, SIG_DFL);
  g_wake_fd = -1;
  close_range(3, ~0U, 0);
  environ = envp.data();
  const std::string name = "parity-rank" + std::to_string(rank);
  prctl(PR_SET_NAME, name.c_str());
  fresh_heap_top_after_fork();  // the rank's tensors on pages of its own, not the launcher's (core/resources.h)
  int rc = 1;
  try {
    rc = o.in_process(argv_s);
  } catch (const std::exception& e) {  // run_cli reports its own; this is a last resort
    std::fprintf(stderr, "parity: error: %s\n", e.what());
  } catch (...) {  // nothing may unwind out of the child into the launcher's code
    std::fprintf(stderr, "parity: error: an unknown exception ended the rank\n");
  }
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  _exit(rc);
}

// fork + exec with the environment prepared beforehand (nothing but async-signal-safe
// calls between fork and exec), or fork alone with o.in_process (run_in_child). The child
// dies with the launcher (PR_SET_PDEATHSIG).
pid_t spawn(const LaunchOptions& o, int rank, const std::vector<std::string>& argv_s,
            const std::vector<std::string>& env_s, int out_fd) {
  std::vector<char*> argv, envp;
  for (const auto& a : argv_s) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env_s) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0)
    throw IoError("launch: cannot start rank " + std::to_string(rank) + ": fork failed: " + describe_errno(errno));
  if (pid > 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
  dup2(out_fd, 1);
  dup2(out_fd, 2);
  for (int sig : kStopSignals) signal(sig, SIG_DFL);  // a fork-started rank keeps no handler of the launcher's
  if (o.in_process) run_in_child(o, rank, argv_s, envp);
  execvpe(argv[0], argv.data(), envp.data());
  const char msg[] = "parity launch: cannot execute the command\n";
  [[maybe_unused]] auto n = write(2, msg, sizeof(msg) - 1);
  _exit(127);
}

class Launcher {
 public:
  Launcher(const LaunchOptions& o, std::vector<std::string> command)
      : o_(o), command_(std::move(command)) {
    grace_ = o.grace.count() >= 0 ? o.grace : kDefaultGrace;
  }
  int run();

 private:
  void start_all();
  int wake_fd_ = -1;  // read end of the signal guard's pipe: a signal or a child's exit
  void pump(int timeout_ms);
  void emit(Child& c, std::string_view line);
  void reap();
  void stop_all(int sig);
  void summarise() const;
  int outcome() const;  // the exit code, once every rank is reaped
  void note_mpi_line(std::string_view line);
  bool blame_mpi_stopped(const Child& mpirun, int st);
  void blame_mpi_hang(clock::time_point now);
  // A rank killed by SIGKILL that the launcher did not send, while the kernel's OOM killer
  // killed: named as out of memory (core/resources.h oom_killer_note); "" otherwise.
  std::string oom_note(int st) const {
    const bool killed =
        (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) || (mpi_signal_ && mpi_how_.rfind("killed by signal 9 ", 0) == 0);
    return killed ? oom_killer_note(oom_before_) : "";
  }
  // Every rank still alive is stopped (SIGSTOP): none of them will report, stop now.
  bool only_stopped_left() const {
    for (const auto& c : children_)
      if (!c.status && proc_state(c.pid).rfind("T ", 0) != 0) return false;
    return true;
  }
  // A live rank in state T (stopped), if any (not mpirun: its ranks are not our children).
  const Child* stopped_child() const {
    if (o_.backend == Backend::mpi) return nullptr;
    for (const auto& c : children_)
      if (!c.status && proc_state(c.pid).rfind("T ", 0) == 0) return &c;
    return nullptr;
  }
  void mark_hung() {
    for (auto& c : children_)
      if (!c.status && first_failed_ >= 0) c.hung = true, c.hung_state = proc_state(c.pid);
  }
  std::string rank_name(const Child& c) const;
  bool all_reaped() const {
    for (const auto& c : children_) if (!c.status) return false;
    return true;
  }

  const LaunchOptions& o_;
  std::vector<std::string> command_;
  ms grace_;
  std::string store_;
  std::vector<Child> children_;
  int first_failed_ = -1;
  bool blamed_stopped_ = false;  // first_failed_ is a rank found stopped, not one that exited
  clock::time_point failed_at_{}, term_at_{};
  bool terminating_ = false;
  int interrupted_by_ = 0;
  bool deadline_passed_ = false;
  clock::time_point started_at_{};
  // backend mpi: the real rank mpirun reports as the first to fail (-1: none yet), how
  // ("killed by signal 9 (Killed)", "exited with code 3"), and whether it died by a signal
  int mpi_rank_ = -1;
  std::string mpi_how_;
  bool mpi_signal_ = false;
  int64_t oom_before_ = oom_kill_count();
  std::string mpi_shm_;                        // OpenMPI's segments go here (proc/leftovers.h)
  std::optional<MpiRankWatch> mpi_watch_;      // mpirun's children, for blame (proc/mpi_ranks.h)
  std::optional<clock::time_point> mpi_sign_;  // the first line of a failure through mpirun
  std::optional<MpiRankWatch::Stopped> mpi_stopped_, mpi_reported_;  // blamed; named stopped by a rank
};

void Launcher::start_all() {
  int n = o_.backend == Backend::mpi ? 1 : o_.nproc;
  if (!o_.log_dir.empty()) std::filesystem::create_directories(o_.log_dir);
  auto argv = rank_argv(o_, command_);
  for (int r = 0; r < n; ++r) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
      throw IoError("launch: pipe for rank " + std::to_string(global_rank(o_, r)) +
                    " failed: " + describe_errno(errno));
    Child c;
    c.rank = global_rank(o_, r);
    c.fd = p[0];
    if (!o_.log_dir.empty()) {
      c.log_path =
          o_.log_dir + (o_.backend == Backend::mpi ? "/mpirun.log" : "/rank" + std::to_string(c.rank) + ".log");
      c.log.open(c.log_path);
    }
    try {
      c.pid = spawn(o_, c.rank, argv, rank_env(o_, r, store_, mpi_shm_), p[1]);
    } catch (...) {
      close(p[0]);
      close(p[1]);
      throw;
    }
    close(p[1]);
    if (o_.backend == Backend::mpi) mpi_watch_.emplace(c.pid);
    children_.push_back(std::move(c));
  }
}

// mpirun names the rank that failed first in its own words; keep it, so the summary names
// the real rank and not mpirun's pid:
//   "mpirun noticed that process rank 2 with PID 0 on node vm exited on signal 9 (Killed)."
//   "  Process name: [prterun-vm-123@1,3]" then "  Exit code:    3"
void Launcher::note_mpi_line(std::string_view line) {
  if (!mpi_sign_ && line.find("parity: ") != std::string_view::npos) mpi_sign_ = clock::now();  // a rank's error
  // A rank's timeout names a member it found stopped in /proc (comm/diagnose.h).
  static const std::regex stopped(R"(missing rank (\d+) \(group rank \d+\) \(pid (\d+) on \S+ is stopped)");
  static const std::regex died(R"(process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+))");
  static const std::regex name(R"(Process name:\s*\[.*,(\d+)\]\]?)"), code(R"(Exit code:\s*(\d+))");
  std::cmatch m;
  const std::string l(line);
  if (!mpi_reported_ && l.find("is stopped") != std::string::npos && std::regex_search(l.c_str(), m, stopped))
    mpi_reported_ = MpiRankWatch::Stopped{std::stoi(m[1].str()), static_cast<pid_t>(std::stol(m[2].str())), ms(0)};
  if (std::regex_search(l.c_str(), m, died)) {
    mpi_rank_ = std::stoi(m[1].str()), mpi_signal_ = true;
    const int sig = std::stoi(m[3].str());
    mpi_how_ = "killed by signal " + m[3].str() + " (" + strsignal(sig) + ") on node " + m[2].str();
  } else if (mpi_rank_ < 0 && std::regex_search(l.c_str(), m, name)) {
    mpi_rank_ = std::stoi(m[1].str());
  } else if (mpi_rank_ >= 0 && mpi_how_.empty() && std::regex_search(l.c_str(), m, code)) {
    mpi_how_ = "exited with code " + m[1].str();
  }
}

std::string Launcher::rank_name(const Child& c) const {
  if (o_.backend == Backend::mpi)
    return "mpirun (pid " + std::to_string(c.pid) + ")" +
           (mpi_rank_ >= 0 ? ": rank " + std::to_string(mpi_rank_) + (mpi_how_.empty() ? "" : " " + mpi_how_) : "");
  return "rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.pid) + ")";
}

void Launcher::emit(Child& c, std::string_view line) {
  if (o_.backend == Backend::mpi) note_mpi_line(line);
  std::string out = (o_.prefix_output && o_.backend != Backend::mpi ? "[" + std::to_string(c.rank) + "] " : "");
  out.append(line);
  out += '\n';
  std::cout << out << std::flush;
  if (c.log.is_open()) c.log << line << '\n' << std::flush;
}

void Launcher::pump(int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<Child*> who;
  for (auto& c : children_)
    if (c.fd >= 0) {
      fds.push_back({c.fd, POLLIN, 0});
      who.push_back(&c);
    }
  fds.push_back({wake_fd_, POLLIN, 0});
  if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  if (fds.back().revents & POLLIN) {
    char drain[64];
    while (read(wake_fd_, drain, sizeof(drain)) > 0) {
    }
  }
  for (size_t i = 0; i < who.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    Child& c = *who[i];
    char buf[65536];
    ssize_t n = read(c.fd, buf, sizeof(buf));
    if (n <= 0) {
      if (!c.partial.empty()) emit(c, c.partial);
      c.partial.clear();
      close(c.fd);
      c.fd = -1;
      continue;
    }
    c.partial.append(buf, static_cast<size_t>(n));
    size_t start = 0, nl;
    while ((nl = c.partial.find('\n', start)) != std::string::npos) {
      emit(c, std::string_view(c.partial).substr(start, nl - start));
      start = nl + 1;
    }
    c.partial.erase(0, start);
  }
}

void Launcher::reap() {
  for (auto& c : children_) {
    if (c.status) continue;
    int st = 0;
    pid_t r = waitpid(c.pid, &st, WNOHANG);
    if (r != c.pid) continue;
    c.status = st;
    bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok && first_failed_ < 0 && !c.stopped) {
      first_failed_ = c.rank;
      failed_at_ = clock::now();
      // A rank that fails while another is stopped (SIGSTOP, a debugger) was most likely
      // waiting on it (a collective timed out): the stopped one is named, and nothing is
      // left to wait for (docs/faults.md "Blame").
      if (const Child* s = stopped_child(); s != nullptr) {
        first_failed_ = s->rank, blamed_stopped_ = true;
        std::cerr << "parity launch: " << rank_name(*s) << " is stopped (" << proc_state(s->pid)
                  << ": SIGSTOP or a debugger) and the others wait on it; " << rank_name(c) << " "
                  << describe_status(st) << " waiting; stopping every rank" << std::endl;
        continue;
      }
      if (blame_mpi_stopped(c, st)) continue;
      std::cerr << "parity launch: " << rank_name(c) << " " << (WIFSIGNALED(st) ? "died: " : "")
                << describe_status(st) << oom_note(st) << (c.log_path.empty() ? "" : "; log: " + c.log_path)
                << "; giving the other ranks " << grace_.count() << " ms to report before stopping them" << std::endl;
    }
  }
}

// Backend mpi: mpirun failed, and by now it has continued and ended every rank; a rank seen
// stopped until the failure began (proc/mpi_ranks.h) is named, not the one mpirun reports
// (that one timed out waiting on it).
bool Launcher::blame_mpi_stopped(const Child& c, int st) {
  if (mpi_watch_) mpi_stopped_ = mpi_watch_->stopped_at(mpi_sign_.value_or(clock::now()), ms(1500));
  if (!mpi_stopped_) mpi_stopped_ = mpi_reported_;  // what the waiting ranks saw in /proc at their timeout
  if (!mpi_stopped_) return false;
  blamed_stopped_ = true;
  std::cerr << "parity launch: rank " << mpi_stopped_->rank << " (pid " << mpi_stopped_->pid << ") was stopped ("
            << (mpi_stopped_->for_at_least.count() > 0
                    ? "state T for at least " + std::to_string(mpi_stopped_->for_at_least.count()) + " ms"
                    : std::string("as the ranks waiting on it saw"))
            << ": SIGSTOP or a debugger) and the others waited on it; mpirun (pid " << c.pid << ") ended the job"
            << (mpi_rank_ >= 0 ? " after rank " + std::to_string(mpi_rank_) + " " + mpi_how_ : "") << ", "
            << describe_status(st) << std::endl;
  return true;
}

// Backend mpi: a rank stopped longer than --timeout + 1 s while mpirun has not ended the job:
// the others wait on it where no timeout applies (a stop during MPI_Init hung for ever).
void Launcher::blame_mpi_hang(clock::time_point now) {
  if (!(mpi_stopped_ = mpi_watch_->stopped_longer_than(o_.timeout + ms(1000)))) return;
  blamed_stopped_ = true, first_failed_ = children_.front().rank, failed_at_ = now;
  std::cerr << "parity launch: rank " << mpi_stopped_->rank << " (pid " << mpi_stopped_->pid
            << ") was stopped (state T for " << mpi_stopped_->for_at_least.count() << " ms, past --timeout "
            << o_.timeout.count() << " ms: SIGSTOP or a debugger) and the others wait on it where no timeout "
            << "applies (MPI_Init); stopping every rank" << std::endl;
  stop_all(SIGTERM);
  terminating_ = true, term_at_ = now;
}

void Launcher::stop_all(int sig) {
  for (auto& c : children_)
    if (!c.status) {
      kill(c.pid, sig);
      if (sig != SIGKILL) kill(c.pid, SIGCONT);  // a stopped (SIGSTOP) rank acts on SIGTERM only once continued
      c.stopped = true;
    }
}

void Launcher::summarise() const {
  std::cerr << "parity launch: failed; rank verdicts:\n";
  if (mpi_stopped_)
    std::cerr << "  the rank the others waited on: rank " << mpi_stopped_->rank << " (pid " << mpi_stopped_->pid
              << "), stopped (SIGSTOP or a debugger)\n";
  else if (blamed_stopped_)
    for (const auto& c : children_)
      if (c.rank == first_failed_)
        std::cerr << "  the rank the others waited on: " << rank_name(c) << ", stopped (SIGSTOP or a debugger)\n";
  for (const auto& c : children_) {
    std::cerr << "  " << rank_name(c) << ": "
              << (c.hung ? "did not answer (stopped or hung: " + c.hung_state + "), " : "")
              << (c.stopped ? "stopped by the launcher, " : "") << describe_status(*c.status)
              << (c.log_path.empty() ? "" : ", log " + c.log_path) << "\n";
  }
  std::cerr << std::flush;
}

int Launcher::run() {
  SignalGuard signals;
  wake_fd_ = signals.fd();
  started_at_ = clock::now();
  if (o_.nnodes == 1) store_ = make_store_dir(o_.store_root);  // across hosts: the TCP store at --master
  std::error_code ec;
  if (o_.backend == Backend::mpi) mpi_shm_ = make_mpi_shm_dir(store_);
  try {
    start_all();
    if (o_.after_start) o_.after_start();
  } catch (...) {
    stop_all(SIGKILL);
    for (auto& c : children_) waitpid(c.pid, nullptr, 0);
    for (const auto& d : {store_, mpi_shm_}) if (!d.empty()) std::filesystem::remove_all(d, ec);
    for (const auto& c : children_) remove_shm_segments_of(c.pid);  // nothing left behind
    throw;
  }
  for (;;) {
    pump(50);
    if (mpi_watch_) mpi_watch_->look(clock::now());
    if (mpi_watch_ && first_failed_ < 0 && !terminating_) blame_mpi_hang(clock::now());
    reap();
    if (int sig = g_signal.exchange(0); sig) {
      signals.saw(sig);
      if (!interrupted_by_) {
        interrupted_by_ = sig;
        std::cerr << "parity launch: received " << strsignal(sig) << ", stopping every rank" << std::endl;
        stop_all(SIGTERM);
        terminating_ = true;
        term_at_ = clock::now();
      }
    }
    auto now = clock::now();
    if (o_.deadline.count() > 0 && !terminating_ && !deadline_passed_ && now - started_at_ > o_.deadline) {
      deadline_passed_ = true;
      std::cerr << "parity launch: the deadline of " << o_.deadline.count() / 1000.0
                << " s (--deadline) passed; stopping every rank" << std::endl;
      stop_all(SIGTERM);
      terminating_ = true;
      term_at_ = now;
    }
    if (first_failed_ >= 0 && !terminating_ && (now - failed_at_ > grace_ || only_stopped_left() || blamed_stopped_)) {
      mark_hung();
      stop_all(SIGTERM);
      terminating_ = true;
      term_at_ = now;
    }
    if (terminating_ && now - term_at_ > o_.kill_after) stop_all(SIGKILL);
    if (all_reaped()) break;
  }
  // Drain what the ranks wrote last (a grandchild may hold a pipe: bounded wait).
  auto drain_until = clock::now() + ms(500);
  for (bool open = true; open && clock::now() < drain_until;) {
    pump(20);
    open = false;
    for (const auto& c : children_) open = open || c.fd >= 0;
  }
  for (auto& c : children_)
    if (c.fd >= 0) close(c.fd);
  if (mpi_watch_) mpi_watch_->kill_survivors();  // mpirun is gone: none of its ranks may stay
  for (const auto& d : {store_, mpi_shm_}) if (!d.empty()) std::filesystem::remove_all(d, ec);
  // A rank killed before its groups' members all mapped their shared-memory segment leaves
  // the name behind (comm/gloo/shm_communicator.h); the segments are named by that pid.
  for (const auto& c : children_) remove_shm_segments_of(c.pid);
  return outcome();
}

// The launch's exit code (core/exit_codes.h), once every rank is reaped, with the summary.
int Launcher::outcome() const {
  if (interrupted_by_) {
    summarise();
    return 128 + interrupted_by_;
  }
  if (deadline_passed_) {
    summarise();
    return exit_code::infrastructure;  // the run did not end in time
  }
  if (first_failed_ < 0) return 0;
  summarise();
  if (o_.backend == Backend::mpi && mpi_signal_) return exit_code::infrastructure;  // a rank died
  if (blamed_stopped_) return exit_code::infrastructure;  // a rank hung (stopped)
  for (const auto& c : children_)
    if (c.rank == first_failed_) {
      const int st = *c.status;
      if (WIFSIGNALED(st)) return exit_code::infrastructure;  // a rank died (kill -9, a crash)
      if (o_.backend == Backend::mpi && WEXITSTATUS(st) > 128)
        return exit_code::infrastructure;  // mpirun: a rank killed by a signal
      return status_code(st) == 0 ? exit_code::parity_broken : status_code(st);
    }
  return exit_code::parity_broken;
}

}  // namespace

std::pair<std::string, int> parse_master(const std::string& s) {
  const size_t colon = s.rfind(':');
  if (s.empty() || colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    throw ConfigError("--master", "expected ADDR:PORT (rank 0's host and a free port), got '" + s + "'");
  std::string addr = s.substr(0, colon);
  if (addr.size() > 2 && addr.front() == '[' && addr.back() == ']') addr = addr.substr(1, addr.size() - 2);
  const std::string port = s.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoi(port) < 1 ||
      std::stoi(port) > 65535)
    throw ConfigError("--master", "port must be in [1, 65535], got '" + port + "'");
  return {addr, std::stoi(port)};
}

int launch_main(const LaunchOptions& opts, const std::vector<std::string>& command) {
  if (opts.nproc < 1) throw ConfigError("nproc", "must be at least 1, got " + std::to_string(opts.nproc));
  if (opts.nproc > kMaxRanksPerHost)
    throw ConfigError("--nproc", "must be at most " + std::to_string(kMaxRanksPerHost) +
                                     " (the per-host cap: ranks one launcher starts on one host; more hosts: "
                                     "--nnodes), got " + std::to_string(opts.nproc));
  if (opts.nnodes < 1) throw ConfigError("--nnodes", "must be at least 1, got " + std::to_string(opts.nnodes));
  if (opts.node_rank < 0 || opts.node_rank >= opts.nnodes)
    throw ConfigError("--node-rank", "must be in [0, --nnodes = " + std::to_string(opts.nnodes) + "), got " +
                                         std::to_string(opts.node_rank));
  if (opts.nnodes > 1 && opts.backend == Backend::mpi)
    throw ConfigError("--nnodes", "backend mpi across hosts: start the ranks with mpirun -H HOST:N,... instead");
  // Checked with --nnodes 1 too, then unused there (one host meets through a store directory):
  // one recipe serves a job of one node and of several (docs/multihost.md, Slurm).
  if (opts.nnodes > 1 || !opts.master.empty()) (void)parse_master(opts.master);
  if (command.empty()) throw ConfigError("command", "nothing to launch: give a command after --");
  if (opts.timeout.count() <= 0) throw ConfigError("timeout", "must be positive");
  if (opts.in_process && opts.backend == Backend::mpi)
    throw ConfigError("backend", "mpi ranks are started by mpirun, not by fork");
  Launcher l(opts, command);
  return l.run();
}

}  // namespace parity::proc
