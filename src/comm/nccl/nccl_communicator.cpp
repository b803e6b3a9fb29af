#include "comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/device.h"
#include "core/error.h"
#include "kernels/runtime.cuh"

namespace parity::comm {

namespace {

using ms = std::chrono::milliseconds;

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CommError(std::string(what) + ": " + cudaGetErrorString(e));
}

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw CommError(std::string(what) + ": " + ncclGetErrorString(r));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

const char* at(const void* p, int64_t elems, DType t) {
  return static_cast<const char*>(p) + elems * dtype_size(t);
}
char* at(void* p, int64_t elems, DType t) { return static_cast<char*>(p) + elems * dtype_size(t); }

// NCCL moves device memory only. The parallel code hands it model buffers (managed memory
// on cuda: passed as they are, cuda::device_accessible) and small host vectors (counts,
// losses, norms): those go through a device temporary, copied in before and out after the
// collective, on the communicator's stream.

class Staged {
 public:
  Staged(cudaStream_t s) : stream_(s) {}
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  ~Staged() {
    for (void* t : temps_) cudaFree(t);
  }
  const void* in(const void* p, int64_t bytes) { return stage(const_cast<void*>(p), bytes, false); }
  void* out(void* p, int64_t bytes) { return stage(p, bytes, true); }
  // After the collective completed: results back to host buffers.
  void copy_back() {
    for (auto& [host, dev, bytes] : back_)
      cuda_check(cudaMemcpyAsync(host, dev, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_), "stage out");
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (stage out)");
  }

 private:
  void* stage(void* p, int64_t bytes, bool back) {
    if (bytes <= 0 || cuda::device_accessible(p)) return p;
    void* d = nullptr;
    cuda_check(cudaMalloc(&d, static_cast<size_t>(bytes)), "cudaMalloc (stage)");
    temps_.push_back(d);
    cuda_check(cudaMemcpyAsync(d, p, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_), "stage in");
    if (back) back_.push_back({p, d, bytes});
    return d;
  }
  cudaStream_t stream_;
  std::vector<void*> temps_;
  struct Back {
    void* host;
    void* dev;
    int64_t bytes;
  };
  std::vector<Back> back_;
};

int64_t total(const std::vector<int64_t>& c) {
  int64_t s = 0;
  for (int64_t x : c) s += x;
  return s;
}

struct Shared {
  std::shared_ptr<Rendezvous> rdzv;
  int world_size = 1;
  int device = 0;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(std::vector<int> members, int rank, ms timeout, Communicator* world,
                   std::shared_ptr<Shared> shared)
      : Communicator(Backend::nccl, std::move(members), rank, timeout, world), shared_(std::move(shared)) {
    cuda_check(cudaSetDevice(shared_->device), "cudaSetDevice");
    scope_ = scope_key(this->members(), shared_->world_size) + ".nccl";
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::string mine = encode_peer(local_peer()) + '\0' + std::string(reinterpret_cast<char*>(&id), sizeof(id));
    auto blobs = shared_->rdzv->exchange(scope_, this->members(), rank, mine, timeout);
    for (const auto& b : blobs) peers_.push_back(decode_peer(b.substr(0, b.find('\0'))));
    const std::string& root = blobs[0];
    std::memcpy(&id, root.data() + root.find('\0') + 1, sizeof(id));
    nccl_check(ncclCommInitRank(&comm_, size(), id, rank), "ncclCommInitRank");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_check(cudaMalloc(&scratch_, 64), "cudaMalloc");
  }
  ~NcclCommunicator() override {
    if (scratch_) cudaFree(scratch_);
    if (comm_) (aborted_ ? ncclCommAbort(comm_) : ncclCommDestroy(comm_));
    if (stream_) cudaStreamDestroy(stream_);
  }

