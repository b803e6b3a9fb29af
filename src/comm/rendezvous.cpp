#include "comm/rendezvous.h"

#include <gloo/rendezvous/file_store.h>

#include <cstdlib>
#include <thread>

#include "core/error.h"

namespace parity::comm {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name, int fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  try {
    size_t used = 0;
    int x = std::stoi(v, &used);
    if (used != std::string(v).size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw ConfigError(name, std::string("expected an integer, got '") + v + "'");
  }
}

}  // namespace

RankEnv read_rank_env() {
  RankEnv e;
  e.under_mpirun = env("OMPI_COMM_WORLD_RANK") != nullptr;
  if (env("RANK")) {
    e.rank = env_int("RANK", 0);
    e.world_size = env_int("WORLD_SIZE", 1);
    e.local_rank = env_int("LOCAL_RANK", e.rank);
    e.local_world_size = env_int("LOCAL_WORLD_SIZE", e.world_size);
  } else if (e.under_mpirun) {
    e.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    e.world_size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    e.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    e.local_world_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  }
  if (e.world_size < 1) throw ConfigError("WORLD_SIZE", "must be at least 1");
  if (e.rank < 0 || e.rank >= e.world_size)
    throw ConfigError("RANK", "must be in [0, WORLD_SIZE), got " + std::to_string(e.rank));
  if (const char* d = env("PARITY_STORE_DIR")) e.store_dir = d;
  e.backend = e.under_mpirun && !env("PARITY_STORE_DIR") ? Backend::mpi : Backend::gloo;
  if (const char* b = env("PARITY_BACKEND")) e.backend = parse_backend(b);
  int ms = env_int("PARITY_COMM_TIMEOUT_MS", static_cast<int>(kDefaultTimeout.count()));
  if (ms <= 0) throw ConfigError("PARITY_COMM_TIMEOUT_MS", "must be positive");
  e.timeout = std::chrono::milliseconds(ms);
  if (e.world_size > 1 && e.store_dir.empty() && !e.under_mpirun && e.backend != Backend::mpi)
    throw ConfigError("PARITY_STORE_DIR",
                      "WORLD_SIZE > 1 needs a rendezvous: start ranks with `parity launch` or mpirun");
  return e;
}

std::string scope_key(const std::vector<int>& members, int world_size) {
  std::string name = group_name(members, world_size);
  if (name == "world") return name;
  std::string s = "g";
  for (size_t i = 0; i < members.size(); ++i) s += (i ? "_" : "") + std::to_string(members[i]);
  return s;
}

namespace {

// gloo's FileStore with a non-blocking existence check.
class ProbeStore : public gloo::rendezvous::FileStore {
 public:
  using FileStore::FileStore;
  bool has(const std::string& key) { return check({key}); }
};

std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }

class FileBoard : public FailureBoard {
 public:
  FileBoard(ProbeStore& store, std::string scope, int me)
      : store_(store), scope_(std::move(scope)), me_(me) {}
  void post(const std::string& note) override { store_.set(key(me_), bytes(note)); }
  std::optional<std::string> read(int r) override {
    if (!store_.has(key(r))) return std::nullopt;
    auto v = store_.get(key(r));
    return std::string(v.begin(), v.end());
  }

 private:
  std::string key(int r) const { return scope_ + ".fail." + std::to_string(r); }
  ProbeStore& store_;
  std::string scope_;
  int me_;
};

class FileRendezvous : public Rendezvous {
 public:
  explicit FileRendezvous(const std::string& dir) : dir_(dir), store_(dir) {}

  std::vector<std::string> exchange(const std::string& scope, const std::vector<int>& members,
                                    int me, const std::string& mine,
                                    std::chrono::milliseconds timeout) override {
    auto key = [&](size_t r) { return scope + ".blob." + std::to_string(r); };
    store_.set(key(static_cast<size_t>(me)), bytes(mine));
    std::vector<std::string> out(members.size());
    std::vector<bool> got(members.size(), false);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      size_t missing = 0;
      for (size_t r = 0; r < members.size(); ++r) {
        if (got[r]) continue;
        if (store_.has(key(r))) {
          auto v = store_.get(key(r));
          out[r].assign(v.begin(), v.end());
          got[r] = true;
        } else {
          ++missing;
        }
      }
      if (missing == 0) return out;
      if (std::chrono::steady_clock::now() > deadline) {
        std::string who;
        for (size_t r = 0; r < members.size(); ++r)
          if (!got[r]) who += (who.empty() ? "rank " : ", rank ") + std::to_string(members[r]);
        throw CommError("rendezvous of " + scope + " in " + dir_ + ": missing " + who +
                        " never arrived within " + std::to_string(timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  std::unique_ptr<FailureBoard> board(const std::string& scope, const std::vector<int>&,
                                      int me) override {
    return std::make_unique<FileBoard>(store_, scope, me);
  }

 private:
  std::string dir_;
  ProbeStore store_;
};

class NoBoard : public FailureBoard {
 public:
  void post(const std::string&) override {}
  std::optional<std::string> read(int) override { return std::nullopt; }
};

class LocalRendezvous : public Rendezvous {
 public:
  std::vector<std::string> exchange(const std::string& scope, const std::vector<int>& members, int,
                                    const std::string& mine, std::chrono::milliseconds) override {
    if (members.size() != 1) throw CommError("rendezvous of " + scope + ": a local rendezvous holds one rank");
    return {mine};
  }
  std::unique_ptr<FailureBoard> board(const std::string&, const std::vector<int>&, int) override {
    return std::make_unique<NoBoard>();
  }
};

}  // namespace

std::unique_ptr<Rendezvous> make_local_rendezvous() { return std::make_unique<LocalRendezvous>(); }

std::unique_ptr<Rendezvous> make_file_rendezvous(const std::string& dir) {
  return std::make_unique<FileRendezvous>(dir);
}

}  // namespace parity::comm
