// Regular files only, never a blocking open (core/files.h), and outputs that are parity's own.
#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <limits>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/output.h"
#include "core/text.h"

namespace parity {

namespace {

namespace fs = std::filesystem;


// The problem with a file whose status is `st` ("" for a regular file within max_bytes).
std::string status_problem(const struct stat& st, int64_t max_bytes) {
  if (!S_ISREG(st.st_mode)) return "is " + file_kind(st.st_mode) + ", not a regular file";
  if (static_cast<int64_t>(st.st_size) > max_bytes)
    return "larger than " + std::to_string(max_bytes) + " bytes, the limit (" + std::to_string(st.st_size) + " bytes)";
  return "";
}

[[noreturn]] void refuse(const std::string& path, const std::string& why, Blame blame, std::string_view what) {
  // The path as given: a reader that quotes it (load_scenario) escapes it, and so does the
  // last line of defence (run_cli prints every message through printable_lines).
  const std::string rule = std::string(what) + " " + why;
  if (blame == Blame::user_input) throw ConfigError(path, rule);
  throw IoError(path + ": " + rule);
}

// The first `n` bytes of a regular file (through open_regular: never blocks), or "".
std::string head_of(const std::string& path, int64_t n) {
  try {
    RegularFile f = open_regular(path, std::numeric_limits<int64_t>::max(), Blame::user_input, "file");
    std::string out(static_cast<size_t>(std::min(n, f.size())), '\0');
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t got = ::read(f.fd(), out.data() + done, out.size() - done);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      done += static_cast<size_t>(got);
    }
    out.resize(done);
    return out;
  } catch (const Error&) {
    return "";
  }
}

std::string parent_of(const std::string& path) {
  const fs::path p = fs::path(path).lexically_normal();
  const fs::path parent = p.has_relative_path() && p.relative_path().has_parent_path() ? p.parent_path() : fs::path();
  if (!parent.empty()) return parent.string();
  return p.is_absolute() ? "/" : ".";
}

void require_parent(const std::string& option, const std::string& path) {
  const std::string parent = parent_of(path);
  std::error_code ec;
  if (!fs::is_directory(parent, ec))
    throw ConfigError(option, printable(path) + ": its directory " + printable(parent) +
                                  " does not exist (parity creates no directory above its output)");
}


}  // namespace

std::string file_kind(mode_t m) {
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

std::string regular_file_problem(const std::string& path, int64_t max_bytes) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return "is missing";
    return std::string("cannot be read: ") + std::strerror(errno);
  }
  return status_problem(st, max_bytes);
}

RegularFile& RegularFile::operator=(RegularFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_, size_ = o.size_, o.fd_ = -1;
  }
  return *this;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

int RegularFile::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

RegularFile open_regular(const std::string& path, int64_t max_bytes, Blame blame, std::string_view what) {
  // Looked at before the open: opening a FIFO or a tape device is itself an action.
  if (const std::string why = regular_file_problem(path, max_bytes); !why.empty()) refuse(path, why, blame, what);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) refuse(path, std::string("cannot be opened: ") + std::strerror(errno), blame, what);
  RegularFile f(fd, 0);
  struct stat st{};
  if (::fstat(fd, &st) != 0) refuse(path, std::string("cannot be read: ") + std::strerror(errno), blame, what);
  if (const std::string why = status_problem(st, max_bytes); !why.empty()) refuse(path, why, blame, what);
  // A regular file: reads never block, the flag only mattered for the open.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return RegularFile(f.release(), static_cast<int64_t>(st.st_size));
}

std::optional<RegularFile> open_regular_if_exists(const std::string& path, int64_t max_bytes, Blame blame,
                                                  std::string_view what) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return std::nullopt;
  return open_regular(path, max_bytes, blame, what);
}

std::optional<std::string> read_regular_if_exists(const std::string& path, int64_t max_bytes, Blame blame,
                                                  std::string_view what) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return std::nullopt;
  return read_regular(path, max_bytes, blame, what);
}

