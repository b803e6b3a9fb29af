// A Redis store for the rendezvous across hosts, for those who run a Redis server
// (PARITY_STORE=redis://HOST[:PORT][/RUN], comm/rank_env.h).
//
// The Debian gloo does ship a RedisStore (built with hiredis), but it cannot serve here: its
// calls have no timeout (a store behind a cut link would hold a failure's diagnosis for
// ever), it sets keys only once (SETNX: a failure note cannot be updated), it does not
// namespace a run's keys and never removes them. This one is on libhiredis directly:
//   - every key of a run lives under "parity:RUN:" (two runs with other RUN ids never see
//     each other's keys); every key expires after kKeyTtl (a crashed run's keys do not stay);
//   - a key belongs to the client that wrote it first (its value carries a random token of
//     that client): a second run with the same RUN id that writes one of this run's keys is
//     refused with a ConfigError naming PARITY_RUN_ID instead of corrupting it;
//   - rank 0 claims the run ("parity:RUN:world" = the world size); the others wait for the
//     claim (the collective timeout) and check the world size (ConfigError naming WORLD_SIZE);
//   - at the end, rank 0 deletes the run's keys; after a failure (a note was posted) it only
//     shortens their life to kFailedTtl, so that the other ranks can still read the notes;
//   - each call waits at most its timeout for the server; a timeout or a broken connection
//     makes the client unusable for good, and every later call throws CommError naming the
//     store (a rank that lost its store has failed: exit 3).
#pragma once
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "comm/rendezvous.h"

struct redisContext;

namespace parity::comm {

struct RedisUrl {
  std::string host;
  int port = 6379;
  std::string run;  // "" when the URL has no path
};

// "redis://HOST[:PORT][/RUN]" (HOST may be "[v6addr]"); ConfigError naming `var` otherwise.
// RUN: letters, digits and "._-" (at most 128).
RedisUrl parse_redis_url(const std::string& url, const std::string& var = "PARITY_STORE");

class RedisStore : public KeyValueStore {
 public:
  static constexpr std::chrono::seconds kKeyTtl{24 * 3600};
  static constexpr std::chrono::seconds kFailedTtl{120};

  // Connects within `timeout` (retrying while the server does not answer yet). rank 0 claims
  // the run; the others wait for the claim (rank < 0: a plain client, no claim, no cleanup:
  // tests). Throws CommError when the server cannot be reached, ConfigError naming
  // PARITY_RUN_ID (the run is taken) or WORLD_SIZE (the claim is for another world size).
  RedisStore(const RedisUrl& url, int rank, int world_size, std::chrono::milliseconds timeout);
  ~RedisStore() override;  // rank 0: the run's keys removed (or, after a failure, expiring)
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  void set(const std::string& key, const std::string& value, std::chrono::milliseconds op_timeout) override;
  std::optional<std::string> try_get(const std::string& key, std::chrono::milliseconds op_timeout) override;
  std::string where() const override;  // "at 10.0.0.1:6379 (Redis store, run r42)"

  // Removes every key of this run now; returns how many there were. Throws CommError.
  long long remove_run_keys(std::chrono::milliseconds op_timeout);

 private:
  struct Reply;
  Reply command(std::chrono::milliseconds op_timeout, const char* what, const std::string& key,
                const std::vector<std::string>& argv);
  void claim_or_join(int rank, int world_size, std::chrono::milliseconds timeout);
  void finish();

  RedisUrl url_;
  std::string prefix_;  // "parity:RUN:"
  std::string token_;   // this client's owner token, fixed length
  int rank_;
  bool failed_ = false;  // a failure note was posted through this client
  std::mutex mu_;
  redisContext* ctx_ = nullptr;
  std::string broken_;  // why this client cannot be used any more ("" while it can)
};

// The rendezvous of a world on a Redis server.
std::unique_ptr<Rendezvous> make_redis_rendezvous(const RedisUrl& url, int rank, int world_size,
                                                  std::chrono::milliseconds timeout);

}  // namespace parity::comm
