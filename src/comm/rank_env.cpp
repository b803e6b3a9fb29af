#include "comm/rank_env.h"

#include <cctype>
#include <cstdlib>
#include <initializer_list>
#include <optional>

#include "comm/redis_store.h"
#include "core/error.h"

namespace parity::comm {

namespace {

// More names than any cluster has: a malformed range ("n[1-99999999]") is refused, not expanded.
constexpr size_t kMaxHosts = 100000;

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// A non-negative integer that fits an int, or ConfigError naming `var`.
int to_int(const std::string& s, const std::string& var, const std::string& what) {
  std::string t = s;
  const bool neg = !t.empty() && t[0] == '-';
  if (neg) t.erase(0, 1);
  if (!all_digits(t) || t.size() > 9)
    throw ConfigError(var, "expected " + what + ", got '" + s + "'");
  const int v = std::atoi(t.c_str());
  return neg ? -v : v;
}

// Splits at commas outside brackets.
std::vector<std::string> split_top(const std::string& s, const std::string& var) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) throw ConfigError(var, "unbalanced ']' in '" + s + "'");
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) throw ConfigError(var, "unclosed '[' in '" + s + "'");
  out.push_back(cur);
  return out;
}

// One host pattern with any number of bracketed ranges, expanded left to right.
void expand(const std::string& pat, const std::string& var, const std::string& whole,
            std::vector<std::string>& out) {
  const size_t lb = pat.find('[');
  if (lb == std::string::npos) {
    if (pat.empty()) throw ConfigError(var, "empty host name in '" + whole + "'");
    out.push_back(pat);
    return;
  }
  const size_t rb = pat.find(']', lb);
  const std::string prefix = pat.substr(0, lb), body = pat.substr(lb + 1, rb - lb - 1);
  std::vector<std::string> tails;
  if (rb + 1 < pat.size()) expand(pat.substr(rb + 1), var, whole, tails);
  else tails.push_back("");
  if (body.empty()) throw ConfigError(var, "empty range '[]' in '" + whole + "'");
  for (const std::string& range : split_top(body, var)) {
    const size_t dash = range.find('-');
    const std::string lo = range.substr(0, dash), hi = dash == std::string::npos ? lo : range.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 9 || hi.size() > 9)
      throw ConfigError(var, "bad range '" + range + "' in '" + whole + "' (want N or N-M, digits)");
    const long a = std::atol(lo.c_str()), b = std::atol(hi.c_str());
    if (b < a) throw ConfigError(var, "range '" + range + "' in '" + whole + "' runs backwards");
    if (static_cast<size_t>(b - a + 1) * tails.size() + out.size() > kMaxHosts)
      throw ConfigError(var, "'" + whole + "' names more than " + std::to_string(kMaxHosts) + " hosts");
    for (long v = a; v <= b; ++v) {
      std::string num = std::to_string(v);
      if (num.size() < lo.size()) num.insert(0, lo.size() - num.size(), '0');  // "08-10": width 2
      for (const std::string& t : tails) out.push_back(prefix + num + t);
    }
  }
}

struct Names {
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;
};

class Reader {
 public:
  explicit Reader(const EnvLookup& env) : env_(env) {}
  std::optional<std::string> get(const std::string& n) const {
    auto v = env_(n);
    if (v && v->empty()) return std::nullopt;
    return v;
  }
  bool has(const std::string& n) const { return get(n).has_value(); }
  std::optional<int> opt_int(const std::string& n) const {
    auto v = get(n);
    if (!v) return std::nullopt;
    return to_int(*v, n, "an integer");
  }
  int req_int(const std::string& n, const std::string& why) const {
    auto v = opt_int(n);
    if (!v) throw ConfigError(n, "missing: " + why);
    return *v;
  }

 private:
  const EnvLookup& env_;
};

std::optional<std::string> first_set(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (const char* v = std::getenv(n); v != nullptr && *v != '\0') return std::string(v);
  return std::nullopt;
}

