#include "comm/gloo/shm_communicator.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "comm/gloo/shm_segment.h"
#include "core/error.h"
#include "core/knobs.h"

namespace parity::comm {

bool gloo_shm_enabled() {
  const char* v = knob("PARITY_GLOO_SHM");
  return v == nullptr || std::string(v) != "0";
}

std::string diagnose_on_boards(Rendezvous& rdzv, const std::string& scope, const Communicator& c, int world_size,
                               const std::vector<PeerInfo>& peers, const std::string& what,
                               const std::vector<PeerInfo>* world_peers) {
  auto board = rdzv.board(scope, c.members(), c.rank());
  // Every group also posts on (and reads) a board of the whole world, scope "anygroup": the
  // member it waits for may be stuck in another group's collective.
  std::unique_ptr<FailureBoard> any;
  if (world_size > 1) {
    std::vector<int> all(static_cast<size_t>(world_size));
    for (int i = 0; i < world_size; ++i) all[static_cast<size_t>(i)] = i;
    any = rdzv.board("anygroup", all, c.world_rank());
  }
  return name_missing(c.rank(), c.members(), peers, *board, what,
                      std::min(c.timeout(), std::chrono::milliseconds(3000)), {any.get(), c.name(), world_peers});
}

void remove_shm_segments_of(int64_t pid) {
  const std::string prefix = "parity-" + std::to_string(pid) + "-";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) shm_unlink(("/" + e.path().filename().string()).c_str());
}

int remove_stale_shm_segments() {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("parity-", 0) != 0) continue;
    const size_t end = name.find('-', 7);
    const std::string digits = name.substr(7, end == std::string::npos ? std::string::npos : end - 7);
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::atol(digits.c_str()));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH && shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  return removed;
}

namespace {

using ms = std::chrono::milliseconds;
using shm::clock;

struct ShmShared {
  std::shared_ptr<Rendezvous> rdzv;
  int world_size = 1;
  int64_t slot = 0;
  uint64_t world_nonce = 0;            // the world segment's: every group's derives from it
  std::vector<PeerInfo> world_peers;   // by world rank, from the world's exchange
};

// Allreduces of at least this many bytes on more than 2 ranks reduce in two steps: each
// member reduces its 1/W of the chunk (in group-rank order), then every member copies the
// W reduced parts. Below it one step: every member reduces the whole chunk itself (W reads
// of the chunk instead of 2, but one wait instead of two). Same bits either way.
constexpr int64_t kSplitBytes = int64_t{64} << 10;

uint64_t fresh_nonce() {
  static std::mt19937_64 gen{(static_cast<uint64_t>(std::random_device{}()) << 32) ^
                             static_cast<uint64_t>(getpid()) ^
                             static_cast<uint64_t>(clock::now().time_since_epoch().count())};
  return gen();
}

template <class T, class F> void reduce_tile(const std::vector<const char*>& src, int64_t at, T* out, int64_t n, F f) {
  const T* first = reinterpret_cast<const T*>(src[0]) + at;
  for (int64_t i = 0; i < n; ++i) out[i] = first[i];
  for (size_t b = 1; b < src.size(); ++b) {
    const T* x = reinterpret_cast<const T*>(src[b]) + at;
    for (int64_t i = 0; i < n; ++i) out[i] = f(out[i], x[i]);
  }
}

// out[i] = src[0][at + i] op src[1][at + i] op ... in source order, left to right: the bits
// of Communicator::reduce_blocks. Tiled so that `out` stays in cache across the sources.
template <class T> void reduce_typed(const std::vector<const char*>& src, int64_t at, T* out, int64_t n, ReduceOp op) {
  constexpr int64_t kTile = 2048;
  for (int64_t o = 0; o < n; o += kTile) {
    const int64_t m = std::min(kTile, n - o);
    switch (op) {
      case ReduceOp::sum: reduce_tile<T>(src, at + o, out + o, m, [](T a, T b) { return a + b; }); break;
      case ReduceOp::max: reduce_tile<T>(src, at + o, out + o, m, [](T a, T b) { return std::max(a, b); }); break;
      case ReduceOp::min: reduce_tile<T>(src, at + o, out + o, m, [](T a, T b) { return std::min(a, b); }); break;
    }
  }
}

void reduce_sources(const std::vector<const char*>& src, int64_t at, void* out, int64_t n, DType t, ReduceOp op) {
  with_dtype(t, [&](auto x) { reduce_typed(src, at, static_cast<decltype(x)*>(out), n, op); });
}

std::string hex(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof(b), "%016llx", static_cast<unsigned long long>(v));
  return b;
}

