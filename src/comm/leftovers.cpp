#include "comm/leftovers.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "comm/diagnose.h"
#include "comm/gloo/shm_communicator.h"
#include "core/error.h"
#include "core/resources.h"

namespace parity::comm {

std::string process_id(pid_t pid) {
  const auto f = proc_stat_fields(pid);
  return f.size() > 19 ? std::to_string(pid) + " " + f[19] : "";
}

namespace {

// Store directories of launchers that are gone: removed before a new one is made, so nothing
// piles up or trips a later run. A directory is stale when the launcher named in its owner
// file no longer runs, or it has no owner file and is over an hour old (a launcher killed
// between mkdtemp and writing the file).
void remove_stale_store_dirs(const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("parity-rdzv-", 0) != 0 || !e.is_directory(ec)) continue;
    std::ifstream f(e.path() / "launcher");
    std::string owner;
    std::getline(f, owner);
    bool stale = false;
    if (!owner.empty()) {
      const pid_t pid = static_cast<pid_t>(std::atol(owner.c_str()));
      stale = pid <= 0 || process_id(pid) != owner;
    } else {
      const auto age = fs::file_time_type::clock::now() - fs::last_write_time(e.path(), ec);
      stale = !ec && age > std::chrono::hours(1);
    }
    if (stale) fs::remove_all(e.path(), ec);
  }
}

}  // namespace

std::string make_store_dir(std::string root) {
  if (root.empty()) {
    const char* t = std::getenv("TMPDIR");
    root = t && *t ? t : "/tmp";
  }
  remove_stale_store_dirs(root);
  remove_stale_shm_segments();
  std::string tmpl = root + "/parity-rdzv-XXXXXX";
  if (!mkdtemp(tmpl.data()))
    throw IoError("launch: cannot create a store directory under " + root + ": " + describe_errno(errno, tmpl));
  std::ofstream owner(tmpl + "/launcher");
  owner << process_id(getpid()) << "\n";
  owner.close();
  if (!owner) {
    const int e = errno;
    std::error_code ec;
    std::filesystem::remove_all(tmpl, ec);
    throw IoError("launch: cannot write " + tmpl + "/launcher: " + describe_errno(e, tmpl + "/launcher"));
  }
  return tmpl;
}

}  // namespace parity::comm
