// A client of the store torchrun's agent already serves (PyTorch's TCPStore), for ranks that
// torchrun starts with TORCHELASTIC_USE_AGENT_STORE=True (comm/rank_env.h). In that mode the
// agent itself listens on MASTER_ADDR:MASTER_PORT, so rank 0 cannot serve parity's own TCP
// store there; the ranks meet in the agent's store instead, under a prefix of their own.
//
// The wire protocol (little-endian, as torch writes it on x86 and arm64): a request is a
// query byte and its arguments; a string or byte vector is a u64 length and its bytes.
//   set    key, value        -> nothing
//   check  u64 n, n keys      -> u8: 0 every key exists, 1 not
//   get    key               -> value (only asked after a check found the key)
//   add    key, i64          -> i64, the new value (the key holds it as decimal text)
// Two dialects, chosen by the agent's torch version:
//   torch 1.x (to 2.1)       no handshake; set 0, get 2, add 3, check 4 (observed against
//                            torch 1.13's own server: tests/python/torchrun_test.py, mode keys)
//   torch 2.2 and later      first a validation: query 0 and the u32 0x3C85F7CE; then
//                            set 1, get 3, add 4, check 5 (read from torch's TCPStore
//                            sources, the libuv server's and the classic one's; not run here)
// A dialect that the server does not speak may hang or corrupt the agent's store, so it is
// never guessed by probing: PARITY_TORCH_STORE=1|2, else the torch that the agent (this
// process's parent, or an ancestor: a wrapper shell) has mapped, read from /proc.
// Every key lives under "/parity/RUN/attempt_N/" (TORCHELASTIC_RUN_ID and
// TORCHELASTIC_RESTART_COUNT): torch's own keys never start with "/parity/", and a restarted
// attempt never reads the keys of the one before. Keys are left to die with the agent.
// Each call waits at most its timeout; a timeout or a broken connection makes the client
// unusable for good (CommError naming the store, exit 3).
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "comm/rendezvous.h"

namespace parity::comm {

// 1 or 2 (above) for a torch version string ("1.13.0a0", "2.4.1+cu121"); 0 when it is not one.
int torch_store_protocol(const std::string& torch_version);

// The version of the torch mapped by this process's nearest ancestor that maps one (at most 8
// generations up: the torchrun agent), e.g. "1.13.0a0"; "" when none does or it cannot be read.
std::string agent_torch_version();

class TorchStore : public KeyValueStore {
 public:
  // Connects to the agent's store within `timeout` (it is up before any rank starts) and,
  // with protocol 2, validates. `prefix` starts and ends with '/'.
  TorchStore(const std::string& host, int port, int protocol, std::string prefix, std::chrono::milliseconds timeout);
  ~TorchStore() override;

  void set(const std::string& key, const std::string& value, std::chrono::milliseconds op_timeout) override;
  std::optional<std::string> try_get(const std::string& key, std::chrono::milliseconds op_timeout) override;
  std::string where() const override;  // "at 10.0.0.1:29500 (torchrun's agent store, torch 1 protocol)"
  int64_t add(const std::string& key, int64_t delta, std::chrono::milliseconds op_timeout);

 private:
  enum class Op { set, get, add, check };
  uint8_t code(Op op) const;
  // Sends one request and reads `n` bytes of its answer (0: none) into *answer.
  void call(const char* what, const std::string& key, const std::string& request, size_t n, std::string* answer,
            std::chrono::steady_clock::time_point deadline);
  bool exchange(const std::string& request, size_t n, std::string* answer,
                std::chrono::steady_clock::time_point deadline, std::string* why);

  std::string host_;
  int port_;
  int protocol_;
  std::string prefix_;
  std::mutex mu_;
  int fd_ = -1;
  std::string broken_;
};

// The rendezvous of ranks torchrun started with TORCHELASTIC_USE_AGENT_STORE=True: the agent's
// store at env.master_addr:env.master_port, keys under env.store_prefix, protocol
// env.torch_protocol or else the agent's torch (ConfigError naming PARITY_TORCH_STORE when it
// cannot be told). Every rank counts itself in ("joined"); a count above the world size means
// another world uses this run id and attempt: ConfigError naming TORCHELASTIC_RUN_ID.
std::unique_ptr<Rendezvous> make_torch_rendezvous(const RankEnv& env);

}  // namespace parity::comm
