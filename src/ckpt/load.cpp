// load(): each rank reads and verifies only the checksum blocks of the chunks that meet its
// shard under the target layout, and copies them bitwise into its local tensors.
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "ckpt/checksum.h"
#include "ckpt/collective.h"
#include "ckpt/verify.h"
#include "core/error.h"
#include "core/files.h"

namespace parity::ckpt {

using nlohmann::json;

namespace {

std::string short_json(const json& j) {
  std::string s = j.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// The rank files a load opens, each checked once against metadata.json's size.
class Files {
 public:
  Files(std::string dir, const Metadata& md) : dir_(std::move(dir)), md_(md) {}
  ~Files() {
    for (auto& [r, fd] : fds_) ::close(fd);
  }
  Files(const Files&) = delete;
  Files& operator=(const Files&) = delete;

  std::string path(int rank) const { return dir_ + "/" + rank_file_name(rank); }
  const std::string& dir() const { return dir_; }

  void read(int rank, int64_t offset, int64_t n, void* out, const std::string& tensor) {
    const int fd = open(rank, tensor);
    auto* p = static_cast<char*>(out);
    int64_t done = 0;
    while (done < n) {
      const ssize_t got = ::pread(fd, p + done, static_cast<size_t>(n - done), offset + done);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        throw IoError(path(rank) + ": cannot read bytes [" + std::to_string(offset + done) + ", " +
                      std::to_string(offset + n) + ") of tensor '" + tensor + "'" +
                      (got == 0 ? ": truncated" : std::string(": ") + std::strerror(errno)));
      done += got;
    }
  }

 private:
  int open(int rank, const std::string& tensor) {
    if (auto it = fds_.find(rank); it != fds_.end()) return it->second;
    const std::string p = path(rank);
    // A FIFO or a device in place of the rank file: refused (exit 3), never a blocking open.
    auto f = open_regular_if_exists(p, kMaxRankFileBytes, Blame::damaged_data, "checkpoint rank file");
    if (!f) throw IoError(p + ": missing (tensor '" + tensor + "' needs it): " + std::strerror(ENOENT));
    const int64_t want = md_.files.at(static_cast<size_t>(rank)).bytes;
    if (f->size() != want)
      throw IoError(p + ": " + (f->size() < want ? "truncated" : "wrong size") + ": " + std::to_string(f->size()) +
                    " bytes, metadata.json says " + std::to_string(want) + " (tensor '" + tensor + "' needs it)");
    const int fd = f->release();
    fds_[rank] = fd;
    return fd;
  }

  std::string dir_;
  const Metadata& md_;
  std::map<int, int> fds_;
};

// Reads the blocks of chunk c that hold rows [first, last], verifies their checksums and
// returns the first row read; buf receives the rows.
int64_t read_rows(Files& files, const TensorMeta& t, const ChunkMeta& c, int64_t first, int64_t last,
                  std::vector<unsigned char>& buf) {
  const int64_t b0 = first / c.block_rows, b1 = last / c.block_rows, rb = c.row_bytes();
  const int64_t row0 = b0 * c.block_rows, row_end = std::min(c.rows(), (b1 + 1) * c.block_rows);
  buf.resize(static_cast<size_t>((row_end - row0) * rb));
  files.read(c.rank, c.offset + row0 * rb, static_cast<int64_t>(buf.size()), buf.data(), t.name);
  for (int64_t b = b0; b <= b1; ++b)
    if (std::string p = block_problem(files.path(c.rank), t, c, b, buf.data() + (b * c.block_rows - row0) * rb);
        !p.empty())
      throw IoError(p);
  return row0;
}

void load_tensor(Files& files, const TensorMeta& t, const StateEntry& e, const mesh::Mesh& m, int rank) {
  const auto idx = mesh::local_dim_indices(m, e.layout, e.shape, rank);
  Shape ls;
  for (const auto& v : idx) ls.push_back(static_cast<int64_t>(v.size()));
  void* dst = e.resize(ls);
  const int64_t elem = dtype_size(e.dtype);
  int64_t filled = 0;
  std::vector<unsigned char> buf;
  for (const ChunkMeta& c : t.chunks) {
    const Overlap ov = overlap(idx, c.rect);
    if (ov.empty()) continue;
    const int64_t row0 = read_rows(files, t, c, ov.first_row(), ov.last_row(), buf);
    scatter_overlap(ov, c.rect, row0, buf.data(), ls, elem, dst);
    filled += ov.numel();
  }
  if (filled != numel(ls))
    throw IoError(files.dir() + "/" + kMetadataFile + ": the chunks of tensor '" + t.name + "' cover " +
                  std::to_string(filled) + " of the " + std::to_string(numel(ls)) + " elements rank " +
                  std::to_string(rank) + " needs");
}

}  // namespace

void check_model(const json& saved, const json& expected, const std::string& where) {
  if (saved == expected) return;
  const json patch = json::diff(saved, expected);
  const json& op = patch.at(0);
  const std::string ptr = op.at("path").get<std::string>();
  const json::json_pointer jp(ptr);
  const std::string have = saved.contains(jp) ? short_json(saved.at(jp)) : "nothing";
  const std::string want = expected.contains(jp) ? short_json(expected.at(jp)) : "nothing";
  throw ConfigError(where + ": $.model" + ptr,
                    "the checkpoint was saved for another model config: checkpoint has " + have + ", this run has " +
                        want + " (" + std::to_string(patch.size()) + " difference(s))");
}

void check_run(const json& saved, const json& expected, const std::string& where) {
  if (expected.is_null()) return;
  if (!saved.is_object())
    throw ConfigError(where + ": $.run",
                      "missing: the checkpoint was saved by a parity that did not record its run's seeds, optimizer "
                      "and precision, so a resume cannot be checked to continue the same training; save it again "
                      "with this build (docs/ckpt.md \"Identity\")");
  json a = saved, b = expected;
  a.erase("layout"), b.erase("layout");  // recorded, not compared: resharding is the point
  if (a == b) return;
  const json patch = json::diff(a, b);
  const std::string ptr = patch.at(0).at("path").get<std::string>();
  const json::json_pointer jp(ptr);
  std::string field;  // "/optim/lr" -> "optim.lr"
  for (const char c : ptr.substr(1)) field += c == '/' ? '.' : c;
  const std::string have = a.contains(jp) ? short_json(a.at(jp)) : "nothing";
  const std::string want = b.contains(jp) ? short_json(b.at(jp)) : "nothing";
  throw ConfigError(where + ": $.run." + field,
                    "the checkpoint was saved by a run with another " + field + ": checkpoint has " + have +
                        ", this run has " + want + " (" + std::to_string(patch.size()) +
                        " difference(s)); a resume must continue the same training");
}

void load_rank(const Checkpoint& ck, const mesh::Mesh& m, ShardedState& state, int rank, const json& model,
               const json& run) {
  const std::string& dir = ck.dir();
  const Metadata& md = ck.md();
  const std::string where = dir + "/" + kMetadataFile;
  check_model(md.model, model, where);
  check_run(md.run, run, where);
  for (const StateEntry& e : state.entries()) {
    const TensorMeta* t = md.find(e.name);
    if (!t)
      throw ConfigError(where + ": tensor '" + e.name + "'", "missing: the checkpoint holds " +
                                                                 std::to_string(md.tensors.size()) +
                                                                 " tensors, not this one");
    if (t->dtype != e.dtype)
      throw ConfigError(where + ": tensor '" + e.name + "'",
                        "dtype mismatch: saved as " + std::string(dtype_name(t->dtype)) + ", this run loads " +
                            std::string(dtype_name(e.dtype)));
    if (t->shape != e.shape)
      throw ConfigError(where + ": tensor '" + e.name + "'",
                        "shape mismatch: saved " + shape_str(t->shape) + ", this run wants " + shape_str(e.shape));
  }
  Files files(dir, md);
  for (const StateEntry& e : state.entries()) load_tensor(files, *md.find(e.name), e, m, rank);
}

CheckpointInfo load(comm::Communicator& world, const mesh::Mesh& m, ShardedState& state, const json& model,
                    const std::string& dir, const json& run) {
  if (world.size() != m.world())
    throw Error("checkpoint load: the communicator has " + std::to_string(world.size()) + " ranks, the mesh " +
                std::to_string(m.world()));
  CheckpointInfo info;
  agreed(world, "load of " + dir, [&] {
    const Checkpoint ck = Checkpoint::open(dir);
    load_rank(ck, m, state, world.rank(), model, run);
    info = {ck.md().step, ck.md().data_position, ck.md().model, ck.md().run};
  });
  return info;
}

}  // namespace parity::ckpt