 protected:
  // Waits for the stream with the timeout; aborts the NCCL communicator on failure.
  void sync() {
    auto start = std::chrono::steady_clock::now();
    for (;;) {
      cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) cuda_check(e, "cudaStreamQuery");
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess) abort_and_throw(std::string("NCCL async error: ") + ncclGetErrorString(async));
      if (std::chrono::steady_clock::now() - start > timeout())
        abort_and_throw("timed out after " + std::to_string(timeout().count()) + " ms waiting for the other members");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  [[noreturn]] void abort_and_throw(const std::string& why) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
    throw CommError(why);
  }
  void do_allreduce(void* host_buf, int64_t n, DType t, ReduceOp op) override {
    Staged st(stream_);
    void* buf = st.out(host_buf, n * dtype_size(t));
    nccl_check(ncclAllReduce(buf, buf, static_cast<size_t>(n), nccl_type(t), nccl_op(op), comm_, stream_),
               "ncclAllReduce");
    sync();
    st.copy_back();
  }
  void do_broadcast(void* host_buf, int64_t n, DType t, int root) override {
    Staged st(stream_);
    void* buf = st.out(host_buf, n * dtype_size(t));
    nccl_check(ncclBroadcast(buf, buf, static_cast<size_t>(n), nccl_type(t), root, comm_, stream_), "ncclBroadcast");
    sync();
    st.copy_back();
  }
  void do_allgather(const void* host_in, void* host_out, int64_t n, DType t) override {
    Staged st(stream_);
    const void* in = st.in(host_in, n * dtype_size(t));
    void* out = st.out(host_out, n * size() * dtype_size(t));
    nccl_check(ncclAllGather(in, out, static_cast<size_t>(n), nccl_type(t), comm_, stream_), "ncclAllGather");
    sync();
    st.copy_back();
  }
  void do_allgatherv(const void* in, void* out, const std::vector<int64_t>& counts, DType t) override {
    std::vector<int64_t> send(counts.size(), counts[static_cast<size_t>(rank())]);
    grouped_exchange(in, send, /*same_block=*/true, out, counts, t);
  }
  void do_reduce_scatterv(const void* host_in, void* host_out, const std::vector<int64_t>& counts, DType t,
                          ReduceOp op) override {
    Staged st(stream_);
    const void* in = st.in(host_in, total(counts) * dtype_size(t));
    void* out = st.out(host_out, counts[static_cast<size_t>(rank())] * dtype_size(t));
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    int64_t off = 0;
    for (int j = 0; j < size(); ++j) {
      size_t c = static_cast<size_t>(counts[static_cast<size_t>(j)]);
      if (c) nccl_check(ncclReduce(at(in, off, t), out, c, nccl_type(t), nccl_op(op), j, comm_, stream_), "ncclReduce");
      off += counts[static_cast<size_t>(j)];
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    sync();
    st.copy_back();
  }
  void do_alltoall(const void* in, void* out, int64_t n, DType t) override {
    std::vector<int64_t> c(static_cast<size_t>(size()), n);
    grouped_exchange(in, c, false, out, c, t);
  }
  void do_alltoallv(const void* in, const std::vector<int64_t>& send, void* out,
                    const std::vector<int64_t>& recv, DType t) override {
    grouped_exchange(in, send, false, out, recv, t);
  }
  void do_barrier() override {
    nccl_check(ncclAllReduce(scratch_, scratch_, 1, ncclInt64, ncclSum, comm_, stream_), "ncclAllReduce");
    sync();
  }
  std::unique_ptr<Communicator> do_make_group(const std::vector<int>& world_ranks) override {
    int me = static_cast<int>(std::find(world_ranks.begin(), world_ranks.end(), world_rank()) - world_ranks.begin());
    return std::make_unique<NcclCommunicator>(world_ranks, me, timeout(), world(), shared_);
  }
  std::string diagnose(const std::string& what) override {
    aborted_ = true;
    auto board = shared_->rdzv->board(scope_, members(), rank());
    return name_missing(rank(), members(), peers_, *board, what, std::min(timeout(), ms(3000)));
  }

 private:
  // Grouped send/recv: block j of `in` (or all of `in` when same_block) goes to rank j.
  void grouped_exchange(const void* host_in, const std::vector<int64_t>& send, bool same_block, void* host_out,
                        const std::vector<int64_t>& recv, DType t) {
    Staged st(stream_);
    const int64_t in_elems = same_block ? send[static_cast<size_t>(rank())] : total(send);
    const void* in = st.in(host_in, in_elems * dtype_size(t));
    void* out = st.out(host_out, total(recv) * dtype_size(t));
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    int64_t soff = 0, roff = 0;
    for (int j = 0; j < size(); ++j) {
      size_t sj = static_cast<size_t>(j);
      const void* src = same_block ? in : at(in, soff, t);
      if (j == rank()) {
        if (recv[sj]) cuda_check(cudaMemcpyAsync(at(out, roff, t), src, static_cast<size_t>(recv[sj] * dtype_size(t)),
                                                 cudaMemcpyDefault, stream_), "cudaMemcpyAsync");
      } else {
        if (send[sj])
          nccl_check(ncclSend(src, static_cast<size_t>(send[sj]), nccl_type(t), j, comm_, stream_), "ncclSend");
        if (recv[sj])
          nccl_check(ncclRecv(at(out, roff, t), static_cast<size_t>(recv[sj]), nccl_type(t), j, comm_, stream_),
                     "ncclRecv");
      }
      soff += send[sj];
      roff += recv[sj];
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    sync();
    st.copy_back();
  }

  std::shared_ptr<Shared> shared_;
  std::string scope_;
  std::vector<PeerInfo> peers_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  bool aborted_ = false;
};

}  // namespace


std::unique_ptr<Communicator> make_nccl_world(int rank, int world_size, int local_rank,
                                              std::shared_ptr<Rendezvous> rendezvous,
                                              std::chrono::milliseconds timeout) {
  int devices = parity::cuda_device_count();
  if (devices == 0) throw CommError("nccl backend: rank " + std::to_string(rank) + " sees no CUDA device");
  auto shared = std::make_shared<Shared>();
  shared->rdzv = std::move(rendezvous);
  shared->world_size = world_size;
  shared->device = local_rank % devices;
  std::vector<int> members(static_cast<size_t>(world_size));
  for (int i = 0; i < world_size; ++i) members[static_cast<size_t>(i)] = i;
  return std::make_unique<NcclCommunicator>(std::move(members), rank, timeout, nullptr, shared);
}

}  // namespace parity::comm
