// The TCP store of the rendezvous across hosts (comm/tcp_store.h) on loopback, in one
// process: its requests, its refusals, a store that goes away, and whole gloo worlds (threads
// as ranks) that meet through it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "comm/gloo/gloo_communicator.h"
#include "comm/net.h"
#include "comm/tcp_store.h"
#include "comm/world.h"
#include "core/clock.h"
#include "core/error.h"

using namespace parity;
using namespace parity::comm;
using ms = std::chrono::milliseconds;

using parity::seconds_since;

namespace {

// A port nothing listens on right now (bound, then released).
int free_port() {
  int port = 0;
  const int fd = net::listen_on("127.0.0.1", 0, &port);
  close(fd);
  return port;
}

}  // namespace

TEST(TcpStore, SetGetWaitBetweenClients) {
  auto server = std::make_shared<TcpStoreServer>("127.0.0.1", 0, 2);
  TcpStore a("127.0.0.1", server->port(), 2, ms(5000), server);
  TcpStore b("127.0.0.1", server->port(), 2, ms(5000));
  EXPECT_FALSE(b.try_get("k", ms(1000)));
  a.set("k", std::string("v\0w", 3), ms(1000));
  EXPECT_EQ(*b.try_get("k", ms(1000)), std::string("v\0w", 3));
  a.set("empty", std::vector<char>{});  // gloo's Store interface
  EXPECT_EQ(b.get("empty").size(), 0u);
  std::thread later([&] {
    std::this_thread::sleep_for(ms(100));
    a.set("late", std::string(3 << 20, 'x'), ms(5000));  // larger than one socket buffer
  });
  b.wait({"late"}, ms(5000));
  later.join();
  EXPECT_EQ(b.get("late").size(), size_t{3} << 20);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(b.wait({"never"}, ms(200)), CommError);
  EXPECT_LT(seconds_since(t0), 2.0);
  EXPECT_NE(a.where().find("127.0.0.1:" + std::to_string(server->port())), std::string::npos);
}

TEST(TcpStore, RefusesAServerOfAnotherWorldSize) {
  auto server = std::make_shared<TcpStoreServer>("127.0.0.1", 0, 4);
  try {
    TcpStore c("127.0.0.1", server->port(), 8, ms(2000));
    FAIL() << "a client of a world of 8 joined a store of a world of 4";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "WORLD_SIZE");
    EXPECT_NE(std::string(e.what()).find("serves a world of 4"), std::string::npos) << e.what();
  }
}

TEST(TcpStore, NobodyListeningTimesOutNamingTheAddress) {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    TcpStore c("127.0.0.1", port, 2, ms(400));
    FAIL() << "connected to a port nobody listens on";
  } catch (const CommError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << m;
    EXPECT_NE(m.find("did not answer within 400 ms"), std::string::npos) << m;
  }
  EXPECT_LT(seconds_since(t0), 3.0);
}

TEST(TcpStore, AStoreThatGoesAwayBreaksItsClientsAndBoardsStaySilent) {
  auto server = std::make_shared<TcpStoreServer>("127.0.0.1", 0, 2);
  auto client = std::make_shared<TcpStore>("127.0.0.1", server->port(), 2, ms(2000));
  auto rdzv = make_store_rendezvous(client);
  auto board = rdzv->board("world", {0, 1}, 1);
  board->post("allreduce #1");
  EXPECT_EQ(board->read(1), "allreduce #1");
  server.reset();  // rank 0 has gone
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(client->set("k", "v", ms(500)), CommError);
  EXPECT_THROW(client->try_get("k", ms(500)), CommError) << "broken for good";
  board->post("allreduce #2");  // a board never throws: the diagnosis goes on without the store
  EXPECT_FALSE(board->read(0));
  EXPECT_LT(seconds_since(t0), 3.0);
}

TEST(TcpStore, GlooWorldOfFourMeetsThroughIt) {
  constexpr int W = 4;
  auto server = std::make_shared<TcpStoreServer>("127.0.0.1", 0, W);
  std::vector<int64_t> sums(W, -1), group_sums(W, -1);
  std::vector<std::thread> ranks;
  for (int r = 0; r < W; ++r)
    ranks.emplace_back([&, r] {
      auto store = std::make_shared<TcpStore>("127.0.0.1", server->port(), W, ms(20000), r == 0 ? server : nullptr);
      auto world = make_gloo_world(r, W, make_store_rendezvous(store), "127.0.0.1", ms(20000));
      std::vector<int64_t> x = {r};
      world->allreduce(std::span<int64_t>(x), ReduceOp::sum);
      sums[static_cast<size_t>(r)] = x[0];
      auto& g = world->group(r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3});
      std::vector<int64_t> y = {r};
      g.allreduce(std::span<int64_t>(y), ReduceOp::sum);
      group_sums[static_cast<size_t>(r)] = y[0];
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(sums[static_cast<size_t>(r)], 0 + 1 + 2 + 3);
    EXPECT_EQ(group_sums[static_cast<size_t>(r)], r % 2 == 0 ? 0 + 2 : 1 + 3);
  }
}

TEST(TcpStore, MakeWorldCommunicatorFromATorchrunStyleEnvironment) {
  // What MASTER_ADDR / MASTER_PORT give: rank 0 serves the store, gloo binds the address on
  // the route to the master (loopback here).
  constexpr int W = 3;
  const int port = free_port();
  std::vector<int64_t> got(W, -1);
  std::vector<std::thread> ranks;
  for (int r = 0; r < W; ++r)
    ranks.emplace_back([&, r] {
      RankEnv e;
      e.rank = r, e.world_size = W, e.local_rank = r, e.local_world_size = W;
      e.rendezvous = RendezvousKind::tcp;
      e.master_addr = "127.0.0.1", e.master_port = port;
      e.timeout = ms(20000);
      auto world = make_world_communicator(e);
      std::vector<double> x = {1.0 + r};
      world->allreduce(std::span<double>(x), ReduceOp::max);
      got[static_cast<size_t>(r)] = static_cast<int64_t>(x[0]);
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < W; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], W);
}
