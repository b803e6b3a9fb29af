// keep_freed_memory (core/resources.h): a freed block stays in the process for the next allocation.
#include <malloc.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "core/resources.h"

namespace parity {
namespace {

// In a child (the test process's allocator is left as it is): glibc's small default
// thresholds first (a fresh process's), then keep_freed_memory, then three 16 MiB blocks
// allocated, touched and freed (48 MiB: more than keep_freed_memory's 32 MiB top pad, which glibc
// keeps whatever the trim threshold). Exit 0 when the blocks came from the heap (not their own
// mappings) and the heap holds them still after the frees (mallinfo2: not trimmed below what it
// was while they were held), 1 otherwise.
int freed_block_stays_in_the_heap(bool keep) {
  const pid_t pid = fork();
  if (pid == 0) {
    mallopt(M_MMAP_THRESHOLD, 128 << 10);
    mallopt(M_TRIM_THRESHOLD, 128 << 10);
    if (keep && !keep_freed_memory()) _exit(2);
    constexpr size_t kBytes = 16 << 20;
    const struct mallinfo2 start = mallinfo2();
    char* volatile blocks[3];  // volatile: the pairs are not elided
    for (auto& b : blocks) b = static_cast<char*>(std::malloc(kBytes)), std::memset(b, 1, kBytes);
    const struct mallinfo2 held = mallinfo2();
    const bool own_mapping = held.hblkhd >= start.hblkhd + kBytes;
    for (auto& b : blocks) std::free(b);
    const struct mallinfo2 after = mallinfo2();
    const bool kept = after.arena >= held.arena && after.fordblks >= 3 * kBytes;
    _exit(!own_mapping && kept ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(Resources, KeepFreedMemoryKeepsAFreedBlockInTheHeap) {
  EXPECT_EQ(freed_block_stays_in_the_heap(true), 0);
}

// The control: without the call the block is its own mapping, unmapped when freed, so the test
// above measures what keep_freed_memory does and not the allocator's mood.
TEST(Resources, WithoutKeepFreedMemoryAFreedBlockReturnsToTheKernel) {
  EXPECT_EQ(freed_block_stays_in_the_heap(false), 1);
}

// keep_freed_memory grows the heap at once and advises that growth onto huge pages, before anything is written
// into it: a fork-started rank inherits an advised heap (the twenty-fifth round found the growth elided by the
// compiler, so no heap was advised until a rank's first large tensor). In a child: the heap's VMAs from
// /proc/self/smaps; exit 0 when one of 16 MiB or more is THP-eligible, 1 otherwise.
int heap_advised_after_keep() {
  const pid_t pid = fork();
  if (pid == 0) {
    if (!keep_freed_memory()) _exit(2);
    std::FILE* f = std::fopen("/proc/self/smaps", "re");
    if (f == nullptr) _exit(3);
    char line[512];
    unsigned long lo = 0, hi = 0;
    bool heap = false, found = false;
    while (std::fgets(line, sizeof line, f) != nullptr) {
      unsigned long a = 0, b = 0;
      if (std::sscanf(line, "%lx-%lx ", &a, &b) == 2)  // a mapping's first line; its fields follow
        heap = std::strstr(line, "[heap]") != nullptr, lo = a, hi = b;
      else if (heap && std::strncmp(line, "THPeligible:", 12) == 0 && std::atoi(line + 12) == 1 &&
               hi - lo >= (16ul << 20))
        found = true;
    }
    std::fclose(f);
    _exit(found ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(Resources, KeepFreedMemoryAdvisesTheHeapOntoHugePages) {
  std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
  char mode[128] = {0};
  if (f != nullptr) (void)!std::fgets(mode, sizeof mode, f), std::fclose(f);
  if (f == nullptr || std::strstr(mode, "[never]") != nullptr) GTEST_SKIP() << "no transparent huge pages here";
  if (const char* v = std::getenv("PARITY_HUGE_PAGES"); v != nullptr && std::string(v) == "0")
    GTEST_SKIP() << "PARITY_HUGE_PAGES=0";
  EXPECT_EQ(heap_advised_after_keep(), 0);
}

// fresh_heap_top_after_fork: a block the parent touched and freed (now the heap's free top) is resident in a
// child forked after it (copy-on-write, shared with the parent) until the child calls it. In a child P:
// keep_freed_memory, 8 MiB allocated, touched, freed; then a grandchild Q, forked, with or without the call,
// counts the resident pages of the block's middle 4 MiB (mincore). Returns Q's count, -1 on error.
int resident_pages_of_freed_top(bool fresh) {
  const pid_t p = fork();
  if (p == 0) {
    if (!keep_freed_memory()) _exit(255);
    constexpr size_t kBytes = 8 << 20;
    char* volatile a = static_cast<char*>(std::malloc(kBytes));
    std::memset(a, 1, kBytes);
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t mid = (reinterpret_cast<uintptr_t>(a) + (2u << 20)) & ~(page - 1);
    std::free(a);
    const pid_t q = fork();
    if (q == 0) {
      if (fresh) fresh_heap_top_after_fork();
      unsigned char vec[1024] = {0};
      const size_t n = (4u << 20) / page;
      if (n > sizeof vec || mincore(reinterpret_cast<void*>(mid), 4u << 20, vec) != 0) _exit(255);
      int resident = 0;
      for (size_t i = 0; i < n; ++i) resident += vec[i] & 1;
      _exit(std::min(resident, 254));
    }
    int status = 0;
    waitpid(q, &status, 0);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 255);
  }
  int status = 0;
  waitpid(p, &status, 0);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 255;
  return rc == 255 ? -1 : rc;
}

TEST(Resources, AForkedChildDropsTheParentsFreedHeapTop) {
  if (const char* v = std::getenv("PARITY_HUGE_PAGES"); v != nullptr && std::string(v) == "0")
    GTEST_SKIP() << "PARITY_HUGE_PAGES=0";
  EXPECT_GT(resident_pages_of_freed_top(false), 200);  // the control: the parent's pages, shared
  EXPECT_EQ(resident_pages_of_freed_top(true), 0);
}

}  // namespace
}  // namespace parity
