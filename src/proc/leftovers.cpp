#include "proc/leftovers.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

#include "comm/diagnose.h"
#include "comm/gloo/shm_communicator.h"
#include "core/error.h"
#include "core/resources.h"

namespace parity::proc {

using comm::proc_stat_fields;
using comm::remove_stale_shm_segments;

namespace {
constexpr char kShmRoot[] = "/dev/shm";
}  // namespace

std::string process_id(pid_t pid) {
  const auto f = proc_stat_fields(pid);
  return f.size() > 19 ? std::to_string(pid) + " " + f[19] : "";
}

// Directories of launchers that are gone: removed before a new one is made, so nothing piles
// up or trips a later run. A directory is stale when the launcher named in its owner file no
// longer runs (its pid and start time: a reused pid is another process), or it has no owner
// file and is over an hour old (a launcher killed between mkdtemp and writing the file).
int remove_stale_owned_dirs(const std::string& root, const std::string& prefix) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || e.is_symlink(ec) || !e.is_directory(ec)) continue;
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
    if (stale && fs::remove_all(e.path(), ec) > 0 && !ec) ++removed;
  }
  return removed;
}

std::string make_owned_dir(const std::string& root, const std::string& prefix) {
  std::string tmpl = root + "/" + prefix + "XXXXXX";
  if (!mkdtemp(tmpl.data()))
    throw IoError("launch: cannot create a directory under " + root + ": " + describe_errno(errno, tmpl));
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

std::string make_store_dir(std::string root) {
  if (root.empty()) {
    const char* t = std::getenv("TMPDIR");
    root = t && *t ? t : "/tmp";
  }
  remove_stale_owned_dirs(root, "parity-rdzv-");  // with OpenMPI's session directories of mpi jobs
  remove_stale_shm_segments();
  remove_stale_owned_dirs(kShmRoot, "parity-mpi-");  // OpenMPI's segments of parity's dead mpi jobs
  return make_owned_dir(root, "parity-rdzv-");
}

std::string make_mpi_shm_dir(const std::string& fallback) {
  try {
    return make_owned_dir(kShmRoot, "parity-mpi-");
  } catch (const IoError&) {
    return fallback;  // no /dev/shm to write: the segments go where the store is, swept with it
  }
}

void mpi_dirs_env(std::vector<std::string>& env, const std::string& shm_dir, const std::string& store_dir) {
  const std::pair<std::string, std::string> ours[] = {{"OMPI_MCA_btl_vader_backing_directory=", shm_dir},
                                                      {"OMPI_MCA_orte_tmpdir_base=", store_dir}};
  for (const auto& [name, value] : ours) {
    std::erase_if(env, [&n = name](const std::string& e) { return e.rfind(n, 0) == 0; });
    env.push_back(name + value);
  }
}

}  // namespace parity::proc
