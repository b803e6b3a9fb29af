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

// " (out of memory; the address-space limit, ulimit -v, is N bytes)", or " (out of memory)"
// when there is no such limit.
std::string memory_hint();

// Makes a failed `new` (std::bad_alloc, exit 3) say what ran out: its what() becomes "out of
// memory: an allocation failed (the address-space limit, ulimit -v, is N bytes)" instead of
// "std::bad_alloc" (std::set_new_handler; the message built without allocating). Called
// once by main; fork-started ranks inherit it.
void name_out_of_memory();

// The kernel's count of processes its OOM killer has killed (/proc/vmstat oom_kill, every
// cgroup's included); -1 when unknown. A rank killed by SIGKILL while it rose was most likely
// one of them (proc/launch.cpp says so).
int64_t oom_kill_count();

// Keeps freed memory in the process for the next allocation (mallopt): blocks up to 32 MiB
// come from the heap, and the heap's top is never handed back to the kernel. A step frees
// and allocates the same tensors again (the baseline, its twin's micro-batches, every
// rank); with glibc's defaults each of them came back as fresh pages, zeroed by the kernel
// and faulted in one by one: half the CPU of a dim 64 run at world 1 (docs/bench.md). The
// resident size stays at its peak instead of falling between steps. Called once by main;
// fork-started ranks inherit it. False when glibc refused a setting.
// It also puts the heap on transparent huge pages where the kernel allows them (THP "madvise" or
// "always"; PARITY_HUGE_PAGES=0 leaves it as glibc has it): the heap grows 32 MiB at a time and
// every growth is advised MADV_HUGEPAGE (advise_heap_huge_pages). On the 2-core VM this project is
// built on a fresh 4 KiB page costs about 15 us and a 2 MiB one about 0.13 ms (docs/bench.md):
// the W = 8 dim64 run's page faults 49K -> 19-22K, its time to verdict -14%. No value computed
// changes. Read before the command line is (no error can be reported yet): any value but 0 is on.
bool keep_freed_memory();

// Advises the heap's growth since the last call onto huge pages (after keep_freed_memory; the CPU
// allocator, core/buffer.cpp, calls it after each large block). Cheap: glibc's cached break.
void advise_heap_huge_pages();

// In a process just forked (a fork-started rank, before it allocates): the heap's free top, which the
// parent may have touched, dropped from this process (MADV_DONTNEED), so the child's first tensors land
// on fresh huge pages instead of copying the parent's 2 MiB page 4 KiB at a time (a copy-on-write fault
// per page; W = 8 dim64: page faults 12.9K -> 6.7K, CPU -4%). The parent keeps its own pages; nothing allocated moves.
// Not with PARITY_HUGE_PAGES=0.
void fresh_heap_top_after_fork();

// One malloc arena for every thread of this process (mallopt M_ARENA_MAX), so a launcher's
// baseline and twin threads allocate from the heap that is on huge pages, not from arenas of
// their own (unless PARITY_HUGE_PAGES=0). Before the threads start; not for a simulated world,
// whose W rank threads would share one arena's lock.
void share_one_heap();

// "; the kernel's OOM killer killed N process(es) during the run (out of memory: /proc/vmstat
// oom_kill went from A to B)" when the count rose since `before`; "" otherwise.
std::string oom_killer_note(int64_t before);

// Reserves `bytes` of `fd` (a file in TMPDIR, a /dev/shm segment) with posix_fallocate, so a
// full filesystem is an error here and not a SIGBUS at the first store through a mapping.
// Returns 0 or the error number (posix_fallocate's; EOPNOTSUPP-like results fall back to
// ftruncate, which reserves nothing but sizes the file).
int reserve_file(int fd, int64_t bytes);

}  // namespace parity
