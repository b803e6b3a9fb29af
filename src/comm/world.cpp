#include "comm/world.h"

#include <cstdlib>

#include "comm/gloo/gloo_communicator.h"
#include "comm/mpi/mpi_communicator.h"
#include "core/error.h"
#if PARITY_HAVE_CUDA
#include "comm/nccl/nccl_communicator.h"
#endif

namespace parity::comm {

bool nccl_built() {
#if PARITY_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

namespace {

std::shared_ptr<Rendezvous> rendezvous_for(const RankEnv& env) {
  if (!env.store_dir.empty()) return make_file_rendezvous(env.store_dir);
  if (env.under_mpirun) return make_mpi_rendezvous();
  if (env.world_size == 1) return make_local_rendezvous();
  throw ConfigError("PARITY_STORE_DIR", "no rendezvous for WORLD_SIZE " + std::to_string(env.world_size));
}

// Loopback when every rank is on this host, else the host name (or PARITY_GLOO_HOST).
std::string gloo_host(const RankEnv& env, Rendezvous& rdzv) {
  if (const char* h = std::getenv("PARITY_GLOO_HOST"); h && *h) return h;
  if (env.world_size == 1 || !env.under_mpirun || !env.store_dir.empty()) return "127.0.0.1";
  std::vector<int> all(static_cast<size_t>(env.world_size));
  for (int i = 0; i < env.world_size; ++i) all[static_cast<size_t>(i)] = i;
  auto hosts = rdzv.exchange("hosts", all, env.rank, local_host(), env.timeout);
  for (const auto& h : hosts)
    if (h != hosts[0]) return local_host();
  return "127.0.0.1";
}

}  // namespace

std::unique_ptr<Communicator> make_world_communicator(const RankEnv& env) {
  switch (env.backend) {
    case Backend::mpi:
      return make_mpi_world(env.timeout);
    case Backend::gloo: {
      auto rdzv = rendezvous_for(env);
      std::string host = gloo_host(env, *rdzv);
      return make_gloo_world(env.rank, env.world_size, rdzv, host, env.timeout);
    }
    case Backend::nccl:
#if PARITY_HAVE_CUDA
      return make_nccl_world(env.rank, env.world_size, env.local_rank, rendezvous_for(env), env.timeout);
#else
      throw ConfigError("PARITY_BACKEND", "nccl: this build has no CUDA/NCCL (configure found none)");
#endif
  }
  throw ConfigError("PARITY_BACKEND", "unknown backend");
}

std::unique_ptr<Communicator> make_world_communicator(const WorldOptions& opts) {
  RankEnv env = read_rank_env();
  if (opts.backend) env.backend = *opts.backend;
  if (opts.timeout) env.timeout = *opts.timeout;
  return make_world_communicator(env);
}

}  // namespace parity::comm
