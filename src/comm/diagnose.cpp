#include "comm/diagnose.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <thread>

#include "comm/reach.h"

namespace parity::comm {

std::string local_host() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

PeerInfo local_peer(const std::string& addr) {
  const std::string host = local_host();
  const bool say = !addr.empty() && addr.rfind("127.", 0) != 0 && addr != "::1" && addr != host;
  return PeerInfo{host, static_cast<int64_t>(getpid()), say ? addr : "", "", 0};
}

std::vector<std::string> proc_stat_fields(int64_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return {};
  const size_t close = line.rfind(')');  // "pid (comm) S ...": comm may hold spaces and ')'
  if (close == std::string::npos) return {};
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> out;
  for (std::string x; rest >> x;) out.push_back(x);
  return out;
}

bool peer_stopped(const PeerInfo& p) {
  if (p.pid <= 0 || p.host != local_host()) return false;
  const auto f = proc_stat_fields(p.pid);
  return !f.empty() && (f[0] == "T" || f[0] == "t");
}

bool peer_exited(const PeerInfo& p) {
  if (p.pid <= 0 || p.host != local_host()) return false;
  if (kill(static_cast<pid_t>(p.pid), 0) != 0) return errno == ESRCH;
  const auto f = proc_stat_fields(p.pid);
  return f.empty() || f[0] == "Z";
}

std::string encode_peer(const PeerInfo& p) {
  return p.host + "\n" + std::to_string(p.pid) + (p.addr.empty() ? "" : "\n" + p.addr);
}

PeerInfo decode_peer(const std::string& s) {
  PeerInfo p;
  auto nl = s.find('\n');
  if (nl == std::string::npos) return p;
  p.host = s.substr(0, nl);
  const auto nl2 = s.find('\n', nl + 1);
  if (nl2 != std::string::npos) p.addr = s.substr(nl2 + 1);
  try {
    p.pid = std::stoll(s.substr(nl + 1, nl2 == std::string::npos ? std::string::npos : nl2 - nl - 1));
  } catch (const std::exception&) {
    p.pid = 0;
  }
  return p;
}

namespace {

// stuck: alive, and failed in a collective of another group (its note on the world board).
enum class Seen { unknown, reported, exited, stopped, stuck };

std::string rank_label(int group_rank, int world_rank) {
  std::string s = "rank " + std::to_string(world_rank);
  if (group_rank != world_rank) s += " (group rank " + std::to_string(group_rank) + ")";
  return s;
}

// A note on the world board is "GROUP OP #N" at first and "GROUP OP #N: missing ..." once its
// poster has named its own missing member; the long form is worth waiting for.
bool final_note(const std::string& note) { return note.find(": ") != std::string::npos; }

constexpr size_t kMaxNote = 600;  // notes nest (each names what its poster waited for): bounded

}  // namespace

namespace {

using ms = std::chrono::milliseconds;

// The probe of the other hosts (comm/reach.h), started before the board is read.
struct HostProbe {
  std::future<std::vector<HostReach>> result;
  ms timeout{0};
  std::vector<HostReach> hosts;  // once done
  std::set<int> cut;             // world ranks on hosts that did not answer
  std::chrono::steady_clock::time_point done_at = std::chrono::steady_clock::time_point::max();

