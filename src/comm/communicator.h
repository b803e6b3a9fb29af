// The one interface the parallel code uses to talk between ranks.
//
// A Communicator is a group of world ranks. Every method below except the accessors is
// collective over the group: every member calls it, in the same order, with sizes that
// agree (a count vector is the same on every member). Buffers are typed spans of float,
// double or int64_t; the nccl backend takes device pointers, the CPU backends host memory.
//
// Every collective has a timeout (default 60 s). When a member crashes, exits or never
// arrives, the call throws CommError naming the calling rank, the group, the collective
// (with its sequence number in this group) and the missing rank; the communicator (and
// every group of the same world) is unusable afterwards and the process should exit.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "comm/backend.h"
#include "core/tensor.h"

namespace parity::comm {

enum class ReduceOp { sum, max, min };

std::string_view reduce_op_name(ReduceOp op);

constexpr std::chrono::milliseconds kDefaultTimeout{60000};

template <class T>
concept CommElement = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                      std::is_same_v<T, int64_t>;

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }                     // index in this group
  int size() const { return static_cast<int>(members_.size()); }
  int world_rank() const { return members_[static_cast<size_t>(rank_)]; }
  const std::vector<int>& members() const { return members_; }  // world ranks, group order
  const std::string& name() const { return name_; }      // "world" or "group{0,2,4,6}"
  Backend backend() const { return backend_; }
  // How this backend moves bytes here: "tcp" or "shm" for gloo (comm/gloo/shm_communicator.h),
  // else the backend's name.
  virtual std::string transport() const;
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t);         // local: every member should agree

  // buf (n) on every rank -> elementwise reduction of all ranks' buf, on every rank.
  template <CommElement T> void allreduce(std::span<T> buf, ReduceOp op) {
    run_allreduce(buf.data(), to_i64(buf.size()), dtype_of<T>(), op);
  }
  // buf (n): root's values on every rank. root is a group rank.
  template <CommElement T> void broadcast(std::span<T> buf, int root) {
    run_broadcast(buf.data(), to_i64(buf.size()), dtype_of<T>(), root);
  }
  // in (n) -> out (size * n), rank r's block at r * n.
  template <CommElement T> void allgather(std::span<const T> in, std::span<T> out) {
    run_allgather(in.data(), to_i64(in.size()), out.data(), to_i64(out.size()), dtype_of<T>());
  }
  // in (counts[rank]) -> out (sum counts), rank r's block after ranks < r. Zeros allowed.
  template <CommElement T>
  void allgatherv(std::span<const T> in, std::span<T> out, std::span<const int64_t> counts) {
    run_allgatherv(in.data(), to_i64(in.size()), out.data(), to_i64(out.size()), counts,
                   dtype_of<T>());
  }
  // in (size * n) -> out (n): block `rank` of the reduction over ranks.
  template <CommElement T>
  void reduce_scatter(std::span<const T> in, std::span<T> out, ReduceOp op) {
    std::vector<int64_t> counts(static_cast<size_t>(size()), to_i64(out.size()));
    reduce_scatterv(in, out, std::span<const int64_t>(counts), op);
  }
  // in (sum counts) -> out (counts[rank]): uneven blocks, zeros allowed. Each element is
  // reduced in group-rank order on its owner, so the bits do not depend on the backend.
  template <CommElement T>
  void reduce_scatterv(std::span<const T> in, std::span<T> out, std::span<const int64_t> counts,
                       ReduceOp op) {
    run_reduce_scatterv(in.data(), to_i64(in.size()), out.data(), to_i64(out.size()), counts,
                        dtype_of<T>(), op);
  }
  // in (size * n) -> out (size * n): block j of in goes to rank j, arrives as block `rank`.
  template <CommElement T> void alltoall(std::span<const T> in, std::span<T> out) {
    run_alltoall(in.data(), to_i64(in.size()), out.data(), to_i64(out.size()), dtype_of<T>());
  }
  // in (sum send_counts) -> out (sum recv_counts). send_counts[j] elements go to rank j;
  // recv_counts[j] arrive from rank j (it must equal rank j's send_counts[rank]).
  template <CommElement T>
  void alltoallv(std::span<const T> in, std::span<const int64_t> send_counts, std::span<T> out,
                 std::span<const int64_t> recv_counts) {
    run_alltoallv(in.data(), to_i64(in.size()), send_counts, out.data(), to_i64(out.size()),
                  recv_counts, dtype_of<T>());
  }
  void barrier();

  // The sub-group of these world ranks (in this order; this rank must be one of them).
  // Collective over the members only; cached per world, so the same list gives the same
  // communicator. The reference stays valid as long as the world communicator lives.
  Communicator& group(const std::vector<int>& world_ranks);

  // Counts each collective of this group; the n-th call is "#n" in error messages.
  uint64_t sequence() const { return seq_; }

 protected:
  Communicator(Backend backend, std::vector<int> members, int rank,
               std::chrono::milliseconds timeout, Communicator* world);

  // Raw collectives: arguments already checked, sizes in elements, counts per group rank.
  virtual void do_allreduce(void* buf, int64_t n, DType t, ReduceOp op) = 0;
  virtual void do_broadcast(void* buf, int64_t n, DType t, int root) = 0;
  virtual void do_allgather(const void* in, void* out, int64_t n, DType t) = 0;
  virtual void do_allgatherv(const void* in, void* out, const std::vector<int64_t>& counts,
                             DType t) = 0;
  // Default: alltoallv of the blocks, then a host-side reduction in group-rank order.
  virtual void do_reduce_scatterv(const void* in, void* out, const std::vector<int64_t>& counts,
                                  DType t, ReduceOp op);
  virtual void do_alltoall(const void* in, void* out, int64_t n, DType t) = 0;
  virtual void do_alltoallv(const void* in, const std::vector<int64_t>& send_counts, void* out,
                            const std::vector<int64_t>& recv_counts, DType t) = 0;
  virtual void do_barrier() = 0;
  // Builds the sub-group (members in world ranks); called on the world communicator.
  virtual std::unique_ptr<Communicator> do_make_group(const std::vector<int>& world_ranks) = 0;
  // After a failed collective: names the member(s) that did not take part, e.g.
  // "missing rank 3 (pid 812 has exited)". `what` is this rank's "allreduce #12".
  virtual std::string diagnose(const std::string& what) = 0;

  // out[i] = blocks[0][i] op blocks[1][i] op ... (nblocks blocks of n elements, in block
  // order, left to right): the same bits on every rank that reduces the same blocks.
  static void reduce_blocks(const void* blocks, void* out, int64_t n, int nblocks, DType t, ReduceOp op);

  // Runs body as collective `op` of this group with error translation and bookkeeping.
  template <class F> void collective(std::string_view op, const std::string& detail, F&& body);
  std::string where() const;  // "rank 2 (world rank 5) of group{1,5}"
  Communicator* world() { return world_ ? world_ : this; }
  void mark_broken(const std::string& why);

 private:
  static int64_t to_i64(size_t n) { return static_cast<int64_t>(n); }
  void run_allreduce(void* buf, int64_t n, DType t, ReduceOp op);
  void run_broadcast(void* buf, int64_t n, DType t, int root);
  void run_allgather(const void* in, int64_t nin, void* out, int64_t nout, DType t);
  void run_allgatherv(const void* in, int64_t nin, void* out, int64_t nout,
                      std::span<const int64_t> counts, DType t);
  void run_reduce_scatterv(const void* in, int64_t nin, void* out, int64_t nout,
                           std::span<const int64_t> counts, DType t, ReduceOp op);
  void run_alltoall(const void* in, int64_t nin, void* out, int64_t nout, DType t);
  void run_alltoallv(const void* in, int64_t nin, std::span<const int64_t> send_counts, void* out,
                     int64_t nout, std::span<const int64_t> recv_counts, DType t);
  std::vector<int64_t> check_counts(std::string_view op, std::string_view what,
                                    std::span<const int64_t> counts) const;
  [[noreturn]] void usage_error(std::string_view op, const std::string& msg) const;
  void check_usable(std::string_view op) const;

  Backend backend_;
  std::vector<int> members_;
  int rank_;
  std::chrono::milliseconds timeout_;
  Communicator* world_;  // null for the world itself
  std::string name_;
  uint64_t seq_ = 0;
  std::shared_ptr<std::string> broken_;  // shared by a world and its groups
  std::map<std::vector<int>, std::unique_ptr<Communicator>> groups_;  // world only
};

// "group{0,2,4,6}"; "world" when the list is 0..world_size-1 in order.
std::string group_name(const std::vector<int>& world_ranks, int world_size);

}  // namespace parity::comm
