// Building the world communicator inside a rank process.
//
//   auto world = parity::comm::make_world_communicator();   // reads the environment
//   world->allreduce(std::span<double>(grad), ReduceOp::sum);
//   auto& tp = world->group({0, 1});                          // members only
//
// The environment comes from `parity launch` (RANK, WORLD_SIZE, LOCAL_RANK,
// PARITY_STORE_DIR, PARITY_BACKEND, PARITY_COMM_TIMEOUT_MS) or from mpirun
// (OMPI_COMM_WORLD_*); see comm/rendezvous.h. With none of it, a world of one.
// Rendezvous used: gloo/nccl with PARITY_STORE_DIR -> file store (one host);
// gloo/nccl under mpirun without it -> bootstrap over MPI (any hosts); mpi -> MPI itself.
#pragma once
#include <chrono>
#include <memory>
#include <optional>

#include "comm/communicator.h"
#include "comm/rendezvous.h"

namespace parity::comm {

struct WorldOptions {
  std::optional<Backend> backend;                  // overrides PARITY_BACKEND
  std::optional<std::chrono::milliseconds> timeout;  // overrides PARITY_COMM_TIMEOUT_MS
};

std::unique_ptr<Communicator> make_world_communicator(const WorldOptions& opts = {});
std::unique_ptr<Communicator> make_world_communicator(const RankEnv& env);

// True when this build has the nccl backend (CUDA and NCCL found at configure time).
bool nccl_built();

}  // namespace parity::comm
