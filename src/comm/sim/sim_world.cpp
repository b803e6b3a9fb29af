#include "comm/sim/sim_world.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"

namespace parity::comm {

namespace sim_detail {

using ms = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

enum class Kind { allreduce, broadcast, allgather, allgatherv, reduce_scatterv, alltoall, alltoallv, barrier };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::allreduce: return "allreduce";
    case Kind::broadcast: return "broadcast";
    case Kind::allgather: return "allgather";
    case Kind::allgatherv: return "allgatherv";
    case Kind::reduce_scatterv: return "reduce_scatter";
    case Kind::alltoall: return "alltoall";
    case Kind::alltoallv: return "alltoallv";
    case Kind::barrier: return "barrier";
  }
  return "?";
}

// One member's arguments to a collective: pointers into its own thread's buffers, valid while it waits.
struct Call {
  Kind kind = Kind::barrier;
  const void* in = nullptr;
  void* out = nullptr;
  int64_t n = 0;  // elements (allreduce, broadcast, allgather: per rank; alltoall: per block)
  DType t = DType::f64;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  const std::vector<int64_t>* counts = nullptr;  // allgatherv, reduce_scatterv; alltoallv: send counts
  const std::vector<int64_t>* recv = nullptr;    // alltoallv
};

struct Group {
  std::vector<int> members;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t done = 0;  // rounds completed
  int arrived = 0;
  std::vector<Call> calls;
  std::vector<char> here;  // per member: arrived in the current round
  std::string error;       // the failed round's error (every member of that round throws it)
  uint64_t error_round = ~uint64_t{0};
};

struct RankState {
  std::atomic<bool> ended{false};
  int code = 0;
  std::string error;  // written before `ended` (release), read after it (acquire)
  std::atomic<Group*> in_group{nullptr};
  std::atomic<const char*> op{nullptr};  // the collective it is in, or last took part in
  std::atomic<uint64_t> seq{0};
  std::atomic<Group*> last_group{nullptr};
  uint64_t collectives = 0;  // taken so far, every group of this rank (its own thread only)
  std::atomic<bool> failing{false};  // its collective failed (it is on its way out)
};

}  // namespace sim_detail

class SimWorld {
  using RankState = sim_detail::RankState;
  using Group = sim_detail::Group;
  using ms = std::chrono::milliseconds;

 public:
  SimWorld(int size, ms timeout) : size_(size), timeout_(timeout), ranks_(new RankState[static_cast<size_t>(size)]) {
    member_of_.resize(static_cast<size_t>(size));
  }
  int size() const { return size_; }
  ms timeout() const { return timeout_; }
  RankState& rank(int r) { return ranks_[static_cast<size_t>(r)]; }

