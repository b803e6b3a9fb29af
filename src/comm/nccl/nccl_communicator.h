// The nccl backend (built only when CUDA and NCCL are found): buffers are device pointers
// on the rank's GPU (LOCAL_RANK modulo the visible devices). The unique id travels
// through the same Rendezvous as gloo's addresses (file store or MPI bootstrap).
// Each collective is enqueued on the communicator's stream and then polled
// (cudaStreamQuery + ncclCommGetAsyncError) against the timeout; on timeout the NCCL
// communicator is aborted. allgatherv / alltoall(v) are grouped send/recv; uneven
// reduce_scatter is grouped ncclReduce, one root per block.
#pragma once
#include <chrono>
#include <memory>

#include "comm/communicator.h"
#include "comm/rendezvous.h"

namespace parity::comm {

std::unique_ptr<Communicator> make_nccl_world(int rank, int world_size, int local_rank,
                                              std::shared_ptr<Rendezvous> rendezvous,
                                              std::chrono::milliseconds timeout);

}  // namespace parity::comm
