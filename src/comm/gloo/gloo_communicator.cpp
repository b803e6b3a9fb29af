#include "comm/gloo/gloo_communicator.h"
#include "comm/gloo/shm_communicator.h"

#include <csignal>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <gloo/types.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/knobs.h"

namespace parity::comm {

namespace {

using ms = std::chrono::milliseconds;

// Blob published at rendezvous: "host\npid" (length-prefixed), then one transport address
// per peer, in rank order skipping this rank.
std::string encode_blob(const std::string& peer, const std::vector<std::vector<char>>& addrs) {
  uint32_t len = static_cast<uint32_t>(peer.size());
  std::string blob(reinterpret_cast<const char*>(&len), sizeof(len));
  blob += peer;
  for (const auto& a : addrs) blob.append(a.begin(), a.end());
  return blob;
}

// The listener a peer's transport address names: what a diagnosis probes (comm/reach.h).
void set_probe(PeerInfo& p, const std::vector<char>& addr) {
  const gloo::transport::tcp::Address address(addr);
  sockaddr_storage ss{};
  std::memcpy(&ss, &address.getSockaddr(), sizeof ss);
  char host[NI_MAXHOST], port[NI_MAXSERV];
  const socklen_t len = ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof host, port, sizeof port,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return;
  p.probe_host = host;
  p.probe_port = std::atoi(port);
}

// A gloo::Context connected by our own rendezvous (so that a missing rank is named).
class MeshContext : public gloo::Context {
 public:
  using gloo::Context::Context;

  std::vector<PeerInfo> connect(const std::shared_ptr<gloo::transport::Device>& dev,
                                Rendezvous& rdzv, const std::string& scope,
                                const std::vector<int>& members, ms timeout, const std::string& host) {
    setTimeout(timeout);
    auto tctx = dev->createContext(rank, size);
    tctx->setTimeout(timeout);
    std::vector<std::vector<char>> addrs;
    for (int i = 0; i < size; ++i)
      if (i != rank) addrs.push_back(tctx->createPair(i)->address().bytes());
    auto blobs = rdzv.exchange(scope, members, rank, encode_blob(encode_peer(local_peer(host)), addrs), timeout);
    std::vector<PeerInfo> peers(static_cast<size_t>(size));
    for (int i = 0; i < size; ++i) {
      const std::string& b = blobs[static_cast<size_t>(i)];
      uint32_t len = 0;
      if (b.size() < sizeof(len))
        throw CommError("rendezvous of " + scope + ": short blob from rank " +
                        std::to_string(members[static_cast<size_t>(i)]));
      std::memcpy(&len, b.data(), sizeof(len));
      peers[static_cast<size_t>(i)] = decode_peer(b.substr(sizeof(len), len));
      if (i == rank) continue;
      size_t off = sizeof(len) + len;
      size_t each = (b.size() - off) / static_cast<size_t>(size - 1);
      size_t slot = static_cast<size_t>(rank < i ? rank : rank - 1);
      std::vector<char> addr(b.begin() + static_cast<long>(off + slot * each),
                             b.begin() + static_cast<long>(off + (slot + 1) * each));
      set_probe(peers[static_cast<size_t>(i)], addr);
      tctx->getPair(i)->connect(addr);
    }
    device_ = dev;
    transportContext_ = std::move(tctx);
    return peers;
  }
};

template <class T> void red_sum(void* c, const void* a, const void* b, size_t n) {
  auto* z = static_cast<T*>(c);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
}
template <class T> void red_max(void* c, const void* a, const void* b, size_t n) {
  auto* z = static_cast<T*>(c);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) z[i] = std::max(x[i], y[i]);
}
template <class T> void red_min(void* c, const void* a, const void* b, size_t n) {
  auto* z = static_cast<T*>(c);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) z[i] = std::min(x[i], y[i]);
}

template <class T> gloo::AllreduceOptions::Func reduce_fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return &red_sum<T>;
    case ReduceOp::max: return &red_max<T>;
    case ReduceOp::min: return &red_min<T>;
  }
  return &red_sum<T>;
}

gloo::AllreduceOptions::Func reduce_fn(DType t, ReduceOp op) {
  switch (t) {
    case DType::f32: return reduce_fn<float>(op);
    case DType::f64: return reduce_fn<double>(op);
    case DType::i64: return reduce_fn<int64_t>(op);
  }
  return reduce_fn<float>(op);
}

// Gloo's typed setters only need the element size; a byte-sized stand-in per dtype.
template <size_t N> struct Elem { char b[N]; };

