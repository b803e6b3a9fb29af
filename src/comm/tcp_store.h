// A TCP key-value store for the rendezvous across hosts (MASTER_ADDR:MASTER_PORT).
//
// The Debian gloo (2022) ships a FileStore, a HashStore and a RedisStore (built without
// hiredis here), but no TCP store; this is a small one behind gloo's Store interface. Rank 0
// serves it on a thread of its own process; every rank, rank 0 included, is a client with
// one connection. Requests (one at a time per client, answered in order):
//   'H' hello  value = world size   -> the server's world size (a stale server of another run,
//                                      or hosts that disagree on WORLD_SIZE, are refused)
//   'S' set    key, value            -> ok
//   'G' get    key                   -> found + value, or not found (never waits for the key)
// Frame: op (1 byte), key length, value length (u32 each, host order: one build), key, value.
// Answer: status (1 byte), value length (u32), value.
// A client whose request times out or whose connection breaks is broken for good: every
// later call throws CommError at once (a rank that lost the store has failed anyway).
#pragma once
#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/rendezvous.h"

namespace parity::comm {

class TcpStoreServer {
 public:
  // Listens on host:port (port 0: any free port; a host that is not a local address: every
  // address). Throws CommError when it cannot (the port is taken).
  TcpStoreServer(const std::string& host, int port, int world_size);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class TcpStore : public gloo::rendezvous::Store, public KeyValueStore {
 public:
  // Connects to host:port within `timeout` (retrying while the server is not up yet) and
  // says hello; `serving`, if given, is kept alive as long as this client (rank 0's server).
  // Throws CommError when the store cannot be reached, ConfigError (naming WORLD_SIZE) when
  // it serves a world of another size.
  TcpStore(const std::string& host, int port, int world_size, std::chrono::milliseconds timeout,
           std::shared_ptr<TcpStoreServer> serving = nullptr);
  ~TcpStore() override;

  // gloo's Store: get and wait block until the keys exist (the constructor's timeout, or the
  // one given), polling every few milliseconds.
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // KeyValueStore (comm/rendezvous.h)
  void set(const std::string& key, const std::string& value, std::chrono::milliseconds op_timeout) override;
  std::optional<std::string> try_get(const std::string& key, std::chrono::milliseconds op_timeout) override;
  std::string where() const override;  // "at 10.213.0.1:29500 (rank 0's TCP store)"

 private:
  // One request and its answer; returns the status byte and fills *value.
  uint8_t request(char op, const std::string& key, const std::string& value, std::chrono::milliseconds op_timeout,
                  std::string* answer);

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<TcpStoreServer> serving_;
  std::mutex mu_;
  int fd_ = -1;
  std::string broken_;  // why this client cannot be used any more ("" while it can)
};

// The rendezvous of a world across hosts: rank 0 starts the server on host:port, every rank
// connects within `timeout`.
std::unique_ptr<Rendezvous> make_tcp_rendezvous(const std::string& host, int port, int rank, int world_size,
                                                std::chrono::milliseconds timeout);

}  // namespace parity::comm
