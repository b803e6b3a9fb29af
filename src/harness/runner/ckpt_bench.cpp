// `parity ckpt bench` (ckpt_bench.h).
#include "harness/runner/ckpt_bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "ckpt/synthetic.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/files.h"
#include "harness/scenario/scenario.h"
#include "mesh/mesh.h"

namespace parity {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Drops the page cache of every file under `dir` (clean pages only, so after an fsync), so
// that the next read comes from the disk.
void drop_cache(const std::string& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// dd-style: `bytes` in 4 MiB writes then fsync; then read back cold. Returns {write s, read s}.
std::pair<double, double> raw_disk(const std::string& path, int64_t bytes) {
  std::vector<char> buf(size_t{4} << 20, 'x');
  // Its own raw file (checked before: core/files.h), never written through a link or into a FIFO.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0) throw IoError(path + ": cannot create");
  const auto t0 = Clock::now();
  for (int64_t done = 0; done < bytes;) {
    const ssize_t n = ::write(fd, buf.data(), static_cast<size_t>(std::min<int64_t>(bytes - done, buf.size())));
    if (n <= 0) throw IoError(path + ": write failed");
    done += n;
  }
  ::fsync(fd);
  const double w = seconds_since(t0);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  const int rfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const auto t1 = Clock::now();
  while (::read(rfd, buf.data(), buf.size()) > 0) {
  }
  const double r = seconds_since(t1);
  ::close(rfd);
  fs::remove(path);
  return {w, r};
}

void row(const char* op, const std::string& layout, int64_t bytes, double s, int64_t wrong) {
  std::printf("%-24s %-20s %12lld %10.4f %10.1f %8lld\n", op, layout.c_str(), static_cast<long long>(bytes), s,
              static_cast<double>(bytes) / s / 1e6, static_cast<long long>(wrong));
}

LayoutConfig layout_of(int64_t world, int64_t dp_shard, int64_t tp, int64_t ep) {
  LayoutConfig l;
  l.world = world;
  l.dp_shard = dp_shard;
  l.tp = tp;
  l.ep = ep;
  return l;
}

// Loads `dir` into every rank of `to` in turn (one process); returns seconds and #wrong.
std::pair<double, int64_t> load_all(const ModelConfig& c, const mesh::Mesh& to, const nlohmann::json& model,
                                    const std::string& dir, bool cold) {
  std::vector<std::unique_ptr<ckpt::SyntheticState>> st;
  for (int r = 0; r < to.world(); ++r) {
    st.push_back(std::make_unique<ckpt::SyntheticState>(c, to, r, 1));
    st.back()->scramble();
  }
  if (cold) drop_cache(dir);
  const auto t0 = Clock::now();
  const ckpt::Checkpoint ck = ckpt::Checkpoint::open(dir);  // as every rank of a real load does
  for (int r = 0; r < to.world(); ++r) ckpt::load_rank(ck, to, st[static_cast<size_t>(r)]->state(), r, model);
  const double s = seconds_since(t0);
  int64_t wrong = 0;
  for (const auto& x : st) wrong += x->wrong();
  return {s, wrong};
}

}  // namespace

int ckpt_bench(const std::string& scenario, std::string dir) {
  const Scenario sc = load_scenario(scenario);
  const nlohmann::json model = scenario_to_json(sc)["model"];
  const LayoutConfig a = layout_of(8, 4, 2, 2), b = layout_of(2, 2, 1, 1);
  validate_layout(a, sc.model);
  validate_layout(b, sc.model);
  const mesh::Mesh ma(a), mb(b);
  if (dir.empty()) dir = (fs::temp_directory_path() / "parity-ckpt-bench").string();
  check_output_dir("--dir", dir, DirKind::checkpoint);  // removed below: only if it is a checkpoint
  check_output_file("--dir", dir + "-raw.bin", "xxxxxxxx");  // raw_disk's own bytes
  fs::remove_all(dir);
  std::vector<std::unique_ptr<ckpt::SyntheticState>> st;
  std::vector<const ckpt::ShardedState*> ptrs;
  for (int r = 0; r < ma.world(); ++r) {
    st.push_back(std::make_unique<ckpt::SyntheticState>(sc.model, ma, r, 1));
    ptrs.push_back(&st.back()->state());
  }
  std::printf("# parity ckpt bench: %s model, synthetic state (params + Adam m, v + expert bias + step), "
              "one process playing every rank, dir %s\n",
              sc.name.c_str(), dir.c_str());
  std::printf("%-24s %-20s %12s %10s %10s %8s\n", "op", "layout", "bytes", "time(s)", "MB/s", "#wrong");
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    ckpt::save_all(ma, ptrs, {10, 640, model}, dir);
    best = std::min(best, seconds_since(t0));
  }
  int64_t bytes = 0;
  for (const auto& f : ckpt::read_metadata(dir).files) bytes += f.bytes;
  row("save (fsync, best of 3)", describe_layout(a, LayoutText::brief), bytes, best, 0);
  for (bool cold : {true, false}) {
    const auto [s, w] = load_all(sc.model, ma, model, dir, cold);
    row(cold ? "load cold, same" : "load warm, same", describe_layout(a, LayoutText::brief), bytes, s, w);
    const auto [s2, w2] = load_all(sc.model, mb, model, dir, cold);
    row(cold ? "load cold, reshard" : "load warm, reshard", describe_layout(b, LayoutText::brief), bytes, s2, w2);
  }
  const auto [w, r] = raw_disk(dir + "-raw.bin", bytes);
  row("dd write (fsync)", "raw, 4 MiB blocks", bytes, w, 0);
  row("dd read (cold)", "raw, 4 MiB blocks", bytes, r, 0);
  fs::remove_all(dir);
  return 0;
}

}  // namespace parity
