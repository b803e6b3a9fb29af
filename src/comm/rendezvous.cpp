#include "comm/rendezvous.h"

#include <gloo/rendezvous/file_store.h>

#include <thread>

#include "core/error.h"

namespace parity::comm {

std::string scope_key(const std::vector<int>& members, int world_size) {
  std::string name = group_name(members, world_size);
  if (name == "world") return name;
  std::string s = "g";
  for (size_t i = 0; i < members.size(); ++i) s += (i ? "_" : "") + std::to_string(members[i]);
  return s;
}

namespace {

// gloo's FileStore with a non-blocking existence check; the file system answers at once.
class FileKeyValue : public KeyValueStore {
 public:
  explicit FileKeyValue(const std::string& dir) : dir_(dir), store_(dir) {}
  void set(const std::string& key, const std::string& value, std::chrono::milliseconds) override {
    store_.set(key, std::vector<char>(value.begin(), value.end()));
  }
  std::optional<std::string> try_get(const std::string& key, std::chrono::milliseconds) override {
    if (!store_.has(key)) return std::nullopt;
    auto v = store_.get(key);
    return std::string(v.begin(), v.end());
  }
  std::string where() const override { return "in " + dir_; }

 private:
  class Probe : public gloo::rendezvous::FileStore {
   public:
    using FileStore::FileStore;
    bool has(const std::string& key) { return check({key}); }
  };
  std::string dir_;
  Probe store_;
};

// How long a board waits for the store: a failure is being diagnosed, and a store behind a
// cut link must not hold the diagnosis (a note that cannot be read reads as no note).
constexpr std::chrono::milliseconds kBoardOpTimeout{1000};

class StoreBoard : public FailureBoard {
 public:
  StoreBoard(std::shared_ptr<KeyValueStore> store, std::string scope, int me)
      : store_(std::move(store)), scope_(std::move(scope)), me_(me) {}
  void post(const std::string& note) override {
    try {
      store_->set(key(me_), note, kBoardOpTimeout);
    } catch (const std::exception&) {  // unreachable: the others name this rank as silent
    }
  }
  std::optional<std::string> read(int r) override {
    try {
      return store_->try_get(key(r), kBoardOpTimeout);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }

 private:
  std::string key(int r) const { return scope_ + ".fail." + std::to_string(r); }
  std::shared_ptr<KeyValueStore> store_;
  std::string scope_;
  int me_;
};

class StoreRendezvous : public Rendezvous {
 public:
  explicit StoreRendezvous(std::shared_ptr<KeyValueStore> store) : store_(std::move(store)) {}

  std::vector<std::string> exchange(const std::string& scope, const std::vector<int>& members,
                                    int me, const std::string& mine,
                                    std::chrono::milliseconds timeout) override {
    auto key = [&](size_t r) { return scope + ".blob." + std::to_string(r); };
    store_->set(key(static_cast<size_t>(me)), mine, timeout);
    std::vector<std::string> out(members.size());
    std::vector<bool> got(members.size(), false);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    // Polls fast at first (members usually arrive within a millisecond of each other; every
    // group's set-up paid a whole 5 ms slice), then backs off to 5 ms so that waiting for a
    // late member does not take the cores it needs.
    std::chrono::microseconds pause{50};
    for (;;) {
      size_t missing = 0;
      for (size_t r = 0; r < members.size(); ++r) {
        if (got[r]) continue;
        if (auto v = store_->try_get(key(r), timeout)) {
          out[r] = std::move(*v);
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
        throw CommError("rendezvous of " + scope + " " + store_->where() + ": missing " + who +
                        " never arrived within " + std::to_string(timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
    }
  }

  std::unique_ptr<FailureBoard> board(const std::string& scope, const std::vector<int>&,
                                      int me) override {
    return std::make_unique<StoreBoard>(store_, scope, me);
  }

 private:
  std::shared_ptr<KeyValueStore> store_;
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

std::unique_ptr<Rendezvous> make_store_rendezvous(std::shared_ptr<KeyValueStore> store) {
  return std::make_unique<StoreRendezvous>(std::move(store));
}

std::unique_ptr<Rendezvous> make_file_rendezvous(const std::string& dir) {
  return make_store_rendezvous(std::make_shared<FileKeyValue>(dir));
}

}  // namespace parity::comm
