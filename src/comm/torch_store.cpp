#include "comm/torch_store.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "comm/net.h"
#include "core/error.h"

namespace parity::comm {

namespace {

using ms = std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

constexpr uint32_t kValidationMagic = 0x3C85F7CE;  // torch >= 2.2: the first request of a client
constexpr uint64_t kMaxTorchValue = 8u << 20;  // the libuv server's own payload limit
constexpr int kAncestors = 8;

void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t get_u64(const std::string& s) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[static_cast<size_t>(i)]);
  return v;
}
void put_str(std::string& s, const std::string& v) {
  put_u64(s, v.size());
  s += v;
}

// The parent pid of `pid`, from /proc/PID/stat ("pid (comm) state ppid ..."); 0 when unreadable.
int parent_of(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return 0;
  const size_t rp = line.rfind(')');
  if (rp == std::string::npos) return 0;
  std::istringstream rest(line.substr(rp + 1));
  std::string state;
  int ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

// The torch package directory a process has mapped (".../torch/" of torch/lib/libtorch*.so or
// torch/_C*.so), "" when none.
std::string mapped_torch_dir(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(f, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    for (const char* mark : {"/torch/lib/libtorch", "/torch/_C."}) {
      if (const size_t at = path.rfind(mark); at != std::string::npos) return path.substr(0, at) + "/torch/";
    }
  }
  return "";
}

// __version__ = '1.13.0a0' in DIR/version.py.
std::string version_in(const std::string& dir) {
  std::ifstream f(dir + "version.py");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("__version__", 0) != 0) continue;
    const size_t a = line.find_first_of("'\""), b = line.find_last_of("'\"");
    if (a != std::string::npos && b > a) return line.substr(a + 1, b - a - 1);
  }
  return "";
}

}  // namespace

int torch_store_protocol(const std::string& v) {
  int major = 0, minor = 0;
  char dot = 0;
  std::istringstream in(v);
  if (!(in >> major >> dot >> minor) || dot != '.' || major < 1) return 0;
  return major > 2 || (major == 2 && minor >= 2) ? 2 : 1;
}

std::string agent_torch_version() {
  int pid = getppid();
  for (int i = 0; i < kAncestors && pid > 1; ++i, pid = parent_of(pid)) {
    const std::string dir = mapped_torch_dir(pid);
    if (!dir.empty()) return version_in(dir);
  }
  return "";
}

TorchStore::TorchStore(const std::string& host, int port, int protocol, std::string prefix, ms timeout)
    : host_(host), port_(port), protocol_(protocol), prefix_(std::move(prefix)) {
  if (protocol_ != 1 && protocol_ != 2)
    throw ConfigError("PARITY_TORCH_STORE", "must be 1 or 2, got " + std::to_string(protocol_));
  try {
    fd_ = net::connect_to(host, port, steady::now() + timeout);
  } catch (const CommError& e) {
    throw CommError("rendezvous: torchrun's agent store (MASTER_ADDR:MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE) " +
                    where() + " did not answer within " + std::to_string(timeout.count()) + " ms: " + e.what());
  }
  if (protocol_ == 2) {
    std::string hello(1, '\0');
    for (int i = 0; i < 4; ++i) hello += static_cast<char>((kValidationMagic >> (8 * i)) & 0xff);
    call("validate", "", hello, 0, nullptr, steady::now() + timeout);
  }
}

TorchStore::~TorchStore() {
  if (fd_ >= 0) close(fd_);
}

std::string TorchStore::where() const {
  return "at " + host_ + ":" + std::to_string(port_) + " (torchrun's agent store, torch " + std::to_string(protocol_) +
         " protocol, keys " + prefix_ + ")";
}

uint8_t TorchStore::code(Op op) const {
  const uint8_t shift = protocol_ == 2 ? 1 : 0;  // torch 2.2 put VALIDATE first
  switch (op) {
    case Op::set:
      return static_cast<uint8_t>(0 + shift);
    case Op::get:
      return static_cast<uint8_t>(2 + shift);
    case Op::add:
      return static_cast<uint8_t>(3 + shift);
    case Op::check:
      return static_cast<uint8_t>(4 + shift);
  }
  return 0;
}

