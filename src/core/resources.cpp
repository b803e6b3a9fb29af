#include "core/resources.h"

#include "core/knobs.h"

#include <fcntl.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>

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
    case EAGAIN: {
      const std::string as = limit_str(RLIMIT_AS);
      return " (the process limit, ulimit -u, is " + limit_str(RLIMIT_NPROC) + "; or memory" +
             (as == "unlimited" ? "" : ": the address-space limit, ulimit -v, is " + as + " bytes") + ")";
    }
    case EFBIG: return " (the file-size limit, ulimit -f, is " + limit_str(RLIMIT_FSIZE) + " bytes)";
    case ENOMEM: return memory_hint();
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

std::string memory_hint() {
  const std::string as = limit_str(RLIMIT_AS);
  return as == "unlimited" ? " (out of memory)"
                           : " (out of memory; the address-space limit, ulimit -v, is " + as + " bytes)";
}

namespace {

// What a failed `new` throws instead of a bare std::bad_alloc: the same type to every catch
// (exit_code::of: infrastructure), a message that names memory. Built in a static buffer:
// nothing may be allocated when the allocator has just failed.
char g_oom_message[200];

class OutOfMemory : public std::bad_alloc {
 public:
  const char* what() const noexcept override { return g_oom_message; }
};

void on_failed_new() {
  struct rlimit r {};
  if (getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
    std::snprintf(g_oom_message, sizeof g_oom_message,
                  "out of memory: an allocation failed (the address-space limit, ulimit -v, is %llu bytes)",
                  static_cast<unsigned long long>(r.rlim_cur));
  else
    std::snprintf(g_oom_message, sizeof g_oom_message, "out of memory: an allocation failed (std::bad_alloc)");
  throw OutOfMemory();
}

}  // namespace

void name_out_of_memory() { std::set_new_handler(on_failed_new); }

namespace {
constexpr std::uintptr_t kHugePage = std::uintptr_t{2} << 20;
constexpr int kTopPad = 32 << 20;
std::atomic<std::uintptr_t> heap_advised{0};  // the heap's end advised onto huge pages so far; 0: not advised

// not knob_on: main calls keep_freed_memory before any error can be reported, so a value other
// than 0 or 1 is read as on rather than ending the process (core/resources.h)
bool huge_pages_on() {
  const char* v = knob("PARITY_HUGE_PAGES");
  return v == nullptr || std::string_view(v) != "0";
}
}  // namespace

void advise_heap_huge_pages() {
  std::uintptr_t from = heap_advised.load(std::memory_order_relaxed);
  if (from == 0) return;
  const auto top = reinterpret_cast<std::uintptr_t>(sbrk(0));  // glibc's cached break: no system call
  if (top <= from || !heap_advised.compare_exchange_strong(from, top, std::memory_order_relaxed)) return;
  const std::uintptr_t at = (from + kHugePage - 1) & ~(kHugePage - 1);
  if (top > at) (void)madvise(reinterpret_cast<void*>(at), top - at, MADV_HUGEPAGE);  // where THP is "never": no-op
}

bool keep_freed_memory() {
  // 32 MiB is the largest mmap threshold glibc takes (HEAP_MAX_SIZE / 2 on 64-bit); setting it
  // also stops glibc's dynamic threshold, which let the trim threshold fall back to 256 KiB.
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  if (!huge_pages_on()) return mmap_ok && trim_ok;
  // The heap grows 32 MiB at a time (address space: a page is resident once touched), its first growth now,
  // advised onto huge pages before the tensors are written into it; later growths by advise_heap_huge_pages.
  const bool pad_ok = mallopt(M_TOP_PAD, kTopPad) == 1;
  heap_advised.store(reinterpret_cast<std::uintptr_t>(sbrk(0)), std::memory_order_relaxed);
  // through a volatile pointer: the compiler drops a free(malloc(n)) pair, and then the heap did not grow here:
  // its first 32 MiB were advised only at a forked rank's first large tensor, after the small allocations before
  // it had put 4 KiB pages into them (~2200 page faults of 4 KiB per rank at W = 8 dim64, issue 43)
  void* volatile first = std::malloc(kHugePage);
  std::free(first);
  advise_heap_huge_pages();
  return mmap_ok && trim_ok && pad_ok;
}

void fresh_heap_top_after_fork() {
  if (!huge_pages_on() || heap_advised.load(std::memory_order_relaxed) == 0) return;
  // glibc: the main arena's top chunk is the heap's free end, its size mallinfo2's keepcost, and only its
  // header (two words: the size in the second) means anything. Checked before anything is dropped: the
  // chunk's header is mapped (mincore) and holds that size; where glibc's heap is not one contiguous break
  // (the break could not grow and the top went to a mapping) it does not, and nothing is done.
  const auto top = reinterpret_cast<std::uintptr_t>(sbrk(0));
  const std::size_t keep = mallinfo2().keepcost;
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  if (keep < 4 * page || keep > top) return;
  const std::uintptr_t chunk = top - keep, size_at = chunk + sizeof(std::size_t);
  unsigned char resident = 0;
  if (chunk % (2 * sizeof(std::size_t)) != 0 ||
      mincore(reinterpret_cast<void*>(size_at & ~(page - 1)), page, &resident) != 0)
    return;
  if ((*reinterpret_cast<const std::size_t*>(size_at) & ~std::size_t{7}) != keep) return;
  const std::uintptr_t at = (chunk + 2 * sizeof(std::size_t) + page - 1) & ~(page - 1);
  if (top > at) (void)madvise(reinterpret_cast<void*>(at), top - at, MADV_DONTNEED);
}

void share_one_heap() {
  if (huge_pages_on()) (void)mallopt(M_ARENA_MAX, 1);
}

int64_t oom_kill_count() {
  std::FILE* f = std::fopen("/proc/vmstat", "re");
  if (f == nullptr) return -1;
  char name[64];
  long long v = 0;
  int64_t out = -1;
  while (std::fscanf(f, "%63s %lld", name, &v) == 2)
    if (std::strcmp(name, "oom_kill") == 0) out = v;
  std::fclose(f);
  return out;
}

std::string oom_killer_note(int64_t before) {
  const int64_t now = oom_kill_count();
  if (before < 0 || now <= before) return "";
  return "; the kernel's OOM killer killed " + std::to_string(now - before) +
         " process(es) during the run: out of memory (/proc/vmstat oom_kill went from " + std::to_string(before) +
         " to " + std::to_string(now) + ")";
}

int reserve_file(int fd, int64_t bytes) {
  const int e = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (e == 0) return 0;
  if (e != EOPNOTSUPP && e != EINVAL) return e;
  return ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
}

}  // namespace parity
