#include "comm/tcp_store.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include "comm/net.h"
#include "core/error.h"

namespace parity::comm {

namespace {

using ms = std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

constexpr size_t kHeader = 1 + 4 + 4;           // op, key length, value length
constexpr uint32_t kMaxKey = 64 * 1024;          // beyond: not one of ours, the connection is dropped
constexpr uint32_t kMaxValue = 256u << 20;
constexpr ms kServerSendTimeout{1000};           // a client that does not read its answer is dropped
constexpr uint8_t kOk = 0, kFound = 1, kMissing = 2;

void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); }
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

// ---- the server: one thread, poll() over the listening socket and every client ----

struct TcpStoreServer::Impl {
  struct Conn {
    int fd;
    std::string in;  // bytes received, not yet a whole request
  };
  int listen_fd = -1, port = 0, world = 0;
  int wake[2] = {-1, -1};
  std::thread thread;
  std::map<std::string, std::string> kv;
  std::vector<Conn> conns;

  void loop();
  bool serve(Conn& c);  // answers every whole request in c.in; false: drop the connection
  void accept_one();
};

void TcpStoreServer::Impl::accept_one() {
  const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return;
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  conns.push_back({fd, {}});
}

bool TcpStoreServer::Impl::serve(Conn& c) {
  size_t at = 0;
  while (c.in.size() - at >= kHeader) {
    const char op = c.in[at];
    const uint32_t klen = get_u32(c.in.data() + at + 1), vlen = get_u32(c.in.data() + at + 5);
    if (klen > kMaxKey || vlen > kMaxValue || (op != 'H' && op != 'S' && op != 'G')) return false;
    if (c.in.size() - at < kHeader + klen + vlen) break;
    std::string key = c.in.substr(at + kHeader, klen), value = c.in.substr(at + kHeader + klen, vlen);
    at += kHeader + klen + vlen;
    uint8_t status = kOk;
    std::string answer;
    if (op == 'H') {
      answer = std::to_string(world);
    } else if (op == 'S') {
      kv[key] = std::move(value);
    } else if (auto it = kv.find(key); it != kv.end()) {
      status = kFound, answer = it->second;
    } else {
      status = kMissing;
    }
    std::string out(1, static_cast<char>(status));
    put_u32(out, static_cast<uint32_t>(answer.size()));
    out += answer;
    std::string why;
    if (!net::send_all(c.fd, out.data(), out.size(), steady::now() + kServerSendTimeout, &why)) return false;
  }
  c.in.erase(0, at);
  return true;
}