  Group& group(const std::vector<int>& members) {
    std::lock_guard<std::mutex> lk(mu_);
    auto& g = groups_[members];
    if (!g) {
      g = std::make_unique<Group>();
      g->members = members;
      g->calls.resize(members.size());
      g->here.assign(members.size(), 0);
      for (int m : members) member_of_[static_cast<size_t>(m)].push_back(g.get());
    }
    return *g;
  }
  // Wakes every member waiting in a group of rank r (it ended), or in any group (abort).
  void wake(int r) {
    std::vector<Group*> gs;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (r >= 0) {
        gs = member_of_[static_cast<size_t>(r)];
      } else {
        for (auto& [k, g] : groups_) gs.push_back(g.get());
      }
    }
    for (Group* g : gs) {
      std::lock_guard<std::mutex> lk(g->mu);
      g->cv.notify_all();
    }
  }
  std::atomic<uint64_t> ended_count{0};
  std::atomic<bool> aborted{false};
  SimFault fault;  // set before any rank starts
  SimOrder order = SimOrder::rank;  // likewise
  std::string abort_why;  // written before `aborted`

  // The first rank to end with a failure, and its error (the others' errors follow from it).
  void ended(int r, int code, const std::string& error) {
    std::lock_guard<std::mutex> lk(mu_);
    if (code != 0 && first_failed_ < 0) first_failed_ = r, first_error_ = error;
  }

  std::string state(int r) {
    RankState& s = rank(r);
    const std::string who = "rank " + std::to_string(r);
    const char* op = s.op.load();
    if (s.ended.load(std::memory_order_acquire)) {
      std::string e = who + " has ended (exit " + std::to_string(s.code) + ")";
      std::lock_guard<std::mutex> lk(mu_);
      if (s.code == 0 || first_failed_ < 0) return e;
      if (first_failed_ != r) return e + " after rank " + std::to_string(first_failed_) + " failed";
      return e + ": " + (first_error_.size() > 400 ? first_error_.substr(0, 400) + "..." : first_error_);
    }
    if (s.failing.load() && op != nullptr)
      return who + " failed in its " + op + " #" + std::to_string(s.seq.load()) + " too";
    Group* g = s.in_group.load();
    if (g != nullptr && op != nullptr)
      return who + " waits in " + op + " #" + std::to_string(s.seq.load()) + " of " + group_name(g->members, size_);
    Group* last = s.last_group.load();
    if (last == nullptr || op == nullptr) return who + " is running and has taken no collective yet";
    return who + " is running, not in a collective (its last: " + op + " #" + std::to_string(s.seq.load()) + " of " +
           group_name(last->members, size_) + ")";
  }

 private:
  int size_;
  ms timeout_;
  std::unique_ptr<RankState[]> ranks_;
  std::mutex mu_;
  std::map<std::vector<int>, std::unique_ptr<Group>> groups_;
  std::vector<std::vector<Group*>> member_of_;
  int first_failed_ = -1;
  std::string first_error_;
};

namespace sim_detail {

std::string describe_call(const Call& c) {
  std::string s = std::string(kind_name(c.kind));
  if (c.kind == Kind::barrier) return s;
  s += " (" + std::string(dtype_name(c.t));
  if (c.counts == nullptr) s += ", " + std::to_string(c.n) + " elements";
  if (c.kind == Kind::allreduce || c.kind == Kind::reduce_scatterv) s += ", " + std::string(reduce_op_name(c.op));
  if (c.kind == Kind::broadcast) s += ", root " + std::to_string(c.root);
  return s + ")";
}

// The members agree on the collective and its sizes (as every backend requires); else a message.
std::string disagreement(const std::vector<Call>& cs) {
  const Call& a = cs[0];
  for (size_t r = 1; r < cs.size(); ++r) {
    const Call& b = cs[r];
    bool same = a.kind == b.kind && (a.kind == Kind::barrier || a.t == b.t);
    if (same && a.kind != Kind::barrier) {
      if (a.counts == nullptr) same = a.n == b.n;
      else if (a.kind != Kind::alltoallv) same = *a.counts == *b.counts;
      if (a.kind == Kind::allreduce || a.kind == Kind::reduce_scatterv) same = same && a.op == b.op;
      if (a.kind == Kind::broadcast) same = same && a.root == b.root;
    }
    if (!same)
      return "the members called different collectives: group rank " + std::to_string(r) + " " + describe_call(b) +
             ", group rank 0 " + describe_call(a);
  }
  if (a.kind == Kind::alltoallv)
    for (size_t i = 0; i < cs.size(); ++i)
      for (size_t j = 0; j < cs.size(); ++j)
        if ((*cs[i].counts)[j] != (*cs[j].recv)[i])
          return "group rank " + std::to_string(i) + " sends " + std::to_string((*cs[i].counts)[j]) +
                 " elements to group rank " + std::to_string(j) + ", whose recv_counts expect " +
                 std::to_string((*cs[j].recv)[i]);
  return {};
}

template <class T> T apply(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::sum: return a + b;
    case ReduceOp::max: return std::max(a, b);
    case ReduceOp::min: return std::min(a, b);
  }
  return a;
}

