#include "comm/mpi/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <thread>

#include "comm/mpi/mpi_runtime.h"
#include "core/error.h"

namespace parity::comm {

namespace {

using ms = std::chrono::milliseconds;
constexpr int kA2avTag = 7201;

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i64: return MPI_INT64_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

int to_int(int64_t n) {
  if (n > INT_MAX) throw CommError("count " + std::to_string(n) + " exceeds MPI's int range");
  return static_cast<int>(n);
}

void counts_displs(const std::vector<int64_t>& c, std::vector<int>& counts, std::vector<int>& displs) {
  counts.resize(c.size());
  displs.resize(c.size());
  int64_t off = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    counts[i] = to_int(c[i]);
    displs[i] = to_int(off);
    off += c[i];
  }
}

void check(int rc, const char* call) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw CommError(std::string(call) + " failed: " + std::string(msg, static_cast<size_t>(len)));
  }
}

struct MpiShared {
  MPI_Comm ctrl = MPI_COMM_NULL;      // failure notes and group handshakes, world ranks
  std::vector<PeerInfo> peers;        // by world rank
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::vector<int> members, int rank, ms timeout,
                  Communicator* world, std::shared_ptr<MpiShared> shared)
      : Communicator(Backend::mpi, std::move(members), rank, timeout, world),
        comm_(comm), shared_(std::move(shared)) {}

 protected:
  void finish(int rc, MPI_Request& req, const char* call) {
    check(rc, call);
    mpi::wait(req, timeout());
  }
  void do_allreduce(void* buf, int64_t n, DType t, ReduceOp op) override {
    MPI_Request req;
    finish(MPI_Iallreduce(MPI_IN_PLACE, non_null(buf), to_int(n), mpi_type(t), mpi_op(op), comm_, &req), req,
           "MPI_Iallreduce");
  }
  void do_broadcast(void* buf, int64_t n, DType t, int root) override {
    MPI_Request req;
    finish(MPI_Ibcast(non_null(buf), to_int(n), mpi_type(t), root, comm_, &req), req, "MPI_Ibcast");
  }
  void do_allgather(const void* in, void* out, int64_t n, DType t) override {
    MPI_Request req;
    finish(MPI_Iallgather(non_null(in), to_int(n), mpi_type(t), non_null(out), to_int(n), mpi_type(t), comm_, &req),
           req, "MPI_Iallgather");
  }
  void do_allgatherv(const void* in, void* out, const std::vector<int64_t>& c, DType t) override {
    std::vector<int> counts, displs;
    counts_displs(c, counts, displs);
    MPI_Request req;
    finish(MPI_Iallgatherv(non_null(in), counts[static_cast<size_t>(rank())], mpi_type(t), non_null(out),
                           counts.data(), displs.data(), mpi_type(t), comm_, &req),
           req, "MPI_Iallgatherv");
  }
  void do_alltoall(const void* in, void* out, int64_t n, DType t) override {
    MPI_Request req;
    finish(MPI_Ialltoall(non_null(in), to_int(n), mpi_type(t), non_null(out), to_int(n), mpi_type(t), comm_, &req),
           req, "MPI_Ialltoall");
  }
  // Point-to-point (OpenMPI 4.1's MPI_Ialltoallv stalled in the following collective when
  // counts were zero in our property tests); every transfer polled against the timeout.
  void do_alltoallv(const void* in, const std::vector<int64_t>& send, void* out,
                    const std::vector<int64_t>& recv, DType t) override {
    std::vector<MPI_Request> reqs;
    int64_t soff = 0, roff = 0;
    int es = static_cast<int>(dtype_size(t));
    for (int j = 0; j < size(); ++j) {
      size_t sj = static_cast<size_t>(j);
      const char* src = static_cast<const char*>(in) + soff * es;
      char* dst = static_cast<char*>(out) + roff * es;
      if (j == rank()) {
        if (send[sj]) std::memcpy(dst, src, static_cast<size_t>(send[sj] * es));
      } else {
        if (recv[sj]) {
          reqs.emplace_back();
          check(MPI_Irecv(dst, to_int(recv[sj]), mpi_type(t), j, kA2avTag, comm_, &reqs.back()), "MPI_Irecv");
        }
        if (send[sj]) {
          reqs.emplace_back();
          check(MPI_Isend(src, to_int(send[sj]), mpi_type(t), j, kA2avTag, comm_, &reqs.back()), "MPI_Isend");
        }
      }
      soff += send[sj];
      roff += recv[sj];
    }
    auto deadline = std::chrono::steady_clock::now() + timeout();
    for (auto& r : reqs)
      mpi::wait(r, std::max(ms(1), std::chrono::duration_cast<ms>(deadline - std::chrono::steady_clock::now())));
  }
  void do_barrier() override {
    MPI_Request req;
    finish(MPI_Ibarrier(comm_, &req), req, "MPI_Ibarrier");
  }
  std::unique_ptr<Communicator> do_make_group(const std::vector<int>& world_ranks) override;
  std::string diagnose(const std::string& what) override {
    mpi::mark_failed();
    mpi::MessageBoard board(shared_->ctrl, members(), rank());
    std::vector<PeerInfo> peers;
    for (int w : members()) peers.push_back(shared_->peers[static_cast<size_t>(w)]);
    return name_missing(rank(), members(), peers, board, what, std::min(timeout(), ms(3000)));
  }

 private:
  void handshake(const std::vector<int>& world_ranks, const std::string& name);

  MPI_Comm comm_;
  std::shared_ptr<MpiShared> shared_;
};