struct GlooShared {
  std::shared_ptr<Rendezvous> rdzv;
  std::shared_ptr<gloo::transport::Device> device;
  std::string host;  // the address the device listens on
  int world_size = 1;
  std::vector<PeerInfo> world_peers;  // by world rank: the hosts a diagnosis probes
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(std::vector<int> members, int rank, ms timeout, Communicator* world,
                   std::shared_ptr<GlooShared> shared)
      : Communicator(Backend::gloo, std::move(members), rank, timeout, world),
        shared_(std::move(shared)) {
    ctx_ = std::make_shared<MeshContext>(rank, size());
    scope_ = scope_key(this->members(), shared_->world_size);
    peers_ = ctx_->connect(shared_->device, *shared_->rdzv, scope_, this->members(), timeout, shared_->host);
    if (world == nullptr) shared_->world_peers = peers_;
  }

 protected:
  template <class Opts> void common(Opts& o) { o.setTimeout(timeout()); }

  void do_allreduce(void* buf, int64_t n, DType t, ReduceOp op) override {
    if (n == 0) return;
    const int64_t bytes = n * dtype_size(t);
    if (bytes * (size() - 1) <= direct_allreduce_bytes()) {  // one round: everyone's buffer, reduced here
      std::vector<char> blocks(static_cast<size_t>(bytes * size()));
      direct_allgather(buf, std::vector<int64_t>(static_cast<size_t>(size()), bytes), blocks.data());
      reduce_blocks(blocks.data(), buf, n, size(), t, op);
      return;
    }
    gloo::AllreduceOptions o(ctx_);
    common(o);
    set_io(o, buf, buf, n, n, t);
    o.setReduceFunction(reduce_fn(t, op));
    gloo::allreduce(o);
  }
  void do_broadcast(void* buf, int64_t n, DType t, int root) override {
    if (n == 0) return;
    gloo::BroadcastOptions o(ctx_);
    common(o);
    with_elem(t, [&](auto e) {  // in place: the root's output is its input
      using E = decltype(e);
      o.template setOutput<E>(static_cast<E*>(buf), static_cast<size_t>(n));
    });
    o.setRoot(root);
    gloo::broadcast(o);
  }
  void do_allgather(const void* in, void* out, int64_t n, DType t) override {
    if (n == 0) return;
    direct_allgather(in, std::vector<int64_t>(static_cast<size_t>(size()), n * dtype_size(t)), out);
  }
  void do_allgatherv(const void* in, void* out, const std::vector<int64_t>& counts,
                     DType t) override {
    int64_t tot = 0;
    for (auto c : counts) tot += c;
    if (tot == 0) return;
    std::vector<int64_t> bytes(counts);
    for (int64_t& b : bytes) b *= dtype_size(t);
    direct_allgather(in, bytes, out);
  }
  void do_alltoall(const void* in, void* out, int64_t n, DType t) override {
    if (n == 0) return;
    gloo::AlltoallOptions o(ctx_);
    common(o);
    set_io(o, const_cast<void*>(in), out, n * size(), n * size(), t);
    gloo::alltoall(o);
  }
  void do_alltoallv(const void* in, const std::vector<int64_t>& send, void* out,
                    const std::vector<int64_t>& recv, DType t) override {
    gloo::AlltoallvOptions o(ctx_);
    common(o);
    with_elem(t, [&](auto e) {
      using E = decltype(e);
      o.template setInput<E>(static_cast<E*>(non_null(in)), send);
      o.template setOutput<E>(static_cast<E*>(non_null(out)), recv);
    });
    gloo::alltoallv(o);
  }
  void do_barrier() override {
    gloo::BarrierOptions o(ctx_);
    common(o);
    gloo::barrier(o);
  }
  std::unique_ptr<Communicator> do_make_group(const std::vector<int>& world_ranks) override {
    int me = static_cast<int>(std::find(world_ranks.begin(), world_ranks.end(), world_rank()) -
                              world_ranks.begin());
    return std::make_unique<GlooCommunicator>(world_ranks, me, timeout(), world(), shared_);
  }
  std::string diagnose(const std::string& what) override {
    return diagnose_on_boards(*shared_->rdzv, scope_, *this, shared_->world_size, peers_, what, &shared_->world_peers);
  }
  std::string transport() const override { return "tcp"; }

