#include "comm/gloo/shm_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/knobs.h"
#include "core/resources.h"

namespace parity::comm::shm {

namespace {

constexpr uint64_t kMagic = 0x7061726974797368ULL;  // "parityshm"-ish
// 128 KiB: a large message moves in steps whose W slots stay in the caches between the copy
// in and the reduction (4 MiB slots: 62-73% of the host's allreduce ceiling at 64 MiB, 128
// KiB: 77-94%, at W = 2, 4 and 8; docs/comm.md), and each group's segment is 32x smaller.
constexpr int64_t kDefaultSlot = int64_t{128} << 10;
constexpr auto kSlice = std::chrono::milliseconds(50);  // futex sleep between liveness checks

struct Header {
  uint64_t magic;
  uint64_t nonce;
  int64_t members;
  int64_t slot_bytes;
};

size_t round64(size_t n) { return (n + 63) / 64 * 64; }
size_t ctl_stride(int members) { return 64 + round64(2 * static_cast<size_t>(members) * sizeof(int64_t)); }
size_t segment_bytes(int members, int64_t slot) {
  return 64 + ctl_stride(members) * static_cast<size_t>(members) +
         static_cast<size_t>(slot) * 2 * static_cast<size_t>(members);
}

bool reached(uint32_t have, uint32_t want) { return static_cast<int32_t>(have - want) >= 0; }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

const char* env_value(const char* name) {  // a setting of core/knobs.h's table, "" as unset
  const char* v = knob(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// Spin iterations before yielding: PARITY_SHM_SPIN, else about 20 us when every rank on the
// host can have a core of its own and none when they share cores (a spinning rank would take
// the core the member it waits for needs). The host's ranks, not the group's members: a TP
// pair of an 8-rank run on 2 cores spun, and fsdp2_cp2_tp2_ep2's 400 collectives took 0.09 s
// instead of 0.055 s.
int spin_setting(int host_ranks) {
  if (const char* v = env_value("PARITY_SHM_SPIN")) return std::max(0, std::atoi(v));
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return host_ranks <= cpus ? 4000 : 0;
}

// sched_yield calls before sleeping: PARITY_SHM_YIELDS, default 10 (on 2 cores with 8 ranks a
// yield lets the member waited for run without the futex round trip of a sleep).
int yield_setting() {
  const char* v = env_value("PARITY_SHM_YIELDS");
  return v ? std::max(0, std::atoi(v)) : 10;
}

void* map_fd(int fd, size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED)
    throw CommError("shared memory " + name + ": mmap of " + std::to_string(bytes) +
                    " bytes failed: " + std::strerror(errno));
  return p;
}

}  // namespace

int64_t slot_bytes_setting() {
  const char* v = env_value("PARITY_SHM_SLOT_BYTES");
  int64_t b = v ? std::strtoll(v, nullptr, 10) : kDefaultSlot;
  if (b < 4096) throw ConfigError("PARITY_SHM_SLOT_BYTES", "must be at least 4096, got " + std::string(v ? v : ""));
  return b / 64 * 64;
}

std::unique_ptr<Segment> Segment::create(const std::string& name, int members, int64_t slot, uint64_t nonce,
                                         int host_ranks) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0)
    throw IoError("shared memory /dev/shm" + name + ": shm_open failed: " + describe_errno(errno, "/dev/shm/x"));
  const size_t bytes = segment_bytes(members, slot);
  // Reserved up front: a full /dev/shm is this error (exit 3), never a SIGBUS at the first
  // store through the mapping.
  if (const int e = reserve_file(fd, static_cast<int64_t>(bytes)); e != 0) {
    close(fd);
    shm_unlink(name.c_str());
    throw IoError("shared memory /dev/shm" + name + ": cannot reserve " + std::to_string(bytes) + " bytes: " +
                  describe_errno(e, "/dev/shm/x"));
  }
  void* p = nullptr;
  try {
    p = map_fd(fd, bytes, name);
  } catch (...) {
    shm_unlink(name.c_str());
    throw;
  }
  auto* h = static_cast<Header*>(p);
  h->nonce = nonce;
  h->members = members;
  h->slot_bytes = slot;
  std::atomic_ref<uint64_t>(h->magic).store(kMagic, std::memory_order_release);
  return std::unique_ptr<Segment>(new Segment(name, members, slot, p, bytes, true, host_ranks));
}

std::unique_ptr<Segment> Segment::open(const std::string& name, int members, int64_t slot, uint64_t nonce,
                                       int host_ranks) {
  return open_impl(name, members, slot, nonce, host_ranks, false);
}

std::unique_ptr<Segment> Segment::try_open(const std::string& name, int members, int64_t slot, uint64_t nonce,
                                           int host_ranks) {
  return open_impl(name, members, slot, nonce, host_ranks, true);
}