// tmp[i] = src[0][at + i] op src[1][at + i] op ... in group-rank order, left to right: the bits of
// gloo's shm path (reduce_tile) and of Communicator::reduce_blocks.
template <class T> void fold(const std::vector<Call>& cs, int64_t at, T* tmp, int64_t m, ReduceOp op) {
  const T* first = static_cast<const T*>(cs[0].in) + at;
  for (int64_t i = 0; i < m; ++i) tmp[i] = first[i];
  for (size_t r = 1; r < cs.size(); ++r) {
    const T* x = static_cast<const T*>(cs[r].in) + at;
    for (int64_t i = 0; i < m; ++i) tmp[i] = apply(op, tmp[i], x[i]);
  }
}

// The ring order (SimOrder::ring): tmp[i] = src[s + 1] op src[s + 2] op ... op src[s], member
// indices mod W, for the tile's chunk s: the order a ring reduce-scatter sums the chunk it
// delivers to member s in.
template <class T> void fold_ring(const std::vector<Call>& cs, int64_t at, T* tmp, int64_t m, ReduceOp op, size_t s) {
  const size_t w = cs.size();
  const T* first = static_cast<const T*>(cs[(s + 1) % w].in) + at;
  for (int64_t i = 0; i < m; ++i) tmp[i] = first[i];
  for (size_t k = 2; k <= w; ++k) {
    const T* x = static_cast<const T*>(cs[(s + k) % w].in) + at;
    for (int64_t i = 0; i < m; ++i) tmp[i] = apply(op, tmp[i], x[i]);
  }
}

constexpr int64_t kTile = 2048;

// allreduce: each tile folded once, then written to every member (inputs may be the outputs).
// The ring order splits the n elements into W chunks of ceil(n / W), chunk c summed as the
// ring delivers it to member c: an element's order depends on where it sits and on n.
template <class T> void allreduce(const std::vector<Call>& cs, SimOrder order) {
  const int64_t n = cs[0].n, w = static_cast<int64_t>(cs.size()), chunk = (n + w - 1) / w;
  std::vector<T> tmp(static_cast<size_t>(std::min(n, kTile)));
  for (int64_t o = 0; o < n;) {
    int64_t m = std::min(kTile, n - o);
    if (order == SimOrder::ring) m = std::min(m, (o / chunk + 1) * chunk - o);  // within one chunk
    if (order == SimOrder::ring)
      fold_ring<T>(cs, o, tmp.data(), m, cs[0].op, static_cast<size_t>(o / chunk));
    else
      fold<T>(cs, o, tmp.data(), m, cs[0].op);
    for (const Call& c : cs) std::memcpy(static_cast<T*>(c.out) + o, tmp.data(), static_cast<size_t>(m) * sizeof(T));
    o += m;
  }
}

// reduce_scatterv: owner j's block folded over the members' inputs at its offset (the ring
// order: summed around the ring to j).
template <class T> void reduce_scatter(const std::vector<Call>& cs, SimOrder order) {
  const auto& counts = *cs[0].counts;
  std::vector<T> tmp(kTile);
  int64_t off = 0;
  for (size_t j = 0; j < cs.size(); ++j) {
    for (int64_t o = 0; o < counts[j]; o += kTile) {
      const int64_t m = std::min(kTile, counts[j] - o);
      if (order == SimOrder::ring)
        fold_ring<T>(cs, off + o, tmp.data(), m, cs[0].op, j);
      else
        fold<T>(cs, off + o, tmp.data(), m, cs[0].op);
      std::memcpy(static_cast<T*>(cs[j].out) + o, tmp.data(), static_cast<size_t>(m) * sizeof(T));
    }
    off += counts[j];
  }
}

bool overlaps(const void* a, int64_t na, const void* b, int64_t nb) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return na > 0 && nb > 0 && x < y + static_cast<uintptr_t>(nb) && y < x + static_cast<uintptr_t>(na);
}

// Bytes member i sends to member j, and where they start in i's input (alltoallv's order).
int64_t sent(const Call& a, const std::vector<Call>& cs, size_t i, size_t j, int64_t es) {
  switch (a.kind) {
    case Kind::allgather: return a.n * es;
    case Kind::allgatherv: return (*a.counts)[i] * es;
    case Kind::alltoall: return a.n * es;
    default: return (*cs[i].counts)[j] * es;
  }
}

