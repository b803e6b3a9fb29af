// One safe writer and one lock for every output (core/output.h).
#include "core/output.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "core/error.h"
#include "core/files.h"
#include "core/text.h"

namespace parity {

namespace {

namespace fs = std::filesystem;

std::string dir_of(const std::string& path) {
  const fs::path p(path);
  return p.has_parent_path() && !p.parent_path().empty() ? p.parent_path().string() : ".";
}


// Up to n bytes from the head of a regular file opened without following a link or blocking.
std::string head(const std::string& path, size_t n) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return "";
  struct stat st{};
  std::string out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    out.resize(n);
    size_t done = 0;
    while (done < n) {
      const ssize_t got = ::read(fd, out.data() + done, n - done);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      done += static_cast<size_t>(got);
    }
    out.resize(done);
  }
  ::close(fd);
  return out;
}

std::string unique_suffix() {
  thread_local std::random_device rd;  // per thread: the ranks of --backend sim call this at once
  char buf[40];
  std::snprintf(buf, sizeof buf, "%d-%08x", static_cast<int>(::getpid()), static_cast<unsigned>(rd()));
  return buf;
}

void fsync_dir_of(const std::string& path) {
  const int dfd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

constexpr size_t kSignatureHead = size_t{1} << 20;

}  // namespace

std::string replace_problem(const std::string& path, const Replace& r) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return "";
    return std::string("cannot be looked at: ") + std::strerror(errno);
  }
  if (r.create_only) return "exists";
  if (!S_ISREG(st.st_mode)) return "is " + file_kind(st.st_mode) + " where a file is expected";
  if (st.st_size == 0 || r.force || r.signature.empty()) return "";
  if (head(path, kSignatureHead).find(r.signature) != std::string::npos) return "";
  return "exists and is not a file parity wrote (no '" + printable(r.signature) + "' in it)";
}

void check_replaceable(const std::string& option, const std::string& path, const Replace& r) {
  const std::string why = replace_problem(path, r);
  if (why.empty()) return;
  if (why.rfind("cannot", 0) == 0) throw ConfigError(option, printable(path) + ": " + why + "; name another path");
  const bool regular = why.rfind("exists", 0) == 0;
  throw ConfigError(option, printable(path) + ": " + why + "; parity never replaces what it did not create: " +
                                (regular ? "name a new file, remove it, or pass --force where the command has it"
                                         : "name a new file or remove it"));
}

AtomicFile::AtomicFile(std::string path, std::string what, std::string option)
    : path_(std::move(path)), what_(std::move(what)), option_(std::move(option)) {
  // The name's first 100 bytes: the temporary name stays within NAME_MAX whatever the target's.
  const std::string name = fs::path(path_).filename().string().substr(0, 100);
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    tmp_ = (fs::path(dir_of(path_)) / ("." + name + ".parity-tmp-" + unique_suffix())).string();
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0644);
    if (fd_ < 0 && errno != EEXIST) fail(errno, "cannot create its temporary file " + printable(tmp_));
  }
  if (fd_ < 0) fail(EEXIST, "cannot create a temporary file of a unique name beside it");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!done_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(int err, const std::string& doing) const {
  throw IoError(printable(path_) + ": cannot write " + what_ + ": " + doing + ": " + std::strerror(err));
}

void AtomicFile::write(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail(errno, "write failed");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFile::commit(const Replace& r) {
  if (::fsync(fd_) != 0) fail(errno, "fsync failed");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(errno, "close failed");
  install_file(tmp_, path_, r, option_.empty() ? what_ : option_);
  done_ = true;
}

void write_file_atomically(const std::string& path, std::string_view text, const Replace& r, std::string what,
                           std::string option) {
  AtomicFile f(path, std::move(what), std::move(option));
  f.write(text);
  f.commit(r);
}

void install_file(const std::string& from, const std::string& to, const Replace& r, const std::string& option) {
  // The rename replaces the name, never writes through it: a link or device at `to` would be
  // replaced, not followed, and is refused here all the same (it is the user's).
  check_replaceable(option, to, r);
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw IoError(printable(to) + ": cannot rename " + printable(from) + " to it: " + std::strerror(errno));
  fsync_dir_of(to);
}

// ---- the lock of an output directory ----

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_, o.fd_ = -1;
  }
  return *this;
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);
}

DirLock::DirLock(const std::string& option, const std::string& dir) {
  const std::string path = (fs::path(dir) / kLockFile).string();
  // A lock file replaced between our open and our flock (a checkpoint's commit keeps the same
  // file; a user may not) is looked at again: the lock must be on the file at the name.
  for (int attempt = 0; attempt < 10; ++attempt) {
    struct stat pre{};
    if (::lstat(path.c_str(), &pre) == 0 && !S_ISREG(pre.st_mode))  // looked at before an open: a device
      throw ConfigError(option, printable(path) + ": is " + file_kind(pre.st_mode) +
                                    " where parity keeps its lock file; remove it");
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0644);
    if (fd < 0) {
      const int e = errno;
      struct stat st{};
      if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
        throw ConfigError(option, printable(path) + ": is " + file_kind(st.st_mode) +
                                      " where parity keeps its lock file; remove it");
      throw IoError(printable(path) + ": cannot open the lock file of " + printable(dir) + ": " + std::strerror(e));
    }
    struct stat st{};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw ConfigError(option, printable(path) + ": is not a regular file where parity keeps its lock file; "
                                    "remove it");
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      ::close(fd);
      // The holder writes its pid just after its flock: a file still empty is read again for a
      // moment, so the message names the holder rather than "unknown".
      std::string pid;
      for (int look = 0; look < 40 && pid.empty(); ++look) {
        if (look > 0) ::usleep(5000);
        pid = head(path, 32);
        while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      }
      if (e == EWOULDBLOCK)
        throw ConfigError(option, printable(dir) + ": is being written by another parity (pid " +
                                      (pid.empty() ? "unknown" : printable(pid, 20)) +
                                      "); one writer per directory: wait for it to end or name another directory");
      throw IoError(printable(path) + ": cannot lock: " + std::strerror(e));
    }
    struct stat now{};
    if (::lstat(path.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev) {
      // One write over the old content, then the length: the file is never empty while held.
      std::string me = std::to_string(::getpid());
      me += std::string(me.size() < 20 ? 20 - me.size() : 0, ' ') + "\n";
      if (::pwrite(fd, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size()))
        (void)!::ftruncate(fd, static_cast<off_t>(me.size()));
      fd_ = fd;
      return;
    }
    ::close(fd);
  }
  throw IoError(printable(path) + ": the lock file keeps changing under parity; is another program replacing it?");
}

}  // namespace parity