class ShmCommunicator : public Communicator {
 public:
  ShmCommunicator(std::vector<int> members, int rank, ms timeout, Communicator* world,
                  std::shared_ptr<ShmShared> shared)
      : Communicator(Backend::gloo, std::move(members), rank, timeout, world), shared_(std::move(shared)) {
    scope_ = scope_key(this->members(), shared_->world_size);
    start();
    if (world == nullptr)
      join_world();
    else
      join_group();
    seg_->name_members(this->members());
    // One step before the first collective: once every member has posted it, every member
    // has mapped the segment and rank 0 removes its name (nothing left in /dev/shm even if
    // the group is never used and the process exits without destructors).
    sync(++step_);
  }

  std::string transport() const override { return "shm"; }

 protected:
  void do_allreduce(void* buf, int64_t n, DType t, ReduceOp op) override {
    if (n == 0) return;
    start();
    const int64_t es = dtype_size(t), w = size(), me = rank();
    const bool split = w > 2 && n * es >= kSplitBytes;
    const int64_t chunk = seg_->slot_bytes() / es;
    char* b = static_cast<char*>(buf);
    std::vector<const char*> src(static_cast<size_t>(w));
    for (int64_t off = 0; off < n; off += chunk) {
      const int64_t c = std::min(chunk, n - off);
      const uint32_t s = ++step_;
      std::memcpy(seg_->slot(rank(), s), b + off * es, static_cast<size_t>(c * es));
      sync(s);
      for (int r = 0; r < w; ++r) src[static_cast<size_t>(r)] = seg_->slot(r, s);
      if (!split) {
        reduce_sources(src, 0, b + off * es, c, t, op);
        continue;
      }
      const uint32_t s2 = ++step_;  // writing half s2 is safe: every member posted s
      const int64_t lo = c * me / w, hi = c * (me + 1) / w;
      reduce_sources(src, lo, seg_->slot(rank(), s2) + lo * es, hi - lo, t, op);
      sync(s2);
      for (int r = 0; r < w; ++r) {
        const int64_t rl = c * r / w, rh = c * (r + 1) / w;
        std::memcpy(b + (off + rl) * es, seg_->slot(r, s2) + rl * es, static_cast<size_t>((rh - rl) * es));
      }
    }
  }
  void do_broadcast(void* buf, int64_t n, DType t, int root) override {
    start();
    const int64_t bytes = n * dtype_size(t), S = seg_->slot_bytes();
    char* b = static_cast<char*>(buf);
    for (int64_t off = 0; off < bytes; off += S) {
      const int64_t c = std::min(S, bytes - off);
      const uint32_t s = ++step_;
      if (rank() == root) std::memcpy(seg_->slot(root, s), b + off, static_cast<size_t>(c));
      sync(s);
      if (rank() != root) std::memcpy(b + off, seg_->slot(root, s), static_cast<size_t>(c));
    }
  }
  void do_allgather(const void* in, void* out, int64_t n, DType t) override {
    if (n == 0) return;
    gather_bytes(in, std::vector<int64_t>(static_cast<size_t>(size()), n * dtype_size(t)), out);
  }
  void do_allgatherv(const void* in, void* out, const std::vector<int64_t>& counts, DType t) override {
    std::vector<int64_t> bytes(counts);
    int64_t tot = 0;
    for (int64_t& x : bytes) tot += (x *= dtype_size(t));
    if (tot == 0) return;
    gather_bytes(in, bytes, out);
  }
  void do_reduce_scatterv(const void* in, void* out, const std::vector<int64_t>& counts, DType t, ReduceOp op) override;
  void do_alltoall(const void* in, void* out, int64_t n, DType t) override {
    std::vector<int64_t> bytes(static_cast<size_t>(size()), n * dtype_size(t));
    exchange_bytes(static_cast<const char*>(in), bytes, static_cast<char*>(out), bytes);
  }
  void do_alltoallv(const void* in, const std::vector<int64_t>& send, void* out, const std::vector<int64_t>& recv,
                    DType t) override {
    std::vector<int64_t> sb(send), rb(recv);
    for (int64_t& x : sb) x *= dtype_size(t);
    for (int64_t& x : rb) x *= dtype_size(t);
    exchange_bytes(static_cast<const char*>(in), sb, static_cast<char*>(out), rb);
  }
  void do_barrier() override {
    start();
    const uint32_t s = ++step_;
    sync(s);
  }
  std::unique_ptr<Communicator> do_make_group(const std::vector<int>& world_ranks) override {
    const int me =
        static_cast<int>(std::find(world_ranks.begin(), world_ranks.end(), world_rank()) - world_ranks.begin());
    return std::make_unique<ShmCommunicator>(world_ranks, me, timeout(), world(), shared_);
  }
  std::string diagnose(const std::string& what) override {
    return diagnose_on_boards(*shared_->rdzv, scope_, *this, shared_->world_size, peers_, what);
  }

