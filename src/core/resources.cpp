#include "core/resources.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace parity {

namespace {
std::string limit_str(int resource) {
  struct rlimit r {};
  if (getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return "unlimited";
  return std::to_string(static_cast<unsigned long long>(r.rlim_cur));
}
}  // namespace

std::string resource_hint(int err, const std::string& where) {
  switch (err) {
    case EMFILE: return " (the open-file limit, ulimit -n, is " + limit_str(RLIMIT_NOFILE) + ")";
    case ENFILE: return " (the system's open-file table is full)";
    case EAGAIN: return " (the process limit, ulimit -u, is " + limit_str(RLIMIT_NPROC) + "; or memory)";
    case EFBIG: return " (the file-size limit, ulimit -f, is " + limit_str(RLIMIT_FSIZE) + " bytes)";
    case ENOMEM: return " (out of memory)";
    case ENOSPC:
    case EDQUOT: {
      if (where.empty()) return " (the filesystem is full)";
      struct statvfs s {};
      const std::string dir = where.substr(0, where.find_last_of('/') == 0 ? 1 : where.find_last_of('/'));
      if (statvfs(dir.empty() ? "." : dir.c_str(), &s) != 0) return " (" + dir + ": the filesystem is full)";
      return " (" + dir + ": the filesystem is full, " +
             std::to_string(static_cast<unsigned long long>(s.f_bavail) * s.f_frsize) + " bytes free)";
    }
    default: return "";
  }
}

std::string describe_errno(int err, const std::string& where) { return std::strerror(err) + resource_hint(err, where); }

int reserve_file(int fd, int64_t bytes) {
  const int e = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (e == 0) return 0;
  if (e != EOPNOTSUPP && e != EINVAL) return e;
  return ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
}

}  // namespace parity
