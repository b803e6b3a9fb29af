// Writing outputs safely (issue 42; docs/faults.md "Nothing lost"). Every file parity writes
// (checkpoint files, `ckpt export`, dumps, goldens, plots, reports, JUnit, summaries, curves)
// goes through AtomicFile: the bytes go to a temporary file of a unique name in the target's
// directory, created with O_CREAT | O_EXCL | O_NOFOLLOW (a link planted there is never
// followed, a user's file of that name never consumed), fsynced, then renamed over the target.
// Before the rename the target is looked at: only a missing file, an empty regular file, a
// regular file that carries the signature of what parity writes there, or (with --force) any
// regular file is replaced; a symbolic link, a FIFO, a device, a socket or a directory never
// is (ConfigError naming the option and the path, exit 2).
//
// Output directories parity writes many files into (checkpoints, dumps, matrix and zoo
// outputs) are held by one writer at a time: DirLock, an flock on the file kLockFile inside
// the directory; a second writer is refused (exit 2) naming the holder's pid.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace parity {

// What may stand at a target before parity replaces it.
struct Replace {
  // A regular file that holds this string in its first MiB is parity's output of this kind.
  // Empty: any regular file (a file of parity's own output directory, by its fixed name).
  std::string_view signature;
  bool force = false;  // the user asked to replace whatever regular file is there (--force)
  bool create_only = false;  // nothing may stand there (cover --write never replaces a scenario)
};

// Why `path` may not be replaced under `r`, as a phrase ("is a FIFO (named pipe)", "exists and
// is not a file parity wrote (no ... in it)"), or "" when it may (missing included).
std::string replace_problem(const std::string& path, const Replace& r);

// Throws ConfigError(option, "PATH: PROBLEM; what to do") when replace_problem is not "".
void check_replaceable(const std::string& option, const std::string& path, const Replace& r);

// A file being written: a unique temporary name beside `path` until commit() renames it there.
class AtomicFile {
 public:
  // `what` names the file in messages ("report file"), `option` the option it came from ("" :
  // `what` is used).
  AtomicFile(std::string path, std::string what, std::string option = "");
  ~AtomicFile();  // removes the temporary file unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // fsync, close, check the target under `r`, rename, fsync the directory.
  void commit(const Replace& r);
  const std::string& temp_path() const { return tmp_; }

 private:
  [[noreturn]] void fail(int err, const std::string& doing) const;
  std::string path_, what_, option_, tmp_;
  int fd_ = -1;
  bool done_ = false;
};

// The whole text through an AtomicFile.
void write_file_atomically(const std::string& path, std::string_view text, const Replace& r, std::string what,
                           std::string option = "");

// Renames `from` (a file parity made in the target's directory, e.g. gnuplot's output in a
// private directory beside it) over `to` after the same check as commit().
void install_file(const std::string& from, const std::string& to, const Replace& r, const std::string& option);

// The lock file of an output directory. It is parity's: kept when a checkpoint is saved over.
inline constexpr const char* kLockFile = ".parity-lock";

// One writer per output directory: an exclusive flock on DIR/kLockFile (created when missing,
// never through a link), held until destruction. A directory held by another process is
// refused at once: ConfigError(option, "DIR: is being written by another parity (pid N) ...").
// The directory must exist.
class DirLock {
 public:
  DirLock() = default;
  DirLock(const std::string& option, const std::string& dir);
  DirLock(DirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  DirLock& operator=(DirLock&& o) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace parity