 private:
  void start() { deadline_ = clock::now() + timeout(); }
  std::string segment_name(uint64_t nonce, int64_t owner_pid) const {
    std::string name = "/parity-" + std::to_string(owner_pid) + "-" + scope_ + "-" + hex(nonce).substr(0, 8);
    return name.size() > 200 ? "/parity-" + std::to_string(owner_pid) + "-" + hex(nonce) : name;
  }
  void join_world();
  void join_group();
  void sync(uint32_t s) {
    seg_->post(rank(), s);
    seg_->wait_all(rank(), s, deadline_, timeout(), peers_);
  }
  void gather_bytes(const void* in, const std::vector<int64_t>& bytes, void* out);
  void exchange_bytes(const char* in, const std::vector<int64_t>& send, char* out, const std::vector<int64_t>& recv);

  std::shared_ptr<ShmShared> shared_;
  std::string scope_;
  std::vector<PeerInfo> peers_;
  std::unique_ptr<shm::Segment> seg_;
  uint32_t step_ = 0;
  clock::time_point deadline_;
};

// The world: rank 0 creates the segment before publishing its name and nonce; the others
// open it once the store exchange is over (which also gives every rank every peer's pid and
// host, kept for the groups).
void ShmCommunicator::join_world() {
  std::string seg_name;
  uint64_t nonce = 0;
  if (rank() == 0) {
    nonce = fresh_nonce();
    seg_name = segment_name(nonce, getpid());
    seg_ = shm::Segment::create(seg_name, size(), shared_->slot, nonce, shared_->world_size);
  }
  const std::string peer = encode_peer(local_peer());
  const uint32_t len = static_cast<uint32_t>(peer.size());
  std::string blob(reinterpret_cast<const char*>(&len), sizeof(len));
  blob += peer + hex(nonce) + seg_name;
  auto blobs = shared_->rdzv->exchange(scope_, members(), rank(), blob, timeout());
  peers_.resize(blobs.size());
  for (size_t i = 0; i < blobs.size(); ++i) {
    const std::string& b = blobs[i];
    uint32_t l = 0;
    if (b.size() < sizeof(l))
      throw CommError("rendezvous of " + scope_ + ": short blob from rank " + std::to_string(members()[i]));
    std::memcpy(&l, b.data(), sizeof(l));
    if (b.size() < sizeof(l) + l + 16)
      throw CommError("rendezvous of " + scope_ + ": short blob from rank " + std::to_string(members()[i]));
    peers_[i] = decode_peer(b.substr(sizeof(l), l));
    if (i == 0 && rank() != 0) {
      nonce = std::strtoull(b.substr(sizeof(l) + l, 16).c_str(), nullptr, 16);
      seg_name = b.substr(sizeof(l) + l + 16);
    }
  }
  if (rank() != 0) seg_ = shm::Segment::open(seg_name, size(), shared_->slot, nonce, shared_->world_size);
  shared_->world_nonce = nonce;
  shared_->world_peers = peers_;
}