bool TorchStore::exchange(const std::string& request, size_t n, std::string* answer, steady::time_point deadline,
                          std::string* why) {
  if (!net::send_all(fd_, request.data(), request.size(), deadline, why)) return false;
  if (n == 0) return true;
  answer->assign(n, '\0');
  return net::recv_all(fd_, answer->data(), n, deadline, why);
}

void TorchStore::call(const char* what, const std::string& key, const std::string& request, size_t n,
                      std::string* answer, steady::time_point deadline) {
  if (!broken_.empty()) throw CommError("store " + where() + " is unusable after an earlier failure: " + broken_);
  std::string why;
  if (exchange(request, n, answer, deadline, &why)) return;
  broken_ = std::string(what) + " '" + key + "': " + why;
  close(fd_);
  fd_ = -1;
  throw CommError("store " + where() + ": " + broken_);
}

void TorchStore::set(const std::string& key, const std::string& value, ms op_timeout) {
  std::string req(1, static_cast<char>(code(Op::set)));
  put_str(req, prefix_ + key);
  put_str(req, value);
  std::lock_guard<std::mutex> lock(mu_);
  call("set", key, req, 0, nullptr, steady::now() + op_timeout);
}

std::optional<std::string> TorchStore::try_get(const std::string& key, ms op_timeout) {
  const auto deadline = steady::now() + op_timeout;
  std::string check(1, static_cast<char>(code(Op::check)));
  put_u64(check, 1);
  put_str(check, prefix_ + key);
  std::lock_guard<std::mutex> lock(mu_);
  std::string ready;
  call("check", key, check, 1, &ready, deadline);
  if (ready[0] != 0) return std::nullopt;
  std::string get(1, static_cast<char>(code(Op::get))), len, value;
  put_str(get, prefix_ + key);
  call("get", key, get, 8, &len, deadline);
  const uint64_t n = get_u64(len);
  if (n > kMaxTorchValue) {
    broken_ = "get '" + key + "': the answer claims " + std::to_string(n) + " bytes (not torch's store protocol " +
              std::to_string(protocol_) + "? PARITY_TORCH_STORE)";
    throw CommError("store " + where() + ": " + broken_);
  }
  if (n > 0) call("get", key, "", n, &value, deadline);
  return value;
}

int64_t TorchStore::add(const std::string& key, int64_t delta, ms op_timeout) {
  std::string req(1, static_cast<char>(code(Op::add))), answer;
  put_str(req, prefix_ + key);
  put_u64(req, static_cast<uint64_t>(delta));
  std::lock_guard<std::mutex> lock(mu_);
  call("add", key, req, 8, &answer, steady::now() + op_timeout);
  return static_cast<int64_t>(get_u64(answer));
}

std::unique_ptr<Rendezvous> make_torch_rendezvous(const RankEnv& env) {
  int protocol = env.torch_protocol;
  if (protocol == 0) {
    const std::string v = agent_torch_version();
    protocol = torch_store_protocol(v);
    if (protocol == 0)
      throw ConfigError("PARITY_TORCH_STORE",
                        "missing: torchrun's agent serves the store (TORCHELASTIC_USE_AGENT_STORE=True) but its torch "
                        "version could not be read (" +
                            (v.empty() ? "no ancestor of this process maps torch" : "'" + v + "'") +
                            "); set PARITY_TORCH_STORE=1 for torch before 2.2, 2 for torch 2.2 and later");
  }
  auto store = std::make_shared<TorchStore>(env.master_addr, env.master_port, protocol, env.store_prefix, env.timeout);
  const int64_t joined = store->add("joined", 1, env.timeout);
  if (joined > env.world_size)
    throw ConfigError("TORCHELASTIC_RUN_ID", "rank " + std::to_string(env.rank) + " is number " +
                                                 std::to_string(joined) + " to join a world of " +
                                                 std::to_string(env.world_size) + " on the store " + store->where() +
                                                 ": another world uses this run id and restart count");
  return make_store_rendezvous(std::move(store));
}

}  // namespace parity::comm