// `early`: the creator may still be making it (no name yet, not yet sized, header not yet
// written): nullptr then instead of an error.
std::unique_ptr<Segment> Segment::open_impl(const std::string& name, int members, int64_t slot, uint64_t nonce,
                                            int host_ranks, bool early) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0 && early && errno == ENOENT) return nullptr;
  if (fd < 0)
    throw CommError("shared memory " + name + ": shm_open failed: " + std::strerror(errno) +
                    " (ranks that share a host name but not /dev/shm? PARITY_GLOO_SHM=0 uses TCP)");
  const size_t bytes = segment_bytes(members, slot);
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    if (early && st.st_size == 0) return nullptr;
    throw CommError("shared memory " + name + ": size " + std::to_string(st.st_size) + ", expected " +
                    std::to_string(bytes));
  }
  void* p = map_fd(fd, bytes, name);
  const auto* h = static_cast<const Header*>(p);
  if (early && std::atomic_ref<uint64_t>(const_cast<uint64_t&>(h->magic)).load(std::memory_order_acquire) == 0) {
    munmap(p, bytes);
    return nullptr;
  }
  if (h->magic != kMagic || h->nonce != nonce || h->members != members || h->slot_bytes != slot) {
    munmap(p, bytes);
    throw CommError("shared memory " + name +
                    ": not the segment of this group (another run's, or a different PARITY_SHM_SLOT_BYTES)");
  }
  return std::unique_ptr<Segment>(new Segment(name, members, slot, p, bytes, false, host_ranks));
}

Segment::Segment(std::string name, int members, int64_t slot, void* base, size_t bytes, bool owner, int host_ranks)
    : name_(std::move(name)), members_(members), slot_bytes_(slot), base_(base), bytes_(bytes),
      owner_(owner), linked_(owner), ctl_stride_(ctl_stride(members)),
      ctl_base_(static_cast<char*>(base) + 64),
      data_(static_cast<char*>(base) + 64 + ctl_stride_ * static_cast<size_t>(members)),
      spin_iters_(spin_setting(host_ranks)), yields_(yield_setting()) {}

Segment::~Segment() {
  unlink();
  munmap(base_, bytes_);
}

void Segment::unlink() {
  if (owner_ && linked_) {
    shm_unlink(name_.c_str());
    linked_ = false;
  }
}

std::string Segment::who(int r) const {
  const std::string g = std::to_string(r);
  if (world_ranks_.empty()) return g + " of the group";
  return std::to_string(world_ranks_[static_cast<size_t>(r)]) + " (group rank " + g + ")";
}

RankControl& Segment::ctl(int r) const {
  return *reinterpret_cast<RankControl*>(ctl_base_ + ctl_stride_ * static_cast<size_t>(r));
}

int64_t* Segment::send_bytes(int rank, uint32_t step) const {
  return reinterpret_cast<int64_t*>(ctl_base_ + ctl_stride_ * static_cast<size_t>(rank) + 64) +
         static_cast<size_t>(step & 1u) * static_cast<size_t>(members_);
}

void Segment::post(int rank, uint32_t step) {
  RankControl& c = ctl(rank);
  c.step.store(step, std::memory_order_seq_cst);
  if (c.sleepers.load(std::memory_order_seq_cst) != 0) futex(&c.step, FUTEX_WAKE, INT32_MAX, nullptr);
}

void Segment::wait_all(int me, uint32_t step, clock::time_point deadline, std::chrono::milliseconds timeout,
                       const std::vector<PeerInfo>& peers) {
  for (int r = 0; r < members_; ++r)
    if (r != me) wait_one(r, step, deadline, timeout, peers[static_cast<size_t>(r)]);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (owner_ && linked_) unlink();  // every member has posted a step: every member has mapped it
}

void Segment::wait_one(int r, uint32_t step, clock::time_point deadline, std::chrono::milliseconds timeout,
                       const PeerInfo& peer) {
  RankControl& c = ctl(r);
  for (int i = 0; i < spin_iters_; ++i) {
    if (reached(c.step.load(std::memory_order_acquire), step)) return;
    cpu_relax();
  }
  for (int i = 0; i < yields_; ++i) {
    if (reached(c.step.load(std::memory_order_acquire), step)) return;
    sched_yield();
  }
  for (;;) {
    const uint32_t seen = c.step.load(std::memory_order_seq_cst);
    if (reached(seen, step)) return;
    const auto now = clock::now();
    if (now >= deadline)
      throw CommError("timed out after " + std::to_string(timeout.count()) + " ms waiting for rank " + who(r) +
                      " (shared memory)");
    const auto left = std::min<clock::duration>(deadline - now, kSlice);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    c.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t again = c.step.load(std::memory_order_seq_cst);
    const bool slept = !reached(again, step) && futex(&c.step, FUTEX_WAIT, again, &ts) != 0 && errno == ETIMEDOUT;
    c.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (slept && !reached(c.step.load(std::memory_order_acquire), step) && peer_exited(peer))
      throw CommError("rank " + who(r) + " exited during the collective (pid " + std::to_string(peer.pid) +
                      ", shared memory)");
  }
}

}  // namespace parity::comm::shm