// A group needs no store exchange: its peers are the world's, and its segment's name and
// nonce follow from the world's nonce and its members, so group rank 0 creates it and the
// others open it as soon as it exists (an exchange per group cost each rank about a
// millisecond of polling the store; fsdp2_cp2_tp2_ep2 creates 5 groups a rank).
void ShmCommunicator::join_group() {
  peers_.clear();
  for (int r : members()) peers_.push_back(shared_->world_peers.at(static_cast<size_t>(r)));
  uint64_t nonce = shared_->world_nonce;
  for (char c : scope_) nonce = (nonce ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;  // FNV-1a step
  const std::string name = segment_name(nonce, peers_[0].pid);
  if (rank() == 0) {
    seg_ = shm::Segment::create(name, size(), shared_->slot, nonce, shared_->world_size);
    return;
  }
  std::chrono::microseconds pause{20};
  while (!(seg_ = shm::Segment::try_open(name, size(), shared_->slot, nonce, shared_->world_size))) {
    if (peer_exited(peers_[0]))
      throw CommError("rank " + std::to_string(members()[0]) + " (pid " + std::to_string(peers_[0].pid) +
                      ") exited before creating the group's shared memory");
    if (clock::now() >= deadline_)
      throw CommError("timed out after " + std::to_string(timeout().count()) + " ms waiting for rank " +
                      std::to_string(members()[0]) + " to create the group's shared memory");
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
  }
}

std::vector<int64_t> prefix(const std::vector<int64_t>& v) {
  std::vector<int64_t> off(v.size() + 1, 0);
  for (size_t i = 0; i < v.size(); ++i) off[i + 1] = off[i] + v[i];
  return off;
}

// Every member's block to every member: in steps of at most a slot of each block.
void ShmCommunicator::gather_bytes(const void* in, const std::vector<int64_t>& bytes, void* out) {
  start();
  const auto off = prefix(bytes);
  const int me = rank();
  const int64_t S = seg_->slot_bytes(), mine = bytes[static_cast<size_t>(me)];
  char* o = static_cast<char*>(out);
  if (mine > 0) std::memcpy(o + off[static_cast<size_t>(me)], in, static_cast<size_t>(mine));
  const int64_t most = *std::max_element(bytes.begin(), bytes.end());
  for (int64_t lo = 0; lo < most; lo += S) {
    const uint32_t s = ++step_;
    if (mine > lo)
      std::memcpy(seg_->slot(me, s), static_cast<const char*>(in) + lo, static_cast<size_t>(std::min(S, mine - lo)));
    sync(s);
    for (int r = 0; r < size(); ++r) {
      const int64_t have = bytes[static_cast<size_t>(r)];
      if (r != me && have > lo)
        std::memcpy(o + off[static_cast<size_t>(r)] + lo, seg_->slot(r, s),
                    static_cast<size_t>(std::min(S, have - lo)));
    }
  }
}

// Each slot holds a region of C bytes per destination; step k carries bytes [kC, (k+1)C)
// of every message. The first step also carries every member's send sizes, from which all
// members compute the same number of steps (and check them against their recv counts).
void ShmCommunicator::exchange_bytes(const char* in, const std::vector<int64_t>& send, char* out,
                                     const std::vector<int64_t>& recv) {
  start();
  const int w = size(), me = rank();
  const int64_t C = std::max<int64_t>(8, seg_->slot_bytes() / w / 64 * 64);
  const auto so = prefix(send), ro = prefix(recv);
  const auto at = [](int r) { return static_cast<size_t>(r); };
  if (send[at(me)] != recv[at(me)])
    throw CommError("sends " + std::to_string(send[at(me)]) + " bytes to itself but expects " +
                    std::to_string(recv[at(me)]));
  if (send[at(me)] > 0) std::memcpy(out + ro[at(me)], in + so[at(me)], static_cast<size_t>(send[at(me)]));
  int64_t steps = 1;
  for (int64_t k = 0; k < steps; ++k) {
    const uint32_t s = ++step_;
    char* mine = seg_->slot(me, s);
    std::copy(send.begin(), send.end(), seg_->send_bytes(me, s));
    const int64_t lo = k * C;
    for (int j = 0; j < w; ++j)
      if (j != me && send[at(j)] > lo)
        std::memcpy(mine + j * C, in + so[at(j)] + lo, static_cast<size_t>(std::min(C, send[at(j)] - lo)));
    sync(s);
    if (k == 0) {
      int64_t most = 0;
      for (int i = 0; i < w; ++i) {
        const int64_t* sb = seg_->send_bytes(i, s);
        for (int j = 0; j < w; ++j) most = i == j ? most : std::max(most, sb[j]);
        if (i != me && sb[me] != recv[at(i)])
          throw CommError("rank " + std::to_string(i) + " of the group sends " + std::to_string(sb[me]) +
                          " bytes to this rank, whose recv_counts expect " + std::to_string(recv[at(i)]));
      }
      steps = std::max<int64_t>(1, (most + C - 1) / C);
    }
    for (int i = 0; i < w; ++i)
      if (i != me && recv[at(i)] > lo)
        std::memcpy(out + ro[at(i)] + lo, seg_->slot(i, s) + me * C,
                    static_cast<size_t>(std::min(C, recv[at(i)] - lo)));
  }
}

// Every member's whole input through the slots, a slot at a time; each member reduces the
// part of its own block in the slot, over the members in group-rank order (the bits of
// Communicator::do_reduce_scatterv's ordered reduction).
void ShmCommunicator::do_reduce_scatterv(const void* in, void* out, const std::vector<int64_t>& counts, DType t,
                                         ReduceOp op) {
  const auto off = prefix(counts);
  const int64_t total = off.back(), es = dtype_size(t);
  if (total == 0) return;
  start();
  const int64_t mlo = off[static_cast<size_t>(rank())], mhi = off[static_cast<size_t>(rank()) + 1];
  const int64_t chunk = seg_->slot_bytes() / es;
  std::vector<const char*> src(static_cast<size_t>(size()));
  for (int64_t o = 0; o < total; o += chunk) {
    const int64_t c = std::min(chunk, total - o);
    const uint32_t s = ++step_;
    std::memcpy(seg_->slot(rank(), s), static_cast<const char*>(in) + o * es, static_cast<size_t>(c * es));
    sync(s);
    const int64_t lo = std::max(o, mlo), hi = std::min(o + c, mhi);
    if (hi <= lo) continue;
    for (int r = 0; r < size(); ++r) src[static_cast<size_t>(r)] = seg_->slot(r, s);
    reduce_sources(src, lo - o, static_cast<char*>(out) + (lo - mlo) * es, hi - lo, t, op);
  }
}

}  // namespace

std::unique_ptr<Communicator> make_shm_world(int rank, int world_size, std::shared_ptr<Rendezvous> rendezvous,
                                             std::chrono::milliseconds timeout) {
  auto shared = std::make_shared<ShmShared>();
  shared->rdzv = std::move(rendezvous);
  shared->world_size = world_size;
  shared->slot = shm::slot_bytes_setting();
  std::vector<int> members(static_cast<size_t>(world_size));
  for (int i = 0; i < world_size; ++i) members[static_cast<size_t>(i)] = i;
  return std::make_unique<ShmCommunicator>(std::move(members), rank, timeout, nullptr, shared);
}

}  // namespace parity::comm