void TcpStoreServer::Impl::loop() {
  std::vector<pollfd> fds;
  for (;;) {
    fds.assign({{wake[0], POLLIN, 0}, {listen_fd, POLLIN, 0}});
    for (const Conn& c : conns) fds.push_back({c.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents != 0) return;  // the owner is shutting the server down
    std::vector<bool> drop(conns.size(), false);
    for (size_t i = 0; i < conns.size(); ++i) {
      if (fds[i + 2].revents == 0) continue;
      char buf[65536];
      const ssize_t n = recv(conns[i].fd, buf, sizeof buf, 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) {
        drop[i] = true;
        continue;
      }
      conns[i].in.append(buf, static_cast<size_t>(n));
      drop[i] = !serve(conns[i]);
    }
    for (size_t i = conns.size(); i-- > 0;)
      if (drop[i]) {
        close(conns[i].fd);
        conns.erase(conns.begin() + static_cast<long>(i));
      }
    if (fds[1].revents != 0) accept_one();
  }
}

TcpStoreServer::TcpStoreServer(const std::string& host, int port, int world_size) : impl_(std::make_unique<Impl>()) {
  impl_->world = world_size;
  try {
    impl_->listen_fd = net::listen_on(host, port, &impl_->port);
  } catch (const CommError& e) {
    throw CommError(std::string("rank 0 cannot serve the TCP store (MASTER_ADDR:MASTER_PORT): ") + e.what());
  }
  if (pipe2(impl_->wake, O_CLOEXEC) != 0) {
    close(impl_->listen_fd);
    throw CommError(std::string("TCP store: pipe: ") + strerror(errno));
  }
  impl_->thread = std::thread([this] { impl_->loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  const char c = 1;
  [[maybe_unused]] auto n = write(impl_->wake[1], &c, 1);
  impl_->thread.join();
  for (const auto& conn : impl_->conns) close(conn.fd);
  close(impl_->listen_fd);
  close(impl_->wake[0]);
  close(impl_->wake[1]);
}

int TcpStoreServer::port() const { return impl_->port; }

// ---- the client ----

TcpStore::TcpStore(const std::string& host, int port, int world_size, ms timeout,
                   std::shared_ptr<TcpStoreServer> serving)
    : host_(host), port_(port), timeout_(timeout), serving_(std::move(serving)) {
  try {
    fd_ = net::connect_to(host, port, steady::now() + timeout);
  } catch (const CommError& e) {
    throw CommError("rendezvous: rank 0's TCP store (MASTER_ADDR:MASTER_PORT) did not answer within " +
                    std::to_string(timeout.count()) + " ms: " + e.what() +
                    " (is rank 0 running, and are MASTER_ADDR and MASTER_PORT the same for every rank?)");
  }
  std::string theirs;
  request('H', "", std::to_string(world_size), timeout, &theirs);
  if (theirs != std::to_string(world_size))
    throw ConfigError("WORLD_SIZE", "this rank is in a world of " + std::to_string(world_size) + ", but the store " +
                                        where() + " serves a world of " + theirs +
                                        " (WORLD_SIZE differs between hosts, or another run uses this MASTER_PORT)");
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) close(fd_);
}

std::string TcpStore::where() const {
  return "at " + host_ + ":" + std::to_string(port_) + " (rank 0's TCP store)";
}

uint8_t TcpStore::request(char op, const std::string& key, const std::string& value, ms op_timeout,
                          std::string* answer) {
  std::lock_guard<std::mutex> lock(mu_);
  const char* what = op == 'H' ? "hello" : op == 'S' ? "set" : "get";
  if (!broken_.empty()) throw CommError("store " + where() + " is unusable after an earlier failure: " + broken_);
  std::string frame(1, op);
  put_u32(frame, static_cast<uint32_t>(key.size()));
  put_u32(frame, static_cast<uint32_t>(value.size()));
  frame += key;
  frame += value;
  const auto deadline = steady::now() + op_timeout;
  char head[5];
  std::string why;
  bool ok =
      net::send_all(fd_, frame.data(), frame.size(), deadline, &why) && net::recv_all(fd_, head, 5, deadline, &why);
  if (ok) {
    answer->assign(get_u32(head + 1), '\0');
    ok = net::recv_all(fd_, answer->data(), answer->size(), deadline, &why);
  }
  if (!ok) {
    broken_ = std::string(what) + " '" + key + "': " + why +
              (why == "timed out" ? " after " + std::to_string(op_timeout.count()) + " ms" : "");
    close(fd_);
    fd_ = -1;
    throw CommError("store " + where() + ": " + broken_);
  }
  return static_cast<uint8_t>(head[0]);
}

void TcpStore::set(const std::string& key, const std::string& value, ms op_timeout) {
  std::string answer;
  request('S', key, value, op_timeout, &answer);
}

std::optional<std::string> TcpStore::try_get(const std::string& key, ms op_timeout) {
  std::string answer;
  if (request('G', key, "", op_timeout, &answer) != kFound) return std::nullopt;
  return answer;
}

void TcpStore::set(const std::string& key, const std::vector<char>& data) {
  set(key, std::string(data.begin(), data.end()), timeout_);
}

std::vector<char> TcpStore::get(const std::string& key) {
  wait({key}, timeout_);
  auto v = try_get(key, timeout_);
  if (!v) throw CommError("store " + where() + ": key '" + key + "' vanished");
  return {v->begin(), v->end()};
}

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TcpStore::wait(const std::vector<std::string>& keys, const ms& timeout) {
  const auto deadline = steady::now() + timeout;
  for (const auto& key : keys) {
    while (!try_get(key, timeout_)) {
      if (steady::now() > deadline)
        throw CommError("store " + where() + ": key '" + key + "' did not appear within " +
                        std::to_string(timeout.count()) + " ms");
      std::this_thread::sleep_for(ms(5));
    }
  }
}

std::unique_ptr<Rendezvous> make_tcp_rendezvous(const std::string& host, int port, int rank, int world_size,
                                                ms timeout) {
  std::shared_ptr<TcpStoreServer> server;
  if (rank == 0) server = std::make_shared<TcpStoreServer>(host, port, world_size);
  return make_store_rendezvous(std::make_shared<TcpStore>(host, port, world_size, timeout, std::move(server)));
}

}  // namespace parity::comm
