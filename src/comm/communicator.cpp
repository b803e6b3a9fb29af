#include "comm/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <set>

#include "core/error.h"
#include "core/knobs.h"

namespace parity::comm {

namespace {
// PARITY_COMM_TRACE=R: world rank R prints every collective it takes part in (group, op,
// sequence number, size, microseconds) to stderr; unset or not a number: nobody (-1).
int trace_rank() {
  static const int r = [] {
    const char* v = knob("PARITY_COMM_TRACE");
    if (v == nullptr || *v == '\0') return -1;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    return *end == '\0' && x >= 0 ? static_cast<int>(x) : -1;
  }();
  return r;
}
}  // namespace

std::string_view backend_name(Backend b) {
  switch (b) {
    case Backend::gloo: return "gloo";
    case Backend::mpi: return "mpi";
    case Backend::nccl: return "nccl";
    case Backend::sim: return "sim";
  }
  return "?";
}

Backend parse_backend(std::string_view s) {
  if (s == "gloo") return Backend::gloo;
  if (s == "mpi") return Backend::mpi;
  if (s == "nccl") return Backend::nccl;
  if (s == "sim") return Backend::sim;
  throw ConfigError("backend", "unknown backend '" + std::string(s) + "' (expected gloo, mpi, nccl or sim)");
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

std::string group_name(const std::vector<int>& world_ranks, int world_size) {
  bool is_world = static_cast<int>(world_ranks.size()) == world_size;
  for (size_t i = 0; is_world && i < world_ranks.size(); ++i)
    is_world = world_ranks[i] == static_cast<int>(i);
  if (is_world) return "world";
  std::string s = "group{";
  for (size_t i = 0; i < world_ranks.size(); ++i)
    s += (i ? "," : "") + std::to_string(world_ranks[i]);
  return s + "}";
}

Communicator::Communicator(Backend backend, std::vector<int> members, int rank,
                           std::chrono::milliseconds timeout, Communicator* world)
    : backend_(backend), members_(std::move(members)), rank_(rank), timeout_(timeout),
      world_(world) {
  int world_size = world ? world->size() : static_cast<int>(members_.size());
  name_ = group_name(members_, world_size);
  broken_ = world ? world->broken_ : std::make_shared<std::string>();
}

Communicator::~Communicator() = default;

std::string Communicator::transport() const { return std::string(backend_name(backend_)); }

void Communicator::set_timeout(std::chrono::milliseconds t) {
  if (t.count() <= 0) throw ConfigError("timeout", "must be positive, got " + std::to_string(t.count()) + " ms");
  timeout_ = t;
}

std::string Communicator::where() const {
  std::string s = "rank " + std::to_string(rank_);
  if (name_ != "world") s += " (world rank " + std::to_string(world_rank()) + ")";
  return s + " of " + name_ + " [" + std::string(backend_name(backend_)) + "]";
}

void Communicator::mark_broken(const std::string& why) {
  if (broken_->empty()) *broken_ = why;
}

void Communicator::check_usable(std::string_view op) const {
  if (!broken_->empty())
    throw CommError(where() + ", " + std::string(op) +
                    ": communicator unusable after an earlier failure: " + *broken_);
}

void Communicator::usage_error(std::string_view op, const std::string& msg) const {
  throw CommError(where() + ", " + std::string(op) + " #" + std::to_string(seq_ + 1) + ": " + msg);
}

template <class F>
void Communicator::collective(std::string_view op, const std::string& detail, F&& body) {
  check_usable(op);
  ++seq_;
  std::string what = std::string(op) + " #" + std::to_string(seq_);
  try {
    if (trace_rank() == world_rank()) {
      const auto t0 = std::chrono::steady_clock::now();
      body();
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "comm trace: %s %s (%s) %.1f us\n", where().c_str(), what.c_str(), detail.c_str(), us);
      return;
    }
    body();
  } catch (const std::exception& e) {
    std::string msg = where() + ", " + what + " (" + detail + "): " + e.what();
    mark_broken(msg);
    std::string diag;
    try {
      diag = diagnose(what);
    } catch (const std::exception& d) {
      diag = std::string("could not name the missing rank: ") + d.what();
    }
    throw CommError(msg + "; " + diag);
  }
}

std::vector<int64_t> Communicator::check_counts(std::string_view op, std::string_view what,
                                                std::span<const int64_t> counts) const {
  if (static_cast<int>(counts.size()) != size())
    usage_error(op, std::string(what) + " has " + std::to_string(counts.size()) +
                        " entries, the group has " + std::to_string(size()) + " ranks");
  for (int64_t c : counts)
    if (c < 0) usage_error(op, std::string(what) + " has a negative count " + std::to_string(c));
  return {counts.begin(), counts.end()};
}

static std::string describe(DType t, int64_t n) {
  return std::string(dtype_name(t)) + ", " + std::to_string(n) + " elements";
}

static int64_t total(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

void Communicator::run_allreduce(void* buf, int64_t n, DType t, ReduceOp op) {
  collective("allreduce", describe(t, n) + ", " + std::string(reduce_op_name(op)),
             [&] { do_allreduce(buf, n, t, op); });
}

void Communicator::run_broadcast(void* buf, int64_t n, DType t, int root) {
  if (root < 0 || root >= size())
    usage_error("broadcast", "root " + std::to_string(root) + " is not a rank of the group");
  collective("broadcast", describe(t, n) + ", root " + std::to_string(root),
             [&] { do_broadcast(buf, n, t, root); });
}

void Communicator::run_allgather(const void* in, int64_t nin, void* out, int64_t nout, DType t) {
  if (nout != nin * size())
    usage_error("allgather", "output has " + std::to_string(nout) + " elements, expected size * " +
                                 std::to_string(nin) + " = " + std::to_string(nin * size()));
  collective("allgather", describe(t, nin), [&] { do_allgather(in, out, nin, t); });
}

void Communicator::run_allgatherv(const void* in, int64_t nin, void* out, int64_t nout,
                                  std::span<const int64_t> counts_in, DType t) {
  auto counts = check_counts("allgatherv", "counts", counts_in);
  if (nin != counts[static_cast<size_t>(rank_)] || nout != total(counts))
    usage_error("allgatherv", "input has " + std::to_string(nin) + " and output " +
                                  std::to_string(nout) + " elements, counts say " +
                                  std::to_string(counts[static_cast<size_t>(rank_)]) + " and " +
                                  std::to_string(total(counts)));
  collective("allgatherv", describe(t, nout), [&] { do_allgatherv(in, out, counts, t); });
}

void Communicator::run_reduce_scatterv(const void* in, int64_t nin, void* out, int64_t nout,
                                       std::span<const int64_t> counts_in, DType t, ReduceOp op) {
  auto counts = check_counts("reduce_scatter", "counts", counts_in);
  if (nin != total(counts) || nout != counts[static_cast<size_t>(rank_)])
    usage_error("reduce_scatter", "input has " + std::to_string(nin) + " and output " +
                                      std::to_string(nout) + " elements, counts say " +
                                      std::to_string(total(counts)) + " and " +
                                      std::to_string(counts[static_cast<size_t>(rank_)]));
  collective("reduce_scatter", describe(t, nin) + ", " + std::string(reduce_op_name(op)),
             [&] { do_reduce_scatterv(in, out, counts, t, op); });
}

void Communicator::run_alltoall(const void* in, int64_t nin, void* out, int64_t nout, DType t) {
  if (nin != nout || nin % size() != 0)
    usage_error("alltoall", "input (" + std::to_string(nin) + ") and output (" +
                                std::to_string(nout) + ") must be equal multiples of the group size");
  collective("alltoall", describe(t, nin), [&] { do_alltoall(in, out, nin / size(), t); });
}

void Communicator::run_alltoallv(const void* in, int64_t nin, std::span<const int64_t> send_in,
                                 void* out, int64_t nout, std::span<const int64_t> recv_in,
                                 DType t) {
  auto send = check_counts("alltoallv", "send_counts", send_in);
  auto recv = check_counts("alltoallv", "recv_counts", recv_in);
  if (nin != total(send) || nout != total(recv))
    usage_error("alltoallv", "input has " + std::to_string(nin) + " and output " +
                                 std::to_string(nout) + " elements, counts say " +
                                 std::to_string(total(send)) + " and " + std::to_string(total(recv)));
  collective("alltoallv", describe(t, nin) + " sent, " + std::to_string(nout) + " received",
             [&] { do_alltoallv(in, send, out, recv, t); });
}

void Communicator::barrier() {
  collective("barrier", "no data", [&] { do_barrier(); });
}

namespace {
template <class T> void reduce_typed(const T* blocks, T* out, int64_t n, int nblocks, ReduceOp op) {
  for (int64_t i = 0; i < n; ++i) out[i] = blocks[i];
  for (int b = 1; b < nblocks; ++b) {
    const T* x = blocks + b * n;
    for (int64_t i = 0; i < n; ++i) {
      switch (op) {
        case ReduceOp::sum: out[i] = out[i] + x[i]; break;
        case ReduceOp::max: out[i] = std::max(out[i], x[i]); break;
        case ReduceOp::min: out[i] = std::min(out[i], x[i]); break;
      }
    }
  }
}
}  // namespace

void Communicator::reduce_blocks(const void* blocks, void* out, int64_t n, int nblocks, DType t, ReduceOp op) {
  with_dtype(t, [&](auto x) {
    using T = decltype(x);
    reduce_typed(static_cast<const T*>(blocks), static_cast<T*>(out), n, nblocks, op);
  });
}

void Communicator::do_reduce_scatterv(const void* in, void* out,
                                      const std::vector<int64_t>& counts, DType t, ReduceOp op) {
  // Rank j receives every rank's block j: (size, counts[rank]) in group-rank order.
  int64_t mine = counts[static_cast<size_t>(rank_)];
  std::vector<int64_t> recv(static_cast<size_t>(size()), mine);
  std::vector<char> blocks(static_cast<size_t>(mine * size() * dtype_size(t)));
  do_alltoallv(in, counts, blocks.data(), recv, t);
  reduce_blocks(blocks.data(), out, mine, size(), t, op);
}

Communicator& Communicator::group(const std::vector<int>& world_ranks) {
  Communicator* w = world();
  // A group made before was checked then: found, it costs a lookup. Naming and checking the ranks
  // first cost O(size) in strings and a set per call, and every rank asks for its data-parallel
  // group per parameter: O(W^2) over a simulated world of W threads (issue 50, 2048 ranks).
  if (broken_->empty() && world_ranks != w->members_) {
    auto it = w->groups_.find(world_ranks);
    if (it != w->groups_.end()) return *it->second;
  }
  std::string op = "group(" + group_name(world_ranks, w->size()) + ")";
  check_usable(op);
  std::set<int> seen;
  for (int r : world_ranks) {
    if (r < 0 || r >= w->size() || !seen.insert(r).second)
      usage_error(op, "world rank " + std::to_string(r) + " is out of range or repeated");
  }
  if (!seen.count(w->world_rank()))
    usage_error(op, "this rank (world rank " + std::to_string(w->world_rank()) + ") is not a member");
  if (world_ranks == w->members_) return *w;
  auto it = w->groups_.find(world_ranks);
  if (it != w->groups_.end()) return *it->second;
  try {
    auto g = w->do_make_group(world_ranks);
    return *w->groups_.emplace(world_ranks, std::move(g)).first->second;
  } catch (const std::exception& e) {
    std::string msg = where() + ", creating " + group_name(world_ranks, w->size()) + ": " + e.what();
    mark_broken(msg);
    throw CommError(msg);
  }
}

}  // namespace parity::comm
