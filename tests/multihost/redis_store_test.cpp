// The Redis store (comm/redis_store.h) against a real redis-server that each test starts on a
// private loopback port and stops itself. Without redis-server in PATH the binary prints why and
// exits 77 (ctest SKIP_RETURN_CODE): skipped, visibly, never passed.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "comm/rank_env.h"
#include "comm/redis_store.h"
#include "core/error.h"

namespace parity::comm {
namespace {

using ms = std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A redis-server of this test's own on 127.0.0.1:port, no persistence.
class Server {
 public:
  Server() : port_(free_port()) {
    pid_ = fork();
    if (pid_ == 0) {
      const std::string p = std::to_string(port_);
      if (std::freopen("/dev/null", "w", stdout) == nullptr) _exit(126);  // its start-up banner
      execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1", "--save", "", "--appendonly",
             "no", "--loglevel", "warning", static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 200; ++i) {  // until it answers PING
      if (redisContext* c = redisConnect("127.0.0.1", port_); c != nullptr) {
        const bool up = c->err == 0;
        redisFree(c);
        if (up) return;
      }
      std::this_thread::sleep_for(ms(20));
    }
    ADD_FAILURE() << "redis-server did not start on port " << port_;
  }
  ~Server() { stop(); }
  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void pause(bool on) { kill(pid_, on ? SIGSTOP : SIGCONT); }
  RedisUrl url(const std::string& run) const { return {"127.0.0.1", port_, run}; }
  // The server's own view: how many keys match, and a key's remaining life (-2: none).
  long long count(const std::string& pattern) const {
    return query("EVAL %s 0 %s", "return #redis.call('keys', ARGV[1])", pattern.c_str());
  }
  long long ttl(const std::string& key) const { return query("TTL %s", key.c_str()); }

 private:
  template <class... A> long long query(const char* fmt, A... args) const {
    redisContext* c = redisConnect("127.0.0.1", port_);
    auto* r = static_cast<redisReply*>(redisCommand(c, fmt, args...));
    const long long v = r != nullptr && r->type == REDIS_REPLY_INTEGER ? r->integer : -999;
    if (r != nullptr) freeReplyObject(r);
    redisFree(c);
    return v;
  }
  int port_;
  pid_t pid_ = -1;
};

TEST(RedisUrl, ParsesHostPortAndRun) {
  RedisUrl u = parse_redis_url("redis://10.0.0.1:6390/run-7");
  EXPECT_EQ(u.host, "10.0.0.1");
  EXPECT_EQ(u.port, 6390);
  EXPECT_EQ(u.run, "run-7");
  u = parse_redis_url("redis://cache.internal");
  EXPECT_EQ(u.host, "cache.internal");
  EXPECT_EQ(u.port, 6379);
  EXPECT_EQ(u.run, "");
  u = parse_redis_url("redis://[::1]:7000/x");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, 7000);
}

TEST(RedisUrl, RefusesMalformedNamingTheVariable) {
  for (const char* bad : {"http://h:1/x", "redis://:6379/x", "redis://h:0/x", "redis://h:99999/x", "redis://h:/x",
                          "redis://h/a b", "redis://h/a*"}) {
    try {
      parse_redis_url(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("PARITY_STORE"), std::string::npos) << e.what();
    }
  }
}

TEST(RedisRankEnv, PicksTheStoreAndNeedsARunId) {
  auto env = [](std::map<std::string, std::string> m) {
    return [m](const std::string& n) -> std::optional<std::string> {
      auto it = m.find(n);
      return it == m.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
  };
  RankEnv e = parse_rank_env(env({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"PARITY_STORE", "redis://h:7/r1"},
                                  {"MASTER_ADDR", "m"}, {"MASTER_PORT", "1"}}));
  EXPECT_EQ(e.rendezvous, RendezvousKind::redis);  // PARITY_STORE wins over MASTER_ADDR
  EXPECT_EQ(e.store_url, "redis://h:7/r1");
  e = parse_rank_env(env({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"PARITY_STORE", "redis://h"}, {"PARITY_RUN_ID", "j9"}}));
  EXPECT_EQ(e.store_url, "redis://h:6379/j9");
  try {
    parse_rank_env(env({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"PARITY_STORE", "redis://h"}}));
    ADD_FAILURE() << "no run id accepted";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("PARITY_RUN_ID"), std::string::npos) << err.what();
  }
}

TEST(RedisStore, SetGetAndAMissingKey) {
  Server s;
  RedisStore st(s.url("a"), -1, 1, ms(2000));
  EXPECT_FALSE(st.try_get("k", ms(500)).has_value());
  st.set("k", std::string("v\0w", 3), ms(500));
  EXPECT_EQ(st.try_get("k", ms(500)), std::string("v\0w", 3));
  st.set("k", "again", ms(500));  // its own key: overwritten
  EXPECT_EQ(st.try_get("k", ms(500)), "again");
  EXPECT_EQ(s.count("parity:a:k"), 1);
  const long long ttl = s.ttl("parity:a:k");
  EXPECT_GT(ttl, 0);  // every key expires
  EXPECT_LE(ttl, RedisStore::kKeyTtl.count());
}