// The byte moves, receiver by receiver: member i's block for member j lands in j's output
// after the blocks from members < i. O(W) offsets kept, never a W x W table (W may be 4096).
// An input that overlaps its own output is staged first.
void move_bytes(const std::vector<Call>& cs, int64_t es) {
  const Call& a = cs[0];
  const size_t w = cs.size();
  const bool gather = a.kind == Kind::allgather || a.kind == Kind::allgatherv;
  std::vector<int64_t> so(w, 0);  // per sender: where its block for the current receiver starts
  std::vector<std::vector<char>> staged(w);
  std::vector<const char*> in(w);
  for (size_t i = 0; i < w; ++i) {
    in[i] = static_cast<const char*>(cs[i].in);
    int64_t in_b = 0, out_b = 0;
    for (size_t j = 0; j < w; ++j) {
      in_b += gather ? (j == 0 ? sent(a, cs, i, j, es) : 0) : sent(a, cs, i, j, es);
      out_b += sent(a, cs, j, i, es);
    }
    if (overlaps(cs[i].in, in_b, cs[i].out, out_b)) {
      staged[i].assign(in[i], in[i] + in_b);
      in[i] = staged[i].data();
    }
  }
  for (size_t j = 0; j < w; ++j) {
    int64_t ro = 0;
    for (size_t i = 0; i < w; ++i) {
      const int64_t bytes = sent(a, cs, i, j, es);
      if (bytes > 0)
        std::memmove(static_cast<char*>(cs[j].out) + ro, in[i] + (gather ? 0 : so[i]), static_cast<size_t>(bytes));
      ro += bytes;
      so[i] += bytes;
    }
  }
}

void execute(std::vector<Call>& cs, SimOrder order) {
  const Call& a = cs[0];
  const size_t w = cs.size();
  if (a.kind == Kind::barrier) return;
  const int64_t es = dtype_size(a.t);
  switch (a.kind) {
    case Kind::allreduce:
      if (a.n > 0) with_dtype(a.t, [&](auto x) { allreduce<decltype(x)>(cs, order); });
      return;
    case Kind::reduce_scatterv: with_dtype(a.t, [&](auto x) { reduce_scatter<decltype(x)>(cs, order); }); return;
    case Kind::broadcast:
      for (size_t r = 0; r < w; ++r)
        if (static_cast<int>(r) != a.root && a.n > 0)
          std::memmove(cs[r].out, cs[static_cast<size_t>(a.root)].out, static_cast<size_t>(a.n * es));
      return;
    default: break;
  }
  move_bytes(cs, es);
}

class SimCommunicator : public Communicator {
 public:
  SimCommunicator(std::shared_ptr<SimWorld> sim, std::vector<int> members, int rank, ms timeout, Communicator* world)
      : Communicator(Backend::sim, std::move(members), rank, timeout, world), sim_(std::move(sim)) {
    group_ = &sim_->group(this->members());
  }
  std::string transport() const override { return "threads"; }

