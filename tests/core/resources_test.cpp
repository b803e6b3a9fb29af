// keep_freed_memory (core/resources.h): a freed block stays in the process for the next allocation.
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#include "core/resources.h"

namespace parity {
namespace {

// In a child (the test process's allocator is left as it is): glibc's small default
// thresholds first (a fresh process's), then keep_freed_memory, then an 8 MiB block
// allocated, touched and freed. Exit 0 when the block came from the heap (not its own
// mapping) and the heap has grown by it after the free (mallinfo2, against the start), 1 otherwise.
int freed_block_stays_in_the_heap(bool keep) {
  const pid_t pid = fork();
  if (pid == 0) {
    mallopt(M_MMAP_THRESHOLD, 128 << 10);
    mallopt(M_TRIM_THRESHOLD, 128 << 10);
    if (keep && !keep_freed_memory()) _exit(2);
    constexpr size_t kBytes = 8 << 20;
    const struct mallinfo2 start = mallinfo2();
    char* volatile a = static_cast<char*>(std::malloc(kBytes));  // volatile: the pair is not elided
    std::memset(a, 1, kBytes);
    const bool own_mapping = mallinfo2().hblkhd >= start.hblkhd + kBytes;
    std::free(a);
    const bool kept = mallinfo2().arena >= start.arena + kBytes;
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

}  // namespace
}  // namespace parity
