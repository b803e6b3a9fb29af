// Building the world communicator inside a rank process.
//
//   auto world = parity::comm::make_world_communicator();   // reads the environment
//   world->allreduce(std::span<double>(grad), ReduceOp::sum);
//   auto& tp = world->group({0, 1});                          // members only
//
// The environment comes from `parity launch` (RANK, WORLD_SIZE, LOCAL_RANK,
// PARITY_STORE_DIR, PARITY_BACKEND, PARITY_COMM_TIMEOUT_MS), from a torchrun-like launcher
// or a Kubernetes job (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), from srun (SLURM_*) or
// from mpirun (OMPI_COMM_WORLD_*); see comm/rank_env.h. With none of it, a world of one.
// Rendezvous: file store (one host), TCP store on rank 0 (comm/tcp_store.h, any hosts),
// bootstrap over MPI (any hosts, gloo/nccl under mpirun), or MPI itself (backend mpi).
// gloo binds loopback on one host, else the address on the route to the master (or to the
// other hosts); PARITY_GLOO_HOST / PARITY_GLOO_IFACE override it (world.cpp, gloo_host).
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
