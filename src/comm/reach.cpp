#include "comm/reach.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

namespace parity::comm {

namespace {

using steady = std::chrono::steady_clock;

// A non-blocking connect; returns the fd still connecting (-1 when it already ended, with
// *done / *why telling how).
int start_connect(const std::string& host, int port, bool* answered, std::string* why) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) {
    *answered = false, *why = "does not resolve";
    return -1;
  }
  const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int rc = fd < 0 ? -1 : connect(fd, res->ai_addr, res->ai_addrlen);
  const int err = errno;
  freeaddrinfo(res);
  if (fd >= 0 && rc != 0 && err == EINPROGRESS) return fd;
  if (fd >= 0) close(fd);
  *answered = rc == 0 || err == ECONNREFUSED;
  *why = *answered ? "" : strerror(err);
  return -1;
}

}  // namespace

std::string rank_ranges(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
    i = j + 1;
  }
  return out;
}

std::vector<HostReach> probe_hosts(const std::vector<PeerInfo>& peers, const std::vector<int>& ranks, size_t me,
                                   std::chrono::milliseconds timeout) {
  auto key = [](const PeerInfo& p) { return p.addr.empty() ? p.host : p.addr; };
  const std::string mine = me < peers.size() ? key(peers[me]) : "";
  std::map<std::string, HostReach> hosts;  // by address: ascending, one answer per host
  struct Probe {
    HostReach* host;
    int fd;
  };
  std::vector<Probe> pending;
  for (size_t i = 0; i < peers.size() && i < ranks.size(); ++i) {
    const PeerInfo& p = peers[i];
    if (i == me || p.probe_port <= 0 || key(p) == mine) continue;
    HostReach& h = hosts[key(p)];
    if (h.ranks.empty()) h.label = p.host + (p.addr.empty() ? "" : " (" + p.addr + ")"), h.reachable = false;
    h.ranks.push_back(ranks[i]);
    bool answered = false;
    std::string why;
    const int fd = start_connect(p.probe_host, p.probe_port, &answered, &why);
    if (fd >= 0) pending.push_back({&h, fd});
    else if (answered) h.reachable = true;
    else if (h.why.empty()) h.why = why;
  }
  const auto deadline = steady::now() + timeout;
  while (!pending.empty()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count();
    if (left <= 0) break;
    std::vector<pollfd> fds;
    for (const Probe& p : pending) fds.push_back({p.fd, POLLOUT, 0});
    if (poll(fds.data(), fds.size(), static_cast<int>(left)) < 0 && errno != EINTR) break;
    for (size_t i = fds.size(); i-- > 0;) {
      if (fds[i].revents == 0) continue;
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(pending[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == 0 || err == ECONNREFUSED) pending[i].host->reachable = true;
      else if (pending[i].host->why.empty()) pending[i].host->why = strerror(err);
      close(pending[i].fd);
      pending.erase(pending.begin() + static_cast<long>(i));
    }
  }
  for (const Probe& p : pending) {
    if (p.host->why.empty()) p.host->why = "no answer within " + std::to_string(timeout.count()) + " ms";
    close(p.fd);
  }
  std::vector<HostReach> out;
  for (auto& [k, h] : hosts) out.push_back(std::move(h));
  return out;
}

std::string unreachable_sentence(const std::vector<HostReach>& hosts) {
  std::string out;
  for (const HostReach& h : hosts) {
    if (h.reachable) continue;
    out += (out.empty() ? "" : "; ") + std::string("host ") + h.label + " is unreachable: rank" +
           (h.ranks.size() > 1 ? "s " : " ") + rank_ranges(h.ranks) +
           " (their transport did not take a TCP connection: " + h.why + "; a cut link, or a host that is down)";
  }
  return out;
}

}  // namespace parity::comm
