#include "comm/redis_store.h"

#include <hiredis/hiredis.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "core/error.h"

namespace parity::comm {

namespace {

using ms = std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

constexpr size_t kTokenLen = 16;
constexpr size_t kMaxRun = 128;

timeval to_timeval(ms t) {
  if (t < ms(1)) t = ms(1);
  return timeval{static_cast<time_t>(t.count() / 1000), static_cast<suseconds_t>((t.count() % 1000) * 1000)};
}

std::string new_token() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid()));
  char buf[kTokenLen + 1];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(gen()));
  return std::string(buf, kTokenLen);
}

bool run_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

}  // namespace

RedisUrl parse_redis_url(const std::string& url, const std::string& var) {
  const std::string scheme = "redis://";
  if (url.rfind(scheme, 0) != 0) throw ConfigError(var, "expected redis://HOST[:PORT][/RUN], got '" + url + "'");
  std::string rest = url.substr(scheme.size());
  RedisUrl out;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    out.run = rest.substr(slash + 1);
    rest.erase(slash);
  }
  std::string port;
  if (!rest.empty() && rest[0] == '[') {  // [v6]:port
    const size_t rb = rest.find(']');
    if (rb == std::string::npos) throw ConfigError(var, "unclosed '[' in '" + url + "'");
    out.host = rest.substr(1, rb - 1);
    if (rb + 1 < rest.size()) {
      if (rest[rb + 1] != ':') throw ConfigError(var, "expected ':PORT' after ']' in '" + url + "'");
      port = rest.substr(rb + 2);
    }
  } else {
    const size_t colon = rest.rfind(':');
    out.host = rest.substr(0, colon);
    if (colon != std::string::npos) port = rest.substr(colon + 1);
  }
  if (out.host.empty()) throw ConfigError(var, "no host in '" + url + "'");
  if (!port.empty() || rest.back() == ':') {
    const bool digits = !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos;
    out.port = digits ? std::stoi(port) : 0;
    if (out.port < 1 || out.port > 65535)
      throw ConfigError(var, "port must be in [1, 65535], got '" + port + "' in '" + url + "'");
  }
  if (out.run.size() > kMaxRun) throw ConfigError(var, "run id longer than " + std::to_string(kMaxRun) + " characters");
  for (char c : out.run)
    if (!run_char(c)) throw ConfigError(var, "run id '" + out.run + "' may hold only letters, digits and . _ -");
  return out;
}

struct RedisStore::Reply {
  struct Free {
    void operator()(redisReply* r) const { freeReplyObject(r); }
  };
  std::unique_ptr<redisReply, Free> r;
  bool nil() const { return r->type == REDIS_REPLY_NIL; }
  std::string str() const { return std::string(r->str, r->len); }
};

RedisStore::RedisStore(const RedisUrl& url, int rank, int world_size, ms timeout)
    : url_(url), prefix_("parity:" + url.run + ":"), token_(new_token()), rank_(rank) {
  const auto deadline = steady::now() + timeout;
  std::string last;
  for (;;) {
    const ms left = std::chrono::duration_cast<ms>(deadline - steady::now());
    ctx_ = redisConnectWithTimeout(url_.host.c_str(), url_.port, to_timeval(std::min(left, ms(1000))));
    if (ctx_ != nullptr && ctx_->err == 0) break;
    last = ctx_ != nullptr ? ctx_->errstr : "out of memory";
    if (ctx_ != nullptr) redisFree(ctx_);
    ctx_ = nullptr;
    if (steady::now() + ms(50) > deadline)
      throw CommError("rendezvous: the Redis store " + where() + " did not answer within " +
                      std::to_string(timeout.count()) + " ms: " + last +
                      " (is redis-server running there, and is PARITY_STORE the same for every rank?)");
    std::this_thread::sleep_for(ms(50));
  }
  try {
    if (rank >= 0) claim_or_join(rank, world_size, timeout);
  } catch (...) {
    redisFree(ctx_);
    ctx_ = nullptr;
    throw;
  }
}

RedisStore::~RedisStore() {
  if (rank_ == 0) finish();
  if (ctx_ != nullptr) redisFree(ctx_);
}

std::string RedisStore::where() const {
  const bool v6 = url_.host.find(':') != std::string::npos;
  return "at " + (v6 ? "[" + url_.host + "]" : url_.host) + ":" + std::to_string(url_.port) + " (Redis store, run " +
         url_.run + ")";
}

RedisStore::Reply RedisStore::command(ms op_timeout, const char* what, const std::string& key,
                                      const std::vector<std::string>& argv) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.empty()) throw CommError("store " + where() + " is unusable after an earlier failure: " + broken_);
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (const auto& a : argv) args.push_back(a.data()), lens.push_back(a.size());
  redisSetTimeout(ctx_, to_timeval(op_timeout));
  auto* raw = static_cast<redisReply*>(redisCommandArgv(ctx_, static_cast<int>(args.size()), args.data(), lens.data()));
  if (raw == nullptr || ctx_->err != 0) {
    if (raw != nullptr) freeReplyObject(raw);
    std::string why = ctx_->errstr;
    if (why.find("temporarily unavailable") != std::string::npos || why.find("timed out") != std::string::npos)
      why = "no answer within " + std::to_string(op_timeout.count()) + " ms";
    broken_ = std::string(what) + " '" + key + "': " + why;
    throw CommError("store " + where() + ": " + broken_);
  }
  Reply reply{std::unique_ptr<redisReply, Reply::Free>(raw)};
  if (raw->type == REDIS_REPLY_ERROR)
    throw CommError("store " + where() + ": " + what + " '" + key + "': the server answered: " + reply.str());
  return reply;
}