 private:
  // Allreduces of up to 1 MiB sent per rank ((W - 1) x the buffer) take one round
  // of direct sends (direct_allgather, then a reduction in rank order here) instead of
  // gloo's ring of 2 (W - 1) dependent steps: on a loaded host every step costs a
  // scheduler wake-up of each rank and of its transport thread (docs/comm.md).
  // PARITY_GLOO_DIRECT_BYTES overrides it (0: always gloo's ring; for benchmarks).
  static int64_t direct_allreduce_bytes() {
    static const int64_t v = [] {
      const char* e = knob("PARITY_GLOO_DIRECT_BYTES");
      return e != nullptr && *e != '\0' ? std::strtoll(e, nullptr, 10) : int64_t{1} << 20;
    }();
    return v;
  }

  // Every rank's block to every rank in one round: rank r's bytes[r] bytes from `in` land at
  // out + (bytes[0] + ... + bytes[r-1]). All sends and receives are posted before any wait,
  // so it costs one message latency, not W - 1 as gloo's ring allgather; the volume is the
  // same (each rank sends its block W - 1 times, the ring forwards W - 1 blocks).
  void direct_allgather(const void* in, const std::vector<int64_t>& bytes, void* out) {
    const int me = rank(), n = size();
    std::vector<int64_t> off(static_cast<size_t>(n) + 1, 0);
    for (int i = 0; i < n; ++i)
      off[static_cast<size_t>(i) + 1] = off[static_cast<size_t>(i)] + bytes[static_cast<size_t>(i)];
    const auto mine = static_cast<size_t>(bytes[static_cast<size_t>(me)]);
    if (mine > 0) std::memcpy(static_cast<char*>(out) + off[static_cast<size_t>(me)], in, mine);
    if (n == 1) return;
    const uint64_t slot = gloo::Slot::build(kDirectSlotPrefix, ++direct_tag_);
    auto src = ctx_->createUnboundBuffer(non_null(in), mine);
    auto dst = ctx_->createUnboundBuffer(non_null(out), static_cast<size_t>(off.back()));
    int sends = 0, recvs = 0;
    for (int i = 1; i < n; ++i) {
      const int to = (me + i) % n, from = (me + n - i) % n;
      if (mine > 0) src->send(to, slot), ++sends;
      if (bytes[static_cast<size_t>(from)] > 0)
        dst->recv(from, slot, static_cast<size_t>(off[static_cast<size_t>(from)]),
                  static_cast<size_t>(bytes[static_cast<size_t>(from)])),
            ++recvs;
    }
    for (int i = 0; i < sends; ++i)
      if (!src->waitSend(timeout())) throw CommError("direct allgather: send timed out");
    for (int i = 0; i < recvs; ++i)
      if (!dst->waitRecv(timeout())) throw CommError("direct allgather: receive timed out");
  }
  // Gloo's own collectives use slot prefixes 0x01..0x08 (gloo/types.h).
  static constexpr uint8_t kDirectSlotPrefix = 0x40;
  uint32_t direct_tag_ = 0;

  template <class F> static void with_elem(DType t, F&& f) {
    if (dtype_size(t) == 4) f(Elem<4>{});
    else f(Elem<8>{});
  }
  template <class Opts>
  static void set_io(Opts& o, void* in, void* out, int64_t nin, int64_t nout, DType t) {
    with_elem(t, [&](auto e) {
      using E = decltype(e);
      o.template setInput<E>(static_cast<E*>(in), static_cast<size_t>(nin));
      o.template setOutput<E>(static_cast<E*>(out), static_cast<size_t>(nout));
    });
  }

  std::shared_ptr<GlooShared> shared_;
  std::shared_ptr<MeshContext> ctx_;
  std::string scope_;
  std::vector<PeerInfo> peers_;
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_world(int rank, int world_size,
                                              std::shared_ptr<Rendezvous> rendezvous,
                                              const std::string& host,
                                              std::chrono::milliseconds timeout) {
  // Gloo's tcp pairs write with writev: a write to a peer that has died would raise
  // SIGPIPE and kill this survivor before it can name the missing rank. Ignored, the
  // write fails with EPIPE, gloo throws, and the collective reports a CommError.
  std::signal(SIGPIPE, SIG_IGN);
  auto shared = std::make_shared<GlooShared>();
  shared->rdzv = std::move(rendezvous);
  shared->world_size = world_size;
  shared->host = host;
  gloo::transport::tcp::attr attr;
  attr.hostname = host;
  shared->device = gloo::transport::tcp::CreateDevice(attr);
  std::vector<int> members(static_cast<size_t>(world_size));
  for (int i = 0; i < world_size; ++i) members[static_cast<size_t>(i)] = i;
  return std::make_unique<GlooCommunicator>(std::move(members), rank, timeout, nullptr, shared);
}

}  // namespace parity::comm