 protected:
  void do_allreduce(void* buf, int64_t n, DType t, ReduceOp op) override {
    run({Kind::allreduce, buf, buf, n, t, op, 0, nullptr, nullptr});
  }
  void do_broadcast(void* buf, int64_t n, DType t, int root) override {
    run({Kind::broadcast, buf, buf, n, t, ReduceOp::sum, root, nullptr, nullptr});
  }
  void do_allgather(const void* in, void* out, int64_t n, DType t) override {
    run({Kind::allgather, in, out, n, t, ReduceOp::sum, 0, nullptr, nullptr});
  }
  void do_allgatherv(const void* in, void* out, const std::vector<int64_t>& counts, DType t) override {
    run({Kind::allgatherv, in, out, 0, t, ReduceOp::sum, 0, &counts, nullptr});
  }
  void do_reduce_scatterv(const void* in, void* out, const std::vector<int64_t>& counts, DType t,
                          ReduceOp op) override {
    run({Kind::reduce_scatterv, in, out, 0, t, op, 0, &counts, nullptr});
  }
  void do_alltoall(const void* in, void* out, int64_t n, DType t) override {
    run({Kind::alltoall, in, out, n, t, ReduceOp::sum, 0, nullptr, nullptr});
  }
  void do_alltoallv(const void* in, const std::vector<int64_t>& send, void* out, const std::vector<int64_t>& recv,
                    DType t) override {
    run({Kind::alltoallv, in, out, 0, t, ReduceOp::sum, 0, &send, &recv});
  }
  void do_barrier() override { run({}); }
  std::unique_ptr<Communicator> do_make_group(const std::vector<int>& world_ranks) override {
    const int me =
        static_cast<int>(std::find(world_ranks.begin(), world_ranks.end(), world_rank()) - world_ranks.begin());
    return std::make_unique<SimCommunicator>(sim_, world_ranks, me, timeout(), world());
  }
  std::string diagnose(const std::string&) override { return missing_; }

 private:
  void run(const Call& c);
  // Names the members that have not arrived in this round (the group's lock held).
  std::string name_missing() {
    std::string s;
    int named = 0, more = 0;
    for (size_t i = 0; i < group_->members.size(); ++i) {
      if (group_->here[i] || static_cast<int>(i) == rank()) continue;
      if (named++ >= 4) {
        ++more;
        continue;
      }
      s += std::string(s.empty() ? "missing " : "; missing ") + sim_->state(group_->members[i]);
    }
    if (more > 0) s += " (and " + std::to_string(more) + " more)";
    return s.empty() ? "every member arrived" : s + " (ranks are threads of this process: --backend sim)";
  }
  // The first member of this round that has ended without arriving, or -1.
  int ended_absent() const {
    for (size_t i = 0; i < group_->members.size(); ++i)
      if (!group_->here[i] && sim_->rank(group_->members[i]).ended.load(std::memory_order_acquire))
        return group_->members[i];
    return -1;
  }
  void withdraw() {
    group_->here[static_cast<size_t>(rank())] = 0;
    --group_->arrived;
    sim_->rank(world_rank()).failing.store(true);
  }

  std::shared_ptr<SimWorld> sim_;
  Group* group_;
  std::string missing_;
};

void SimCommunicator::run(const Call& c) {
  RankState& me = sim_->rank(world_rank());
  if (++me.collectives == sim_->fault.at && sim_->fault.rank == world_rank()) {
    if (!sim_->fault.stall)
      throw CommError("PARITY_SIM_FAULT: world rank " + std::to_string(world_rank()) + " fails at its collective #" +
                      std::to_string(me.collectives));
    for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // stuck in compute, never returns
  }
  me.op.store(kind_name(c.kind));
  me.seq.store(sequence());
  me.in_group.store(group_);
  me.last_group.store(group_);
  struct Leave {
    RankState& s;
    ~Leave() { s.in_group.store(nullptr); }
  } leave{me};
  std::unique_lock<std::mutex> lk(group_->mu);
  if (sim_->aborted.load(std::memory_order_acquire)) throw CommError(sim_->abort_why);
  const uint64_t round = group_->done;
  const size_t r = static_cast<size_t>(rank());
  group_->calls[r] = c;
  group_->here[r] = 1;
  if (++group_->arrived == size()) {
    std::string err = disagreement(group_->calls);
    if (err.empty()) {
      try {
        execute(group_->calls, sim_->order);
      } catch (const std::exception& e) {
        err = e.what();
      }
    }
    group_->arrived = 0;
    std::fill(group_->here.begin(), group_->here.end(), 0);
    ++group_->done;
    if (!err.empty()) group_->error = err, group_->error_round = round;
    group_->cv.notify_all();
    if (!err.empty()) {
      missing_ = "every member arrived";
      throw CommError(err);
    }
    return;
  }
  const auto deadline = Clock::now() + timeout();
  uint64_t ended_seen = ~uint64_t{0};
  while (group_->done == round) {
    if (sim_->aborted.load(std::memory_order_acquire)) {
      missing_ = name_missing();
      withdraw();
      throw CommError(sim_->abort_why);
    }
    if (const uint64_t e = sim_->ended_count.load(); e != ended_seen) {
      ended_seen = e;
      if (const int gone = ended_absent(); gone >= 0) {
        missing_ = name_missing();
        withdraw();
        throw CommError("rank " + std::to_string(gone) + " ended before reaching this collective");
      }
    }
    if (group_->cv.wait_until(lk, deadline) == std::cv_status::timeout && group_->done == round) {
      missing_ = name_missing();
      withdraw();
      throw CommError("timed out after " + std::to_string(timeout().count()) + " ms waiting for the other members");
    }
  }
  if (group_->error_round == round) {
    missing_ = "every member arrived";
    throw CommError(group_->error);
  }
}

}  // namespace sim_detail

