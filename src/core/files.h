// Files that may be anything (issue 26). Every file parity reads goes through open_regular or
// read_regular: a path may name a FIFO (an open for reading waits for a writer for ever), a
// directory, a socket, a device (a symlink to /dev/zero never ends), or a file far larger
// than the reader could want. Each is refused, with what it is, before a byte is read, and
// no open or read can block: the path is looked at (stat) before the open, opened with
// O_NONBLOCK, and looked at again through the descriptor (a FIFO swapped in between).
//
// Outputs (docs/faults.md "Nothing lost"): parity never deletes or overwrites what it did not
// create. A file output (--report, --junit, --summary, a golden file) may be missing (its
// directory must exist: nothing is created at the root for a typo), or a regular file that
// carries the signature of what parity writes there; an output directory (--out, --plots,
// dump's DIR, cover --write) may be missing, empty, or hold parity's marker file
// (kOutputMarker), which parity writes into every output directory it uses.
#pragma once
#include <sys/types.h>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/output.h"

namespace parity {

// Who is to blame when a file is refused: a path the user gave (a scenario, a golden, an
// option: ConfigError, exit 2) or a component of stored data (a checkpoint's metadata.json or
// rank file: IoError, exit 3, as every other damaged checkpoint).
enum class Blame { user_input, damaged_data };

// What a file that is not regular is, as a phrase ("a FIFO (named pipe)", "a symbolic link":
// the mode of an lstat), for messages.
std::string file_kind(mode_t m);

// Why `path` cannot be read as a regular file of at most max_bytes bytes, as a phrase ("is a
// FIFO (named pipe), not a regular file", "is missing"), or "" when it can. Follows symlinks:
// a link to /dev/zero is a character device.
std::string regular_file_problem(const std::string& path, int64_t max_bytes);

// An open descriptor of a regular file, closed on destruction.
class RegularFile {
 public:
  RegularFile() = default;
  RegularFile(int fd, int64_t size) : fd_(fd), size_(size) {}
  RegularFile(RegularFile&& o) noexcept : fd_(o.fd_), size_(o.size_) { o.fd_ = -1; }
  RegularFile& operator=(RegularFile&& o) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile();
  int fd() const { return fd_; }
  int64_t size() const { return size_; }
  int release();  // the descriptor, now the caller's to close

 private:
  int fd_ = -1;
  int64_t size_ = 0;
};

// Opens `path` for reading; refuses (ConfigError(path, why) or IoError("path: why"), by
// `blame`) anything but a regular file of at most max_bytes bytes. `what` names the file
// in the message ("scenario file", "checkpoint rank file").
RegularFile open_regular(const std::string& path, int64_t max_bytes, Blame blame, std::string_view what);

// As open_regular, but a missing file (ENOENT) is no error: nullopt, for the caller's own
// message ("DIR/metadata.json: missing: DIR holds no checkpoint").
std::optional<RegularFile> open_regular_if_exists(const std::string& path, int64_t max_bytes, Blame blame,
                                                  std::string_view what);

// The whole file, through open_regular (the _if_exists form: nullopt when missing).
std::string read_regular(const std::string& path, int64_t max_bytes, Blame blame, std::string_view what);
std::optional<std::string> read_regular_if_exists(const std::string& path, int64_t max_bytes, Blame blame,
                                                  std::string_view what);

// ---- outputs ----
// The marker parity writes into each output directory it uses; a non-empty directory
// without it is not parity's and is refused.
inline constexpr const char* kOutputMarker = ".parity-output";

// What marks a directory as parity's: the marker file (an output directory), or a
// metadata.json of the parity-checkpoint format (a checkpoint: is_checkpoint_dir).
enum class DirKind { output, checkpoint };

// Refuses (ConfigError(option, ...), exit 2) an output directory that exists and is not
// parity's: a file where a directory is expected, a non-empty directory without its mark
// (DirKind). A missing directory needs an existing parent. Nothing is created.
void check_output_dir(const std::string& option, const std::string& dir, DirKind kind = DirKind::output);
// Creates the directory if missing (its parent must exist) after check_output_dir, and
// writes the marker. Returns dir.
const std::string& prepare_output_dir(const std::string& option, const std::string& dir);

// Refuses (ConfigError(option, ...), exit 2) a file output that exists and is not parity's:
// anything but a regular file (a symbolic link included: parity never writes through one), or
// a non-empty regular file whose first MiB does not hold `signature` (what parity writes in
// this kind of file), unless `force` (core/output.h check_replaceable). A missing file needs
// an existing parent directory.
void check_output_file(const std::string& option, const std::string& path, std::string_view signature,
                       bool force = false);

// Whether `dir` is a parity checkpoint: a directory whose metadata.json is a regular file
// naming the format "parity-checkpoint" in its first bytes.
bool is_checkpoint_dir(const std::string& dir);

// Writes j (indent < 0: one line) and a newline to path through an AtomicFile (core/output.h:
// `r` says what may stand there); IoError naming `what` and the path when it cannot. The JSON
// reports and curves parity writes.
void write_json_file(const std::string& path, const nlohmann::json& j, int indent, std::string_view what,
                     const Replace& r = {});

}  // namespace parity
