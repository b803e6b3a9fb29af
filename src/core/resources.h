// Exhausted resources named (docs/faults.md "Exhausted resources"): a system call that failed
// for want of a resource says which one and its limit, so the error (an IoError, exit 3)
// tells the user what to raise: the open-file limit, the process limit, the file-size limit,
// space on the filesystem of a path (TMPDIR, /dev/shm), memory.
#pragma once
#include <cstdint>
#include <string>

namespace parity {

// " (the open-file limit, ulimit -n, is 64)" for EMFILE, " (the process limit, ulimit -u, is
// 100, or memory)" for EAGAIN after fork, " (the file-size limit, ulimit -f, is 4096 bytes)"
// for EFBIG, " (DIR's filesystem is full: N bytes free)" for ENOSPC when `where` names a path
// on it, " (out of memory)" for ENOMEM; "" for any other error.
std::string resource_hint(int err, const std::string& where = "");

// strerror(err) followed by resource_hint(err, where).
std::string describe_errno(int err, const std::string& where = "");

// Reserves `bytes` of `fd` (a file in TMPDIR, a /dev/shm segment) with posix_fallocate, so a
// full filesystem is an error here and not a SIGBUS at the first store through a mapping.
// Returns 0 or the error number (posix_fallocate's; EOPNOTSUPP-like results fall back to
// ftruncate, which reserves nothing but sizes the file).
int reserve_file(int fd, int64_t bytes);

}  // namespace parity
