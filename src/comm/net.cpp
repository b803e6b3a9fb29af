#include "comm/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "core/error.h"

namespace parity::comm::net {

namespace {

using AddrList = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

// getaddrinfo as a list that frees itself; *err gets gai_strerror on failure.
AddrList resolve(const std::string& host, int port, int socktype, int flags, std::string* err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = flags;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 && err != nullptr) *err = gai_strerror(rc);
  return AddrList(rc == 0 ? res : nullptr, &freeaddrinfo);
}

std::string to_text(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  const void* a = sa->sa_family == AF_INET
                      ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(sa)->sin_addr)
                      : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
  return inet_ntop(sa->sa_family, a, buf, sizeof buf) != nullptr ? buf : "";
}

int remaining_ms(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left.count(), 1 << 30)));
}

std::string where(const std::string& host, int port) { return host + ":" + std::to_string(port); }

// One non-blocking connect attempt, waiting at most `wait_ms`; -1 and *why on failure.
int try_connect(const addrinfo* ai, int wait_ms, std::string* why) {
  const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) {
    *why = strerror(errno);
    return -1;
  }
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
    *why = strerror(errno);
    close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int err = 0;
  socklen_t len = sizeof err;
  if (poll(&p, 1, wait_ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    *why = err != 0 ? strerror(err) : "no answer within " + std::to_string(wait_ms) + " ms";
    close(fd);
    return -1;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

}  // namespace

std::string route_source_address(const std::string& host, int port) {
  std::string err = "no address";
  AddrList list = resolve(host, port, SOCK_DGRAM, 0, &err);
  for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    const bool ok = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
                    getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
    if (!ok) err = strerror(errno);
    close(fd);
    if (ok) return to_text(reinterpret_cast<sockaddr*>(&local));
  }
  throw CommError("no route to " + where(host, port) + ": " + err);
}

std::string interface_address(const std::string& iface, const std::string& var) {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) throw CommError(std::string("getifaddrs: ") + strerror(errno));
  std::string v4, v6;
  for (const ifaddrs* i = all; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || iface != i->ifa_name) continue;
    if (i->ifa_addr->sa_family == AF_INET && v4.empty()) v4 = to_text(i->ifa_addr);
    if (i->ifa_addr->sa_family == AF_INET6 && v6.empty()) v6 = to_text(i->ifa_addr);
  }
  freeifaddrs(all);
  if (v4.empty() && v6.empty()) throw ConfigError(var, "interface '" + iface + "' has no address here");
  return v4.empty() ? v6 : v4;
}

std::string first_external_address() {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return "";
  std::string out;
  for (const ifaddrs* i = all; i != nullptr && out.empty(); i = i->ifa_next)
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
        !(i->ifa_flags & IFF_LOOPBACK))
      out = to_text(i->ifa_addr);
  freeifaddrs(all);
  return out;
}

std::string netns_id() {
  char buf[128] = {};
  const ssize_t n = readlink("/proc/self/ns/net", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

int listen_on(const std::string& host, int port, int* bound) {
  std::string err = "no address";
  AddrList list = resolve(host, port, SOCK_STREAM, AI_PASSIVE, &err);
  int last_errno = 0;
  auto try_bind = [&](const sockaddr* sa, socklen_t len) {
    const int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, sa, len) != 0 || listen(fd, 256) != 0) {
      last_errno = errno;
      err = strerror(last_errno);
      close(fd);
      return -1;
    }
    return fd;
  };
  int fd = -1;
  for (const addrinfo* ai = list.get(); ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = try_bind(ai->ai_addr, ai->ai_addrlen);
    if (fd < 0 && last_errno == EADDRNOTAVAIL) {  // not an address of this host: every address of the family
      sockaddr_storage any{};
      std::memcpy(&any, ai->ai_addr, ai->ai_addrlen);
      if (any.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&any)->sin_addr.s_addr = htonl(INADDR_ANY);
      else reinterpret_cast<sockaddr_in6*>(&any)->sin6_addr = in6addr_any;
      fd = try_bind(reinterpret_cast<sockaddr*>(&any), ai->ai_addrlen);
    }
  }
  if (fd < 0) throw CommError("cannot listen on " + where(host, port) + ": " + err);
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  *bound = ntohs(local.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&local)->sin_port
                                            : reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
  return fd;
}

int connect_to(const std::string& host, int port, Deadline deadline) {
  std::string why = "no attempt";
  for (;;) {
    AddrList list = resolve(host, port, SOCK_STREAM, 0, &why);
    for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
      const int fd = try_connect(ai, std::clamp(remaining_ms(deadline), 1, 1000), &why);
      if (fd >= 0) return fd;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      throw CommError("cannot reach " + where(host, port) + ": " + why);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100, remaining_ms(deadline) + 1)));
  }
}

bool send_all(int fd, const void* data, size_t n, Deadline deadline, std::string* why) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    pollfd pf{fd, POLLOUT, 0};
    const int r = poll(&pf, 1, remaining_ms(deadline));
    if (r == 0) return *why = "timed out", false;
    if (r < 0 && errno == EINTR) continue;
    const ssize_t k = r > 0 ? send(fd, p, n, MSG_NOSIGNAL) : -1;
    if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (k <= 0) return *why = strerror(errno), false;
    p += k, n -= static_cast<size_t>(k);
  }
  return true;
}

bool recv_all(int fd, void* data, size_t n, Deadline deadline, std::string* why) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    pollfd pf{fd, POLLIN, 0};
    const int r = poll(&pf, 1, remaining_ms(deadline));
    if (r == 0) return *why = "timed out", false;
    if (r < 0 && errno == EINTR) continue;
    const ssize_t k = r > 0 ? recv(fd, p, n, 0) : -1;
    if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (k == 0) return *why = "connection closed", false;
    if (k < 0) return *why = strerror(errno), false;
    p += k, n -= static_cast<size_t>(k);
  }
  return true;
}

}  // namespace parity::comm::net