// Every member says hello to every other on the control communicator, so that a missing
// member is named before MPI_Comm_create_group (which has no timeout) is entered.
void MpiCommunicator::handshake(const std::vector<int>& world_ranks, const std::string& name) {
  for (int w : world_ranks)
    if (w != world_rank()) mpi::post_send(shared_->ctrl, w, mpi::kHandshakeTag, name);
  std::vector<bool> got(world_ranks.size(), false);
  auto deadline = std::chrono::steady_clock::now() + timeout();
  for (;;) {
    std::string missing;
    for (size_t i = 0; i < world_ranks.size(); ++i) {
      if (got[i] || world_ranks[i] == world_rank()) continue;
      if (auto m = mpi::try_recv(shared_->ctrl, world_ranks[i], mpi::kHandshakeTag)) {
        if (*m != name)
          throw CommError("creating " + name + ": rank " + std::to_string(world_ranks[i]) +
                          " is creating " + *m + " instead");
        got[i] = true;
      } else {
        missing += (missing.empty() ? "rank " : ", rank ") + std::to_string(world_ranks[i]);
      }
    }
    if (missing.empty()) return;
    if (std::chrono::steady_clock::now() > deadline)
      throw CommError("creating " + name + ": missing " + missing + " never arrived within " +
                      std::to_string(timeout().count()) + " ms");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::unique_ptr<Communicator> MpiCommunicator::do_make_group(const std::vector<int>& world_ranks) {
  std::string name = group_name(world_ranks, size());
  handshake(world_ranks, name);
  MPI_Group world_group, sub;
  MPI_Comm_group(comm_, &world_group);
  MPI_Group_incl(world_group, static_cast<int>(world_ranks.size()), world_ranks.data(), &sub);
  MPI_Comm comm;
  check(MPI_Comm_create_group(comm_, sub, 7104, &comm), "MPI_Comm_create_group");
  MPI_Group_free(&sub);
  MPI_Group_free(&world_group);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int me = static_cast<int>(std::find(world_ranks.begin(), world_ranks.end(), world_rank()) -
                            world_ranks.begin());
  return std::make_unique<MpiCommunicator>(comm, world_ranks, me, timeout(), world(), shared_);
}

std::vector<PeerInfo> gather_peers(MPI_Comm comm, int size) {
  constexpr int kLen = 320;
  std::string mine = encode_peer(local_peer());
  mine.resize(kLen, '\0');
  std::vector<char> all(static_cast<size_t>(kLen * size));
  check(MPI_Allgather(mine.data(), kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, comm), "MPI_Allgather");
  std::vector<PeerInfo> peers;
  for (int i = 0; i < size; ++i)
    peers.push_back(decode_peer(std::string(all.data() + i * kLen)));
  return peers;
}

class MpiRendezvous : public Rendezvous {
 public:
  MpiRendezvous() : comm_(mpi::dup_world()) {}
  std::vector<std::string> exchange(const std::string& scope, const std::vector<int>& members, int me,
                                    const std::string& mine, ms timeout) override {
    for (size_t r = 0; r < members.size(); ++r)
      if (static_cast<int>(r) != me) mpi::post_send(comm_, members[r], mpi::kBlobTag, mine);
    std::vector<std::string> out(members.size());
    std::vector<bool> got(members.size(), false);
    out[static_cast<size_t>(me)] = mine;
    got[static_cast<size_t>(me)] = true;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::string missing;
      for (size_t r = 0; r < members.size(); ++r) {
        if (got[r]) continue;
        if (auto m = mpi::try_recv(comm_, members[r], mpi::kBlobTag)) {
          out[r] = std::move(*m);
          got[r] = true;
        } else {
          missing += (missing.empty() ? "rank " : ", rank ") + std::to_string(members[r]);
        }
      }
      if (missing.empty()) return out;
      if (std::chrono::steady_clock::now() > deadline)
        throw CommError("MPI bootstrap of " + scope + ": missing " + missing +
                        " never arrived within " + std::to_string(timeout.count()) + " ms");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  std::unique_ptr<FailureBoard> board(const std::string&, const std::vector<int>& members, int me) override {
    return std::make_unique<mpi::MessageBoard>(comm_, members, me);
  }

 private:
  MPI_Comm comm_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_world(std::chrono::milliseconds timeout) {
  mpi::ensure_init();
  auto shared = std::make_shared<MpiShared>();
  shared->ctrl = mpi::dup_world();
  MPI_Comm comm = mpi::dup_world();
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  shared->peers = gather_peers(comm, size);
  std::vector<int> members(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) members[static_cast<size_t>(i)] = i;
  return std::make_unique<MpiCommunicator>(comm, std::move(members), rank, timeout, nullptr, shared);
}

std::unique_ptr<Rendezvous> make_mpi_rendezvous() {
  mpi::ensure_init();
  return std::make_unique<MpiRendezvous>();
}

}  // namespace parity::comm