void check_identity(const RankEnv& e, const Names& n) {
  const std::string ws = std::to_string(e.world_size);
  if (e.world_size < 1) throw ConfigError(n.world, "must be at least 1, got " + ws);
  if (e.rank < 0 || e.rank >= e.world_size)
    throw ConfigError(n.rank,
                      "must be in [0, " + std::string(n.world) + " = " + ws + "), got " + std::to_string(e.rank));
  if (e.local_world_size < 1 || e.local_world_size > e.world_size)
    throw ConfigError(n.local_world, "must be in [1, " + std::string(n.world) + " = " + ws + "], got " +
                                         std::to_string(e.local_world_size));
  if (e.local_rank < 0 || e.local_rank >= e.local_world_size)
    throw ConfigError(n.local_rank, "must be in [0, " + std::string(n.local_world) + " = " +
                                        std::to_string(e.local_world_size) + "), got " + std::to_string(e.local_rank));
}

void read_torchrun(RankEnv& e, const Reader& r) {
  e.source = "RANK";
  e.rank = r.req_int("RANK", "");
  e.world_size = r.req_int("WORLD_SIZE", "RANK is set (torchrun-style identity) but WORLD_SIZE is not");
  e.local_rank = r.opt_int("LOCAL_RANK").value_or(e.rank);
  e.local_world_size = r.opt_int("LOCAL_WORLD_SIZE").value_or(e.world_size);
  check_identity(e, {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"});
}

void read_mpi(RankEnv& e, const Reader& r) {
  e.source = "OMPI_COMM_WORLD_RANK";
  e.rank = r.req_int("OMPI_COMM_WORLD_RANK", "");
  e.world_size = r.req_int("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not");
  e.local_rank = r.opt_int("OMPI_COMM_WORLD_LOCAL_RANK").value_or(0);
  e.local_world_size = r.opt_int("OMPI_COMM_WORLD_LOCAL_SIZE").value_or(e.local_rank + 1);
  check_identity(e, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                     "OMPI_COMM_WORLD_LOCAL_SIZE"});
}

void read_slurm(RankEnv& e, const Reader& r) {
  e.source = "SLURM_PROCID";
  e.rank = r.req_int("SLURM_PROCID", "");
  const char* ntasks = r.has("SLURM_NTASKS") || !r.has("SLURM_NPROCS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
  e.world_size = r.req_int(ntasks, "SLURM_PROCID is set (an srun task) but SLURM_NTASKS is not");
  e.local_rank = r.opt_int("SLURM_LOCALID").value_or(0);
  e.local_world_size = e.world_size;
  if (auto tpn = r.get("SLURM_TASKS_PER_NODE")) {
    const std::vector<int> per_node = parse_tasks_per_node(*tpn);
    const int node = r.req_int("SLURM_NODEID", "SLURM_TASKS_PER_NODE is set but SLURM_NODEID is not");
    if (node < 0 || node >= static_cast<int>(per_node.size()))
      throw ConfigError("SLURM_NODEID", "must be in [0, " + std::to_string(per_node.size()) +
                                            ") (the nodes of SLURM_TASKS_PER_NODE = " + *tpn + "), got " +
                                            std::to_string(node));
    e.local_world_size = per_node[static_cast<size_t>(node)];
  }
  check_identity(e, {"SLURM_PROCID", ntasks, "SLURM_LOCALID", "SLURM_TASKS_PER_NODE"});
}

int read_port(const Reader& r, const std::string& why) {
  const int port = r.req_int("MASTER_PORT", why);
  if (port < 1 || port > 65535) throw ConfigError("MASTER_PORT", "must be in [1, 65535], got " + std::to_string(port));
  return port;
}

// Rank 0's store for a Slurm step without MASTER_ADDR: the first node of the step's list.
void slurm_master(RankEnv& e, const Reader& r) {
  for (const char* var : {"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"}) {
    if (auto list = r.get(var)) {
      e.master_addr = parse_hostlist(*list, var).front();
      e.master_from = var;
      break;
    }
  }
  if (e.master_addr.empty())
    throw ConfigError("MASTER_ADDR", "missing: an srun task of a world of " + std::to_string(e.world_size) +
                                         " needs MASTER_ADDR or a node list (SLURM_NODELIST) to find rank 0");
  if (r.has("MASTER_PORT")) {
    e.master_port = read_port(r, "");
  } else if (auto job = r.opt_int("SLURM_JOB_ID")) {
    e.master_port = 15000 + *job % 10000;  // the same on every task of the job, below the ephemeral ports
  } else {
    throw ConfigError("MASTER_PORT", "missing: neither MASTER_PORT nor SLURM_JOB_ID is set");
  }
}

// PARITY_STORE=redis://...: the URL with the run id as its path (from PARITY_RUN_ID, a Slurm
// step, or torchrun's TORCHELASTIC_RUN_ID when the URL has none).
std::string redis_store(const RankEnv& e, const Reader& r) {
  const std::string url = *r.get("PARITY_STORE");
  RedisUrl u = parse_redis_url(url);
  if (u.run.empty()) {
    if (auto id = r.get("PARITY_RUN_ID")) u.run = *id;
    else if (auto job = r.get("SLURM_JOB_ID"); job && e.source == "SLURM_PROCID")
      u.run = "slurm-" + *job + "." + r.get("SLURM_STEP_ID").value_or(r.get("SLURM_STEPID").value_or("0"));
    else if (auto te = r.get("TORCHELASTIC_RUN_ID")) u.run = *te;
    else
      throw ConfigError("PARITY_RUN_ID", "missing: a Redis store (PARITY_STORE = " + url +
                                             ") is shared by runs; name this one, the same on every rank: "
                                             "PARITY_RUN_ID=ID or PARITY_STORE=" + url + "/ID");
    parse_redis_url("redis://h/" + u.run, "PARITY_RUN_ID");  // the same rules for the id
  }
  const bool v6 = u.host.find(':') != std::string::npos;
  return "redis://" + (v6 ? "[" + u.host + "]" : u.host) + ":" + std::to_string(u.port) + "/" + u.run;
}

// torchrun's agent serves its own store on MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE):
// parity's keys go under the run id and the restart count there.
void agent_store(RankEnv& e, const Reader& r) {
  const std::string run = r.get("TORCHELASTIC_RUN_ID").value_or("none");
  for (char c : run)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      throw ConfigError("TORCHELASTIC_RUN_ID", "letters, digits and '._-' only, got '" + run + "'");
  const int attempt = r.opt_int("TORCHELASTIC_RESTART_COUNT").value_or(0);
  e.store_prefix = "/parity/" + run + "/attempt_" + std::to_string(attempt) + "/";
  if (auto p = r.get("PARITY_TORCH_STORE")) {
    if (*p != "1" && *p != "2")
      throw ConfigError("PARITY_TORCH_STORE", "the protocol of torchrun's agent store: 1 (torch before 2.2) or 2 "
                                              "(torch 2.2 and later), got '" + *p + "'");
    e.torch_protocol = *p == "1" ? 1 : 2;
  }
}

void choose_rendezvous(RankEnv& e, const Reader& r) {
  const bool multi = e.world_size > 1;
  if (!e.store_dir.empty()) e.rendezvous = RendezvousKind::file;
  else if (!multi) e.rendezvous = RendezvousKind::local;
  else if (e.backend == Backend::mpi) e.rendezvous = RendezvousKind::mpi;
  else if (r.has("PARITY_STORE")) e.rendezvous = RendezvousKind::redis;
  else if (r.get("TORCHELASTIC_USE_AGENT_STORE") == "True" && r.has("MASTER_ADDR"))
    e.rendezvous = RendezvousKind::torch;
  else if (r.has("MASTER_ADDR")) e.rendezvous = RendezvousKind::tcp;
  else if (e.under_mpirun) e.rendezvous = RendezvousKind::mpi;
  else if (e.source == "SLURM_PROCID") e.rendezvous = RendezvousKind::tcp;
  else
    throw ConfigError("MASTER_ADDR",
                      std::string(r.has("MASTER_PORT") ? "missing (MASTER_PORT is set): " : "") + "a world of " +
                          std::to_string(e.world_size) +
                          " needs a rendezvous: MASTER_ADDR and MASTER_PORT (rank 0 serves a TCP store there), "
                          "PARITY_STORE=redis://HOST:PORT/RUN, mpirun, srun, or `parity launch` (PARITY_STORE_DIR)");
  if (e.backend == Backend::mpi && multi && !e.under_mpirun)
    throw ConfigError("PARITY_BACKEND", "mpi needs the ranks started by mpirun (this rank's identity comes from " +
                                            e.source + "); use gloo, or start the ranks with mpirun");
  if (e.rendezvous == RendezvousKind::redis) e.store_url = redis_store(e, r);
  if (e.rendezvous == RendezvousKind::torch) agent_store(e, r);
  if (e.rendezvous != RendezvousKind::tcp && e.rendezvous != RendezvousKind::torch) return;
  if (auto addr = r.get("MASTER_ADDR")) {
    e.master_addr = *addr;
    e.master_from = "MASTER_ADDR";
    e.master_port = read_port(r, "MASTER_ADDR is set but MASTER_PORT is not");
  } else {
    slurm_master(e, r);
  }
}

}  // namespace

std::vector<std::string> parse_hostlist(const std::string& list, const std::string& var) {
  if (list.empty()) throw ConfigError(var, "empty host list");
  std::vector<std::string> out;
  for (const std::string& part : split_top(list, var)) expand(part, var, list, out);
  return out;
}

std::vector<int> parse_tasks_per_node(const std::string& s, const std::string& var) {
  std::vector<int> out;
  for (const std::string& item : split_top(s, var)) {
    const size_t p = item.find('(');
    const int n = to_int(item.substr(0, p), var, "N or N(xM) per node");
    int times = 1;
    if (p != std::string::npos) {
      if (item.size() < p + 4 || item.compare(p, 2, "(x") != 0 || item.back() != ')')
        throw ConfigError(var, "expected N or N(xM), got '" + item + "' in '" + s + "'");
      times = to_int(item.substr(p + 2, item.size() - p - 3), var, "a repeat count in N(xM)");
    }
    if (n < 1 || times < 1 || out.size() + static_cast<size_t>(times) > kMaxHosts)
      throw ConfigError(var, "bad entry '" + item + "' in '" + s + "'");
    out.insert(out.end(), static_cast<size_t>(times), n);
  }
  return out;
}

RankEnv parse_rank_env(const EnvLookup& env, std::optional<Backend> backend) {
  const Reader r(env);
  RankEnv e;
  e.under_mpirun = r.has("OMPI_COMM_WORLD_RANK");
  const bool srun_task = r.has("SLURM_PROCID") && (r.has("SLURM_STEP_ID") || r.has("SLURM_STEPID"));
  if (r.has("RANK")) {
    read_torchrun(e, r);
  } else if (e.under_mpirun) {
    read_mpi(e, r);
  } else if (srun_task) {
    read_slurm(e, r);
  } else if (auto ws = r.opt_int("WORLD_SIZE"); ws && *ws > 1) {
    throw ConfigError("RANK", "missing: WORLD_SIZE is " + std::to_string(*ws) + " but RANK is not set");
  }
  if (auto d = r.get("PARITY_STORE_DIR")) e.store_dir = *d;
  e.backend = e.under_mpirun && e.store_dir.empty() ? Backend::mpi : Backend::gloo;
  if (auto b = r.get("PARITY_BACKEND")) e.backend = parse_backend(*b);
  if (backend) e.backend = *backend;
  const int ms = r.opt_int("PARITY_COMM_TIMEOUT_MS").value_or(static_cast<int>(kDefaultTimeout.count()));
  if (ms <= 0) throw ConfigError("PARITY_COMM_TIMEOUT_MS", "must be positive, got " + std::to_string(ms));
  e.timeout = std::chrono::milliseconds(ms);
  choose_rendezvous(e, r);
  return e;
}

RankEnv read_rank_env(std::optional<Backend> backend) {
  return parse_rank_env([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  }, backend);
}

namespace {
thread_local int thread_rank = -1;  // >= 0: this thread is that rank of a simulated world
}  // namespace

ThreadRank::ThreadRank(int rank) { thread_rank = rank; }
ThreadRank::~ThreadRank() { thread_rank = -1; }

std::string rank_label() {
  if (thread_rank >= 0) return std::to_string(thread_rank);
  return first_set({"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}).value_or("?");
}

int local_rank_or(int fallback) {
  if (thread_rank >= 0) return thread_rank;
  const auto v = first_set({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"});
  return v ? std::atoi(v->c_str()) : fallback;
}

}  // namespace parity::comm