namespace {

std::string read_all(RegularFile f, int64_t max_bytes, const std::string& path, Blame blame, std::string_view what) {
  // One byte more than stat said: a file that grew since is cut there and refused.
  std::string out(static_cast<size_t>(f.size()) + 1, '\0');
  size_t done = 0;
  for (;;) {
    const ssize_t got = ::read(f.fd(), out.data() + done, out.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) refuse(path, std::string("cannot be read: ") + std::strerror(errno), blame, what);
    if (got == 0) break;
    done += static_cast<size_t>(got);
    if (done == out.size()) break;
  }
  if (static_cast<int64_t>(done) > max_bytes)
    refuse(path, "grew past the " + std::to_string(max_bytes) + " bytes such a file can be while it was read", blame,
           what);
  out.resize(done);
  return out;
}

}  // namespace

std::string read_regular(const std::string& path, int64_t max_bytes, Blame blame, std::string_view what) {
  return read_all(open_regular(path, max_bytes, blame, what), max_bytes, path, blame, what);
}

// ---- outputs ----

bool is_checkpoint_dir(const std::string& dir) {
  return head_of(dir + "/metadata.json", 4096).find("\"format\": \"parity-checkpoint\"") != std::string::npos;
}

void check_output_dir(const std::string& option, const std::string& dir, DirKind kind) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) throw ConfigError(option, printable(dir) + ": cannot be looked at: " + std::strerror(errno));
    require_parent(option, dir);
    return;
  }
  if (!S_ISDIR(st.st_mode))
    throw ConfigError(option, printable(dir) + ": is " +
                                  (S_ISREG(st.st_mode) ? "a regular file" : file_kind(st.st_mode)) +
                                  " where a directory is expected; parity never replaces what it did not create");
  std::error_code ec;
  bool empty = true;  // nothing in it but the lock file of a writer (core/output.h)
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end && empty; it.increment(ec))
    empty = it->path().filename() == kLockFile;
  if (empty && !ec) return;
  if (kind == DirKind::checkpoint ? is_checkpoint_dir(dir)
                                   : head_of(dir + "/" + kOutputMarker, 4096).rfind("parity", 0) == 0)
    return;
  const std::string mark = kind == DirKind::checkpoint ? "not a parity checkpoint (no metadata.json of the format "
                                                         "parity-checkpoint)"
                                                       : std::string("a non-empty directory that parity did not "
                                                                     "write (no ") +
                                                             kOutputMarker + " marker in it)";
  throw ConfigError(option, printable(dir) + ": is " + mark +
                                "; parity never overwrites what it did not create: name a new or empty directory");
}

const std::string& prepare_output_dir(const std::string& option, const std::string& dir) {
  check_output_dir(option, dir);
  std::error_code ec;
  fs::create_directory(dir, ec);
  if (ec) throw IoError(printable(dir) + ": cannot create: " + ec.message());
  const std::string marker = dir + "/" + kOutputMarker;
  if (!fs::exists(marker, ec)) {
    const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) throw IoError(printable(marker) + ": cannot create: " + std::strerror(errno));
    const char text[] = "parity output directory: parity may overwrite what it wrote here (docs/faults.md)\n";
    const bool ok = ::write(fd, text, sizeof text - 1) == static_cast<ssize_t>(sizeof text - 1);
    ::close(fd);
    if (!ok) throw IoError(printable(marker) + ": cannot write");
  }
  return dir;
}

void check_output_file(const std::string& option, const std::string& path, std::string_view signature, bool force) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) return require_parent(option, path);
  check_replaceable(option, path, Replace{signature, force});  // a link, FIFO or device never
}

void write_json_file(const std::string& path, const nlohmann::json& j, int indent, std::string_view what,
                     const Replace& r) {
  write_file_atomically(path, j.dump(indent) + "\n", r, std::string(what));
}

}  // namespace parity
