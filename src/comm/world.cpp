#include "comm/world.h"

#include <cstdlib>
#include <utility>

#include "comm/gloo/gloo_communicator.h"
#include "comm/gloo/shm_communicator.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/net.h"
#include "comm/redis_store.h"
#include "comm/tcp_store.h"
#include "comm/torch_store.h"
#include "core/error.h"
#include "core/knobs.h"
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
  switch (env.rendezvous) {
    case RendezvousKind::file: return make_file_rendezvous(env.store_dir);
    case RendezvousKind::tcp:
      return make_tcp_rendezvous(env.master_addr, env.master_port, env.rank, env.world_size, env.timeout);
    case RendezvousKind::mpi: return make_mpi_rendezvous();
    case RendezvousKind::redis:
      return make_redis_rendezvous(parse_redis_url(env.store_url), env.rank, env.world_size, env.timeout);
    case RendezvousKind::torch: return make_torch_rendezvous(env);
    case RendezvousKind::local: break;
  }
  if (env.world_size > 1)
    throw ConfigError("MASTER_ADDR", "no rendezvous for a world of " + std::to_string(env.world_size));
  return make_local_rendezvous();
}

bool is_loopback(const std::string& a) { return a.rfind("127.", 0) == 0 || a == "::1"; }

const char* env_value(const char* name) {  // a setting of core/knobs.h's table, "" as unset
  const char* v = knob(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// A store every rank reaches over the network (rank 0's TCP store, a Redis server, torchrun's agent).
bool network_store(const RankEnv& env) {
  return env.rendezvous == RendezvousKind::tcp || env.rendezvous == RendezvousKind::redis ||
         env.rendezvous == RendezvousKind::torch;
}

// Where that store is: the master, or the Redis server.
std::pair<std::string, int> store_endpoint(const RankEnv& env) {
  if (env.rendezvous == RendezvousKind::redis) {
    const RedisUrl u = parse_redis_url(env.store_url);
    return {u.host, u.port};
  }
  return {env.master_addr, env.master_port};
}

// What every rank publishes before the choice (so that every rank takes part, whatever
// overrides it has): tcp, redis: the address on the route to the store; mpi: host name and
// network namespace.
std::string host_blob(const RankEnv& env) {
  if (network_store(env)) {
    const auto [host, port] = store_endpoint(env);
    return net::route_source_address(host, port);
  }
  return local_host() + "\n" + net::netns_id();
}

// The address gloo's TCP transport binds. PARITY_GLOO_HOST, else PARITY_GLOO_IFACE's
// address, else: one host (file store, world of one): loopback. TCP store: the address on
// the route to MASTER_ADDR; on the master's own host that may be loopback (MASTER_ADDR
// 127.0.0.1, or a name /etc/hosts maps to 127.0.1.1), and when another rank published a
// non-loopback address the route to that rank is taken instead. MPI bootstrap: loopback when
// every rank shares this host name and network namespace, the host name when the names
// differ, else (namespaces or containers that share a name) the first non-loopback address.
std::string gloo_host(const RankEnv& env, Rendezvous& rdzv) {
  std::vector<std::string> hosts;
  const bool spans = env.world_size > 1 && (network_store(env) || env.rendezvous == RendezvousKind::mpi);
  std::string mine;
  if (spans) {
    std::vector<int> all(static_cast<size_t>(env.world_size));
    for (int i = 0; i < env.world_size; ++i) all[static_cast<size_t>(i)] = i;
    mine = host_blob(env);
    hosts = rdzv.exchange("hosts", all, env.rank, mine, env.timeout);
  }
  if (const char* h = env_value("PARITY_GLOO_HOST")) return h;
  if (const char* i = env_value("PARITY_GLOO_IFACE")) return net::interface_address(i, "PARITY_GLOO_IFACE");
  if (!spans) return "127.0.0.1";
  if (network_store(env)) {
    if (!is_loopback(mine)) return mine;
    for (const auto& h : hosts)
      if (!is_loopback(h)) return net::route_source_address(h, store_endpoint(env).second);
    return mine;
  }
  const std::string name = local_host();
  bool same_name = true, same_ns = true;
  for (const auto& h : hosts) {
    same_name = same_name && h.substr(0, h.find('\n')) == name;
    same_ns = same_ns && h == mine;
  }
  if (same_ns) return "127.0.0.1";
  if (!same_name) return name;
  const std::string ext = net::first_external_address();
  return ext.empty() ? name : ext;
}

}  // namespace

std::unique_ptr<Communicator> make_world_communicator(const RankEnv& env) {
  switch (env.backend) {
    case Backend::mpi:
      return make_mpi_world(env.timeout);
    case Backend::gloo: {
      auto rdzv = rendezvous_for(env);
      std::string host = gloo_host(env, *rdzv);
      // Every rank on this host (gloo would bind loopback): shared memory, unless
      // PARITY_GLOO_SHM=0. Every rank takes the same decision (gloo_host agrees).
      if (gloo_shm_enabled() && is_loopback(host)) return make_shm_world(env.rank, env.world_size, rdzv, env.timeout);
      return make_gloo_world(env.rank, env.world_size, rdzv, host, env.timeout);
    }
    case Backend::nccl:
#if PARITY_HAVE_CUDA
      return make_nccl_world(env.rank, env.world_size, env.local_rank, rendezvous_for(env), env.timeout);
#else
      throw ConfigError("PARITY_BACKEND", "nccl: this build has no CUDA/NCCL (configure found none)");
#endif
    case Backend::sim:
      throw ConfigError("PARITY_BACKEND", "sim: its ranks are threads that `parity run --backend sim` starts itself; "
                                          "a rank process (launch, mpirun, srun, torchrun, --as-rank) needs gloo, mpi "
                                          "or nccl");
  }
  throw ConfigError("PARITY_BACKEND", "unknown backend");
}

std::unique_ptr<Communicator> make_world_communicator(const WorldOptions& opts) {
  RankEnv env = read_rank_env(opts.backend);
  if (opts.timeout) env.timeout = *opts.timeout;
  return make_world_communicator(env);
}

}  // namespace parity::comm