  HostProbe(int me, const std::vector<int>& members, const std::vector<PeerInfo>& peers, const WorldBoard& world,
            ms window) {
    timeout = std::min(window, ms(1000));
    std::vector<PeerInfo> all = world.world_peers != nullptr ? *world.world_peers : peers;
    std::vector<int> ranks = members;
    size_t mine = static_cast<size_t>(me);
    if (world.world_peers != nullptr) {
      ranks.resize(all.size());
      for (size_t i = 0; i < ranks.size(); ++i) ranks[i] = static_cast<int>(i);
      mine = static_cast<size_t>(members[static_cast<size_t>(me)]);
    }
    result = std::async(std::launch::async, [all = std::move(all), ranks = std::move(ranks), mine, t = timeout] {
      return probe_hosts(all, ranks, mine, t);
    });
  }
  // True once the probe has ended (never waits).
  bool poll() {
    if (!result.valid()) return true;
    if (result.wait_for(ms(0)) != std::future_status::ready) return false;
    finish();
    return true;
  }
  void finish() {
    if (!result.valid()) return;
    hosts = result.get();
    for (const HostReach& h : hosts)
      if (!h.reachable) cut.insert(h.ranks.begin(), h.ranks.end());
    done_at = std::chrono::steady_clock::now();
  }
};

std::string describe(const std::vector<int>& members, const std::vector<PeerInfo>& peers,
                     const std::vector<Seen>& seen, const std::vector<std::string>& notes, const std::string& what) {
  std::string exited, silent, elsewhere;
  for (size_t r = 0; r < members.size(); ++r) {
    std::string label = rank_label(static_cast<int>(r), members[r]);
    std::string pid = r < peers.size() ? "pid " + std::to_string(peers[r].pid) + " on " + peers[r].host +
                                             (peers[r].addr.empty() ? "" : " (" + peers[r].addr + ")")
                                       : "";
    if (seen[r] == Seen::exited) {
      exited += (exited.empty() ? "" : "; ") + label + " (" + pid + " has exited)";
    } else if (seen[r] == Seen::stopped) {
      exited += (exited.empty() ? "" : "; ") + label + " (" + pid +
                " is stopped: SIGSTOP or a debugger; it did not answer " + what + ")";
    } else if (seen[r] == Seen::unknown) {
      silent += (silent.empty() ? "" : "; ") + label + " (" + pid +
                " did not report reaching " + what + ")";
    } else if (seen[r] == Seen::stuck) {
      silent += (silent.empty() ? "" : "; ") + label + " (" + pid + " is stuck in " + notes[r] + ")";
    } else if (!notes[r].empty() && notes[r] != what) {
      elsewhere += (elsewhere.empty() ? "" : "; ") + label + " failed in " + notes[r];
    }
  }
  std::string out;
  if (!exited.empty()) out = "missing " + exited;
  else if (!silent.empty()) out = "missing " + silent;
  else out = "no member is missing: every member reported a failure";
  if (!elsewhere.empty()) out += "; mismatched collectives: " + elsewhere;
  return out;
}

}  // namespace

std::string name_missing(int me, const std::vector<int>& members,
                         const std::vector<PeerInfo>& peers, FailureBoard& board,
                         const std::string& what, std::chrono::milliseconds window,
                         const WorldBoard& world) {
  HostProbe probe(me, members, peers, world, window);  // first: posting may wait on a store behind the cut
  board.post(what);
  if (world.board != nullptr) world.board->post(world.group + " " + what);
  size_t n = members.size();
  std::vector<Seen> seen(n, Seen::unknown);
  std::vector<std::string> notes(n);
  seen[static_cast<size_t>(me)] = Seen::reported;
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  auto first_exit = clock::time_point::max();
  for (;;) {
    size_t unknown = 0, unknown_reachable = 0;
    for (size_t r = 0; r < n; ++r) {
      if (seen[r] != Seen::unknown && !(seen[r] == Seen::stuck && !final_note(notes[r]))) continue;
      bool still = false;
      if (auto note = board.read(static_cast<int>(r))) {
        seen[r] = Seen::reported;
        notes[r] = *note;
      } else if (auto elsewhere = world.board != nullptr ? world.board->read(members[r]) : std::nullopt) {
        seen[r] = Seen::stuck;
        notes[r] = elsewhere->substr(0, kMaxNote);
        still = !final_note(notes[r]);
      } else if (r < peers.size() && peer_exited(peers[r])) {
        seen[r] = Seen::exited;
        first_exit = std::min(first_exit, clock::now());
      } else if (r < peers.size() && peer_stopped(peers[r])) {
        seen[r] = Seen::stopped;
        first_exit = std::min(first_exit, clock::now());
      } else {
        still = true;
      }
      unknown += still ? 1 : 0;
      unknown_reachable += still && !probe.cut.count(members[r]) ? 1 : 0;
    }
    const bool probed = probe.poll();
    auto now = clock::now();
    // Once a member is known to be gone or stopped, others still waiting on their timeout
    // are victims: the culprit is named, no need to wait out the window. The same once a
    // host is known to be unreachable: the members on it will never answer, and those on
    // hosts that answer get 300 ms more to post what they wait for.
    const bool cut = probed && !probe.cut.empty();
    if (unknown == 0 || now - start > window || (cut && (unknown_reachable == 0 || now - probe.done_at > ms(300))) ||
        (first_exit != clock::time_point::max() && now - first_exit > ms(300)))
      break;
    std::this_thread::sleep_for(ms(20));
  }
  probe.finish();  // at most the probe's timeout after it began
  std::string out = describe(members, peers, seen, notes, what);
  const std::string hosts = unreachable_sentence(probe.hosts);
  if (!hosts.empty()) out = hosts + "; " + out;
  if (world.board != nullptr) world.board->post((world.group + " " + what + ": " + out).substr(0, kMaxNote));
  return out;
}

}  // namespace parity::comm