std::shared_ptr<SimWorld> make_sim_world(int world_size, std::chrono::milliseconds timeout) {
  if (world_size < 1 || world_size > kMaxSimRanks)
    throw ConfigError("$.layout.world", "a simulated world (--backend sim) holds 1 to " +
                                            std::to_string(kMaxSimRanks) + " ranks, got " +
                                            std::to_string(world_size));
  return std::make_shared<SimWorld>(world_size, timeout);
}

std::unique_ptr<Communicator> make_sim_rank(const std::shared_ptr<SimWorld>& world, int rank) {
  std::vector<int> all(static_cast<size_t>(world->size()));
  for (int i = 0; i < world->size(); ++i) all[static_cast<size_t>(i)] = i;
  return std::make_unique<sim_detail::SimCommunicator>(world, std::move(all), rank, world->timeout(), nullptr);
}

void sim_rank_ended(SimWorld& world, int rank, int code, const std::string& error) {
  sim_detail::RankState& s = world.rank(rank);
  world.ended(rank, code, error);
  s.code = code;
  s.error = error;
  s.ended.store(true, std::memory_order_release);
  world.ended_count.fetch_add(1);
  world.wake(rank);
}

void sim_abort(SimWorld& world, const std::string& why) {
  if (world.aborted.load()) return;
  world.abort_why = why;
  world.aborted.store(true, std::memory_order_release);
  world.wake(-1);
}

std::string sim_rank_state(SimWorld& world, int rank) { return world.state(rank); }

SimFault parse_sim_fault(const std::string& spec) {
  SimFault f;
  const size_t at = spec.find('@'), colon = spec.find(':');
  const std::string kind = spec.substr(0, at);
  const auto digits = [](const std::string& x) { return !x.empty() && x.size() < 10 &&
                                                        x.find_first_not_of("0123456789") == std::string::npos; };
  const std::string r = at == std::string::npos || colon == std::string::npos || colon < at
                            ? "" : spec.substr(at + 1, colon - at - 1);
  const std::string n = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if ((kind != "throw" && kind != "stall" && kind != "late") || !digits(r) || !digits(n) || std::stoll(n) < 1)
    throw ConfigError("PARITY_SIM_FAULT", "expected throw@RANK:N or stall@RANK:N (world rank RANK, at its N-th "
                                          "collective, N >= 1) or late@RANK:MS (it ends MS ms after its work), "
                                          "got '" + spec.substr(0, 64) + "'");
  f.rank = std::stoi(r);
  if (kind == "late")
    f.late_ms = std::stoull(n);
  else
    f.at = std::stoull(n), f.stall = kind == "stall";
  return f;
}

void set_sim_fault(SimWorld& world, const SimFault& f) { world.fault = f; }

SimOrder parse_sim_order(const std::string& name) {
  if (name == "rank") return SimOrder::rank;
  if (name == "ring") return SimOrder::ring;
  throw ConfigError("PARITY_SIM_ORDER", "expected rank (gloo's order, the default) or ring (NCCL's ring order), got '" +
                                            name.substr(0, 64) + "'");
}

void set_sim_order(SimWorld& world, SimOrder order) { world.order = order; }

}  // namespace parity::comm