void RedisStore::set(const std::string& key, const std::string& value, ms op_timeout) {
  const std::string full = prefix_ + key, stored = token_ + value, ttl = std::to_string(kKeyTtl.count());
  if (key.find(".fail.") != std::string::npos) failed_ = true;  // a failure note (rendezvous.cpp's board)
  if (!command(op_timeout, "set", key, {"SET", full, stored, "NX", "EX", ttl}).nil()) return;
  Reply old = command(op_timeout, "get", key, {"GET", full});
  if (!old.nil() && old.str().compare(0, kTokenLen, token_) != 0)
    throw ConfigError("PARITY_RUN_ID", "key '" + key + "' of run '" + url_.run + "' on the store " + where() +
                                           " was written by another process: two runs share the run id '" +
                                           url_.run + "' (give each run its own)");
  command(op_timeout, "set", key, {"SET", full, stored, "EX", ttl});
}

std::optional<std::string> RedisStore::try_get(const std::string& key, ms op_timeout) {
  Reply r = command(op_timeout, "get", key, {"GET", prefix_ + key});
  if (r.nil()) return std::nullopt;
  std::string v = r.str();
  return v.size() >= kTokenLen ? v.substr(kTokenLen) : std::string();
}

void RedisStore::claim_or_join(int rank, int world_size, ms timeout) {
  const std::string ws = std::to_string(world_size);
  if (rank == 0) {
    Reply r = command(timeout, "claim", "world",
                      {"SET", prefix_ + "world", token_ + ws, "NX", "EX", std::to_string(kKeyTtl.count())});
    if (r.nil())
      throw ConfigError("PARITY_RUN_ID",
                        "run '" + url_.run + "' is already on the store " + where() +
                            ": another run uses this run id, or one that failed within the last " +
                            std::to_string(kFailedTtl.count()) + " s or crashed within " +
                            std::to_string(kKeyTtl.count() / 3600) +
                            " h (its keys expire then; or: redis-cli -h HOST -p PORT --scan --pattern '" + prefix_ +
                            "*' | xargs redis-cli -h HOST -p PORT del)");
    return;
  }
  const auto deadline = steady::now() + timeout;
  std::optional<std::string> theirs;
  while (!(theirs = try_get("world", timeout))) {
    if (steady::now() > deadline)
      throw CommError("rendezvous: rank 0 did not claim run '" + url_.run + "' on the store " + where() + " within " +
                      std::to_string(timeout.count()) +
                      " ms (is rank 0 running, with the same PARITY_STORE and run id?)");
    std::this_thread::sleep_for(ms(20));
  }
  if (*theirs != ws)
    throw ConfigError("WORLD_SIZE", "this rank is in a world of " + ws + ", but run '" + url_.run + "' on the store " +
                                        where() + " is a world of " + *theirs +
                                        " (WORLD_SIZE differs between hosts, or another run uses this run id)");
}

long long RedisStore::remove_run_keys(ms op_timeout) {
  long long removed = 0;
  std::string cursor = "0";
  do {
    Reply r = command(op_timeout, "scan", prefix_ + "*", {"SCAN", cursor, "MATCH", prefix_ + "*", "COUNT", "1000"});
    if (r.r->type != REDIS_REPLY_ARRAY || r.r->elements != 2)
      throw CommError("store " + where() + ": unexpected SCAN reply");
    cursor = std::string(r.r->element[0]->str, r.r->element[0]->len);
    const redisReply* keys = r.r->element[1];
    if (keys->elements == 0) continue;
    std::vector<std::string> del{"DEL"};
    for (size_t i = 0; i < keys->elements; ++i) del.emplace_back(keys->element[i]->str, keys->element[i]->len);
    removed += command(op_timeout, "del", prefix_ + "*", del).r->integer;
  } while (cursor != "0");
  return removed;
}

void RedisStore::finish() {
  if (!broken_.empty()) return;
  const ms op(2000);
  try {
    if (!failed_) {
      remove_run_keys(op);
      return;
    }
    // After a failure the other ranks may still be reading the notes: the keys expire soon instead.
    std::string cursor = "0";
    do {
      Reply r = command(op, "scan", prefix_ + "*", {"SCAN", cursor, "MATCH", prefix_ + "*", "COUNT", "1000"});
      if (r.r->type != REDIS_REPLY_ARRAY || r.r->elements != 2) return;
      cursor = std::string(r.r->element[0]->str, r.r->element[0]->len);
      for (size_t i = 0; i < r.r->element[1]->elements; ++i) {
        const redisReply* k = r.r->element[1]->element[i];
        command(op, "expire", std::string(k->str, k->len),
                {"EXPIRE", std::string(k->str, k->len), std::to_string(kFailedTtl.count())});
      }
    } while (cursor != "0");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity: warning: run '%s' left keys on the store %s (they expire within %lld h): %s\n",
                 url_.run.c_str(), where().c_str(), static_cast<long long>(kKeyTtl.count() / 3600), e.what());
  }
}

std::unique_ptr<Rendezvous> make_redis_rendezvous(const RedisUrl& url, int rank, int world_size, ms timeout) {
  return make_store_rendezvous(std::make_shared<RedisStore>(url, rank, world_size, timeout));
}

}  // namespace parity::comm
