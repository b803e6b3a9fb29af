// The mpi backend: the same collectives over OpenMPI, as non-blocking calls polled
// against the timeout (MPI itself has none). Sub-groups: a handshake among the members
// (with timeout, naming who is missing), then MPI_Comm_create_group over the members only.
// reduce_scatter uses the base class's alltoallv + rank-ordered reduction, so its bits
// equal gloo's.
#pragma once
#include <chrono>
#include <memory>

#include "comm/communicator.h"
#include "comm/rendezvous.h"

namespace parity::comm {

// Initialises MPI on first use (MPI_THREAD_FUNNELED) and finalises it at exit unless a
// collective failed.
std::unique_ptr<Communicator> make_mpi_world(std::chrono::milliseconds timeout);

// Bootstrap for gloo or nccl ranks started by mpirun: blobs travel as MPI point-to-point
// messages on a private duplicate of MPI_COMM_WORLD, so the ranks may span hosts.
std::unique_ptr<Rendezvous> make_mpi_rendezvous();

}  // namespace parity::comm