TEST(RedisStore, RunsWithOtherIdsDoNotSeeEachOther) {
  Server s;
  RedisStore a(s.url("runA"), -1, 1, ms(2000)), b(s.url("runB"), -1, 1, ms(2000));
  a.set("world.blob.0", "from A", ms(500));
  EXPECT_FALSE(b.try_get("world.blob.0", ms(500)).has_value());
  b.set("world.blob.0", "from B", ms(500));
  EXPECT_EQ(a.try_get("world.blob.0", ms(500)), "from A");
  EXPECT_EQ(b.try_get("world.blob.0", ms(500)), "from B");
}

TEST(RedisStore, ASecondRunWithTheSameIdIsRefused) {
  Server s;
  RedisStore first(s.url("same"), 0, 2, ms(2000));
  try {
    RedisStore second(s.url("same"), 0, 2, ms(2000));
    ADD_FAILURE() << "a second rank 0 claimed the run";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("PARITY_RUN_ID"), std::string::npos) << e.what();
  }
  RedisStore mine(s.url("same"), -1, 1, ms(2000)), other(s.url("same"), -1, 1, ms(2000));
  mine.set("world.blob.1", "x", ms(500));
  EXPECT_THROW(other.set("world.blob.1", "y", ms(500)), ConfigError);  // not its key
  EXPECT_EQ(mine.try_get("world.blob.1", ms(500)), "x");
}

TEST(RedisStore, JoinChecksTheWorldSizeAndWaitsForTheClaim) {
  Server s;
  const auto t0 = steady::now();
  EXPECT_THROW(RedisStore(s.url("j"), 1, 4, ms(300)), CommError);  // nobody claimed the run
  EXPECT_LT(steady::now() - t0, ms(2000));
  RedisStore zero(s.url("j"), 0, 4, ms(2000));
  EXPECT_NO_THROW(RedisStore(s.url("j"), 3, 4, ms(2000)));
  try {
    RedisStore wrong(s.url("j"), 1, 8, ms(2000));
    ADD_FAILURE() << "a world of 8 joined a world of 4";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("WORLD_SIZE"), std::string::npos) << e.what();
  }
}

TEST(RedisStore, RankZeroRemovesTheRunsKeysAtTheEnd) {
  Server s;
  {
    RedisStore zero(s.url("c"), 0, 2, ms(2000));
    zero.set("world.blob.0", "b", ms(500));
    RedisStore one(s.url("c"), 1, 2, ms(2000));
    one.set("world.blob.1", "b", ms(500));
    RedisStore other(s.url("keep"), -1, 1, ms(2000));
    other.set("k", "v", ms(500));
    EXPECT_EQ(s.count("parity:c:*"), 3);
  }
  EXPECT_EQ(s.count("parity:c:*"), 0);
  EXPECT_EQ(s.count("parity:keep:*"), 1);  // another run's keys stay
}

TEST(RedisStore, AfterAFailureTheKeysOnlyExpireSoon) {
  Server s;
  {
    RedisStore zero(s.url("f"), 0, 2, ms(2000));
    zero.set("world.fail.0", "allreduce #3", ms(500));
  }
  EXPECT_EQ(s.count("parity:f:*"), 2);  // the claim and the note, for the others to read
  EXPECT_GT(s.ttl("parity:f:world.fail.0"), 0);
  EXPECT_LE(s.ttl("parity:f:world.fail.0"), RedisStore::kFailedTtl.count());
}

TEST(RedisStore, AServerThatDoesNotAnswerTimesOutNamingTheStore) {
  Server s;
  RedisStore st(s.url("t"), -1, 1, ms(2000));
  s.pause(true);
  const auto t0 = steady::now();
  try {
    st.try_get("k", ms(300));
    ADD_FAILURE() << "a stopped server answered";
  } catch (const CommError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("(Redis store, run t)"), std::string::npos) << m;
    EXPECT_NE(m.find("no answer within 300 ms"), std::string::npos) << m;
  }
  const auto took = steady::now() - t0;
  EXPECT_GE(took, ms(250));
  EXPECT_LT(took, ms(1500));
  EXPECT_THROW(st.set("k", "v", ms(300)), CommError);  // broken for good, at once
  s.pause(false);
}

TEST(RedisStore, AServerGoneMidRunIsACommErrorNamingTheStore) {
  Server s;
  RedisStore st(s.url("g"), -1, 1, ms(2000));
  st.set("k", "v", ms(500));
  s.stop();
  try {
    st.try_get("k", ms(500));
    ADD_FAILURE() << "a killed server answered";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("at 127.0.0.1:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Redis store"), std::string::npos) << e.what();
  }
}

TEST(RedisStore, NoServerIsACommErrorWithinTheTimeout) {
  const int port = free_port();  // nothing listens there
  const auto t0 = steady::now();
  try {
    RedisStore st({"127.0.0.1", port, "n"}, 0, 2, ms(400));
    ADD_FAILURE() << "connected to nothing";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("did not answer within 400 ms"), std::string::npos) << e.what();
  }
  EXPECT_LT(steady::now() - t0, ms(2000));
}

}  // namespace
}  // namespace parity::comm

int main(int argc, char** argv) {
  if (std::system("command -v redis-server >/dev/null 2>&1") != 0) {
    std::printf(
        "redis_store_test: SKIP: no redis-server in PATH (Debian package redis-server; ci/setup installs it)\n");
    return 77;
  }
  signal(SIGPIPE, SIG_IGN);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
