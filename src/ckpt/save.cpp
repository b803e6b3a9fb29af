// save(): each rank's file, metadata.json from rank 0, the atomic replace; and the pieces.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "ckpt/checksum.h"
#include "ckpt/collective.h"
#include "core/error.h"
#include "core/files.h"
#include "core/inject.h"
#include "core/knobs.h"
#include "core/safetensors.h"

namespace parity::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;

const void* StateEntry::data() const {
  return std::visit([](auto* t) -> const void* { return t->ptr(); }, local);
}

Shape StateEntry::local_shape() const {
  return std::visit([](auto* t) { return t->shape; }, local);
}

void* StateEntry::resize(const Shape& s) const {
  return std::visit(
      [&](auto* t) -> void* {
        using T = typename std::decay_t<decltype(t->data)>::value_type;
        *t = Tensor<T>(s);
        return t->ptr();
      },
      local);
}

void ShardedState::check_new(const std::string& name) const {
  if (name.empty()) throw Error("checkpoint: a tensor needs a name");
  if (name.find('#') != std::string::npos) throw Error("checkpoint: tensor name '" + name + "' contains '#'");
  for (const auto& e : entries_)
    if (e.name == name) throw Error("checkpoint: tensor '" + name + "' added twice");
}

namespace {

// Test-only fault injection: PARITY_CKPT_CRASH="<rank>:<point>" makes that rank _exit(86)
// at that point of a save, as a crash would (no unwinding, no cleanup).
void maybe_crash(const char* point, int rank) {
  const char* v = knob("PARITY_CKPT_CRASH");
  if (v && std::string(v) == std::to_string(rank) + ":" + point) {
    std::fprintf(stderr, "ckpt: PARITY_CKPT_CRASH: rank %d exits at '%s'\n", rank, point);
    std::fflush(stderr);
    ::_exit(86);
  }
}

// The rectangles a rank saves. The bug zoo's strided_saved_as_shard (core/inject.h): the
// global offsets of a StridedShard tensor's chunks computed as if its StridedShard were a
// plain Shard (the lengths stay the rank's own). A round trip into the same layout reads the
// same wrong offsets back and looks fine; another layout gets rows from the wrong places,
// and uneven pieces leave gaps and overlaps that the loader refuses.
std::vector<LocalChunk> saved_chunks(const mesh::Mesh& m, const mesh::TensorLayout& l, const Shape& shape, int rank) {
  std::vector<LocalChunk> out = shard_chunks(m, l, shape, rank);
  static const bool bug = injected("strided_saved_as_shard");
  if (!bug) return out;
  mesh::TensorLayout as_shard = l;
  for (auto& p : as_shard.placements)
    if (p.kind == mesh::PlacementKind::strided_shard) p = mesh::Placement::shard(p.dim);
  if (as_shard == l) return out;
  const std::vector<LocalChunk> wrong = shard_chunks(m, as_shard, shape, rank);
  if (wrong.size() != out.size()) return out;
  for (size_t k = 0; k < out.size(); ++k)
    for (size_t d = 0; d < out[k].rect.dims.size(); ++d) {
      mesh::Range& r = out[k].rect.dims[d];
      r = {wrong[k].rect.dims[d].begin, wrong[k].rect.dims[d].begin + r.size()};
    }
  return out;
}

std::vector<uint32_t> block_checksums(const ChunkMeta& c, const unsigned char* p) {
  std::vector<uint32_t> out;
  const int64_t rb = c.row_bytes();
  for (int64_t r = 0; r < c.rows(); r += c.block_rows) {
    const int64_t n = std::min(c.block_rows, c.rows() - r) * rb;
    out.push_back(crc32c(p + r * rb, static_cast<size_t>(n)));
  }
  return out;
}

uint32_t file_checksum(const std::string& path, int64_t* size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot read back: " + std::strerror(errno));
  std::vector<char> buf(size_t{4} << 20);
  uint32_t crc = 0;
  *size = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = in.gcount();
    crc = crc32c(buf.data(), static_cast<size_t>(n), crc);
    *size += n;
  }
  return crc;
}

}  // namespace

RankRecord write_rank_file(const std::string& dir, const mesh::Mesh& m, const ShardedState& state,
                           const CheckpointInfo& info, int rank) {
  RankRecord rec;
  rec.chunks.resize(state.size());
  RankRecordHeader self{rank, m.layout(), info.step, info.data_position, json_checksum(info.model), {}, {}};
  if (!info.run.is_null()) self.run_checksum = json_checksum(info.run);
  SafetensorsWriter w;
  for (size_t i = 0; i < state.size(); ++i) {
    const StateEntry& e = state.entries()[i];
    const Shape ls = mesh::local_shape(m, e.layout, e.shape, rank);
    if (ls != e.local_shape())
      throw Error("checkpoint: tensor '" + e.name + "' on rank " + std::to_string(rank) + " has local shape " +
                  shape_str(e.local_shape()) + ", its layout " + mesh::layout_str(e.layout) + " gives " +
                  shape_str(ls));
    if (!writes_shard(m, e.layout, e.name, rank)) continue;
    const int64_t elem = dtype_size(e.dtype);
    const auto chunks = saved_chunks(m, e.layout, e.shape, rank);
    for (size_t k = 0; k < chunks.size(); ++k) {
      ChunkMeta c;
      c.rank = rank;
      c.rect = chunks[k].rect;
      c.key = e.name + "#" + std::to_string(k);
      c.bytes = c.rect.numel() * elem;
      c.block_rows = std::max<int64_t>(1, kBlockBytes / std::max<int64_t>(1, c.row_bytes()));
      std::vector<unsigned char> buf(static_cast<size_t>(c.bytes));
      extract_chunk(e.data(), ls, chunks[k], elem, buf.data());
      c.checksums = block_checksums(c, buf.data());
      w.add(c.key, e.dtype, c.rect.shape(), buf.data());
      rec.chunks[i].push_back(std::move(c));
    }
    if (!rec.chunks[i].empty()) self.tensors.push_back({e.name, e.dtype, e.shape, e.layout, rec.chunks[i]});
  }
  // The file describes its own chunks, so that every record of metadata.json can be checked
  // against the file that holds the bytes (docs/ckpt.md, "What a reader verifies").
  for (const auto& [k, v] : rank_record_metadata(self)) w.set_metadata(k, v);
  const std::string path = dir + "/" + rank_file_name(rank);
  w.write(path);
  const RankHeader header = read_rank_header(path);
  for (auto& per : rec.chunks)
    for (auto& c : per) {
      const auto it = header.entries.find(c.key);
      if (it == header.entries.end() || it->second.bytes != c.bytes)
        throw IoError(path + ": entry '" + c.key + "' is not what was written");
      c.offset = it->second.offset;
    }
  rec.file.rank = rank;
  rec.file.file = rank_file_name(rank);
  rec.file.header_checksum = header.checksum;
  rec.file.checksum = file_checksum(path, &rec.file.bytes);
  return rec;
}

std::string record_to_string(const RankRecord& r) {
  json j{{"rank", r.file.rank},
         {"bytes", r.file.bytes},
         {"checksum", r.file.checksum},
         {"header_checksum", r.file.header_checksum}};
  json per = json::array();
  for (const auto& v : r.chunks) {
    json cs = json::array();
    for (const auto& c : v) cs.push_back({c.offset, c.checksums});
    per.push_back(cs);
  }
  j["chunks"] = per;
  return j.dump();
}

// Only offsets and checksums travel: the rest of each chunk is recomputed from the layout.
RankRecord record_from_string(const std::string& s) {
  const json j = json::parse(s);
  RankRecord r;
  r.file.rank = j.at("rank").get<int>();
  r.file.file = rank_file_name(r.file.rank);
  r.file.bytes = j.at("bytes").get<int64_t>();
  r.file.checksum = j.at("checksum").get<uint32_t>();
  r.file.header_checksum = j.at("header_checksum").get<uint32_t>();
  for (const auto& v : j.at("chunks")) {
    r.chunks.emplace_back();
    for (const auto& c : v) {
      ChunkMeta x;
      x.offset = c.at(0).get<int64_t>();
      x.checksums = c.at(1).get<std::vector<uint32_t>>();
      r.chunks.back().push_back(std::move(x));
    }
  }
  return r;
}

Metadata make_metadata(const mesh::Mesh& m, const ShardedState& state, const CheckpointInfo& info,
                       const std::vector<RankRecord>& records) {
  Metadata md;
  md.step = info.step;
  md.data_position = info.data_position;
  md.model = info.model;
  md.run = info.run;
  md.mesh = m.layout();
  for (const auto& r : records) md.files.push_back(r.file);
  for (size_t i = 0; i < state.size(); ++i) {
    const StateEntry& e = state.entries()[i];
    TensorMeta t{e.name, e.dtype, e.shape, e.layout, {}};
    for (int r = 0; r < m.world(); ++r) {
      if (!writes_shard(m, e.layout, e.name, r)) continue;
      const auto chunks = saved_chunks(m, e.layout, e.shape, r);
      const auto& got = records[static_cast<size_t>(r)].chunks.at(i);
      if (got.size() != chunks.size())
        throw Error("checkpoint: rank " + std::to_string(r) + " wrote " + std::to_string(got.size()) +
                    " chunks of '" + e.name + "', its layout has " + std::to_string(chunks.size()));
      for (size_t k = 0; k < chunks.size(); ++k) {
        ChunkMeta c;
        c.rank = r;
        c.rect = chunks[k].rect;
        c.key = e.name + "#" + std::to_string(k);
        c.bytes = c.rect.numel() * dtype_size(e.dtype);
        c.block_rows = std::max<int64_t>(1, kBlockBytes / std::max<int64_t>(1, c.row_bytes()));
        c.offset = got[k].offset;
        c.checksums = got[k].checksums;
        t.chunks.push_back(std::move(c));
      }
    }
    md.tensors.push_back(std::move(t));
  }
  return md;
}

namespace {

std::string strip(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

std::string parent_of(const std::string& dir) {
  const fs::path p = fs::path(dir).parent_path();
  return p.empty() ? "." : p.string();
}

void rename_or_throw(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw IoError("checkpoint: cannot rename " + from + " to " + to + ": " + std::strerror(errno));
}

int64_t new_nonce() {
  const auto t = std::chrono::steady_clock::now().time_since_epoch().count();
  return (static_cast<int64_t>(::getpid()) << 32) ^ (t & 0xFFFFFFFF);
}

std::string temp_dir_for(const std::string& dir, int64_t nonce) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(nonce));
  return strip(dir) + ".tmp-" + buf;
}

// Whether `name` is a file parity writes into a checkpoint: metadata.json or rankN.safetensors.
bool is_checkpoint_file(const std::string& name) {
  if (name == kMetadataFile) return true;
  const std::string pre = "rank", post = ".safetensors";
  if (name.size() <= pre.size() + post.size() || name.rfind(pre, 0) != 0 ||
      name.compare(name.size() - post.size(), post.size(), post) != 0)
    return false;
  const std::string n = name.substr(pre.size(), name.size() - pre.size() - post.size());
  return n.find_first_not_of("0123456789") == std::string::npos;
}

// Everything in `dir` that parity did not write there (a user's NOTES.txt, a directory of
// theirs) and the writer's lock file: linked into `tmp` (the same inodes: the lock stays held,
// nothing is copied) before the exchange, so the new checkpoint keeps them. Until the exchange
// the originals stay where they are, after it the links: a crash loses neither.
void carry_over(const std::string& dir, const std::string& tmp) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (is_checkpoint_file(name)) continue;
    const fs::path to = fs::path(tmp) / name;
    std::error_code link_ec;
    fs::copy(e.path(), to,
             fs::copy_options::recursive | fs::copy_options::copy_symlinks | fs::copy_options::create_hard_links,
             link_ec);
    if (link_ec) {  // another filesystem mounted inside: a copy
      std::error_code copy_ec;
      fs::remove_all(to, copy_ec);
      fs::copy(e.path(), to, fs::copy_options::recursive | fs::copy_options::copy_symlinks, copy_ec);
      if (copy_ec)
        throw IoError("checkpoint: cannot keep " + e.path().string() + " (a file parity did not write) in the new " +
                      "checkpoint: " + copy_ec.message() + "; nothing was replaced");
    }
  }
  if (ec) throw IoError("checkpoint: cannot list " + dir + ": " + ec.message() + "; nothing was replaced");
}

}  // namespace

std::string old_dir(const std::string& dir) { return strip(dir) + ".old"; }

DirLock lock_checkpoint_dir(const std::string& option, const std::string& dir) {
  const char* held = knob(kLockHeldEnv);
  if (held != nullptr && fs::path(held) == fs::absolute(fs::path(strip(dir))).lexically_normal()) return {};
  std::error_code ec;
  fs::create_directory(dir, ec);  // its parent exists (check_output_dir)
  if (ec) throw IoError(dir + ": cannot create: " + ec.message());
  return DirLock(option, dir);
}

std::string make_temp_dir(const std::string& dir) {
  const std::string tmp = temp_dir_for(dir, new_nonce());
  std::error_code ec;
  if (!fs::create_directory(tmp, ec)) throw IoError(tmp + ": cannot create: " + (ec ? ec.message() : "exists"));
  return tmp;
}

void commit(const std::string& tmp, const std::string& dir_in) {
  const std::string dir = strip(dir_in), parent = parent_of(dir);
  if (fs::is_directory(dir)) carry_over(dir, tmp);
  fsync_dir(tmp);
  if (!fs::exists(dir)) {
    rename_or_throw(tmp, dir);
    fsync_dir(parent);
    return;
  }
  if (!knob("PARITY_CKPT_NO_EXCHANGE")) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
      fsync_dir(parent);
      maybe_crash("exchanged", 0);
      fs::remove_all(tmp);  // now the previous checkpoint
      return;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
      throw IoError("checkpoint: cannot exchange " + tmp + " and " + dir + ": " + std::strerror(errno));
  }
  const std::string old = old_dir(dir);  // no atomic exchange here: two renames, each fsynced
  fs::remove_all(old);
  rename_or_throw(dir, old);
  fsync_dir(parent);
  maybe_crash("between_renames", 0);
  rename_or_throw(tmp, dir);
  fsync_dir(parent);
  fs::remove_all(old);
}

void recover(const std::string& dir_in) {
  const std::string dir = strip(dir_in), old = old_dir(dir), parent = parent_of(dir);
  std::error_code ec;
  if (!fs::exists(dir) && fs::exists(old + "/" + kMetadataFile)) {
    rename_or_throw(old, dir);
    fsync_dir(parent);
  } else if (fs::exists(dir) && fs::exists(old)) {
    fs::remove_all(old);
  }
  const std::string prefix = fs::path(dir).filename().string() + ".tmp-";
  if (!fs::exists(parent)) return;
  for (const auto& e : fs::directory_iterator(parent, ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove_all(e.path(), ec);
}

std::string resolve(const std::string& dir_in) {
  const std::string dir = strip(dir_in);
  if (fs::exists(dir + "/" + kMetadataFile)) return dir;
  if (!fs::exists(dir) && fs::exists(old_dir(dir) + "/" + kMetadataFile)) return old_dir(dir);
  throw IoError(dir + "/" + kMetadataFile + ": missing: " + dir + " holds no checkpoint");
}

void save_all(const mesh::Mesh& m, const std::vector<const ShardedState*>& states, const CheckpointInfo& info,
              const std::string& dir) {
  if (static_cast<int>(states.size()) != m.world())
    throw Error("checkpoint: save_all needs one state per rank (" + std::to_string(m.world()) + "), got " +
                std::to_string(states.size()));
  check_output_dir("checkpoint directory", dir, DirKind::checkpoint);  // never replaces what is not ours
  const DirLock lock = lock_checkpoint_dir("checkpoint directory", dir);  // one writer per directory
  recover(dir);
  const std::string tmp = make_temp_dir(dir);
  try {
    std::vector<RankRecord> recs;
    for (int r = 0; r < m.world(); ++r)
      recs.push_back(write_rank_file(tmp, m, *states[static_cast<size_t>(r)], info, r));
    write_metadata(tmp, make_metadata(m, *states[0], info, recs));
    commit(tmp, dir);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

void save(comm::Communicator& world, const mesh::Mesh& m, const ShardedState& state, const CheckpointInfo& info,
          const std::string& dir) {
  if (world.size() != m.world())
    throw Error("checkpoint save: the communicator has " + std::to_string(world.size()) + " ranks, the mesh " +
                std::to_string(m.world()));
  const int rank = world.rank();
  std::vector<int64_t> nonce{0};
  DirLock lock;  // rank 0's, unless its launcher holds it (kLockHeldEnv)
  agreed(world, "save (prepare " + dir + ")", [&] {
    if (rank != 0) return;
    // The last line of defence (the CLI checks before launching): a directory that is not a
    // parity checkpoint is never exchanged with the new one and removed (docs/faults.md).
    check_output_dir("--ckpt", dir, DirKind::checkpoint);
    lock = lock_checkpoint_dir("--ckpt", dir);
    recover(dir);
    nonce[0] = new_nonce();
    const std::string tmp = temp_dir_for(dir, nonce[0]);
    std::error_code ec;
    if (!fs::create_directory(tmp, ec)) throw IoError(tmp + ": cannot create: " + (ec ? ec.message() : "exists"));
  });
  world.broadcast(std::span<int64_t>(nonce), 0);
  const std::string tmp = temp_dir_for(dir, nonce[0]);
  auto cleanup = [&] {
    std::error_code ec;
    if (rank == 0) fs::remove_all(tmp, ec);
  };
  try {
    RankRecord rec;
    agreed(world, "save (write rank files)", [&] {
      rec = write_rank_file(tmp, m, state, info, rank);
      maybe_crash("rank_file", rank);
    });
    const auto strs = allgather_strings(world, record_to_string(rec));
    agreed(world, "save (commit " + dir + ")", [&] {
      if (rank != 0) return;
      std::vector<RankRecord> recs;
      for (const auto& s : strs) recs.push_back(record_from_string(s));
      write_metadata(tmp, make_metadata(m, state, info, recs));
      maybe_crash("metadata", 0);
      commit(tmp, dir);
    });
  } catch (const CommError&) {
    throw;  // a rank is gone: leave the temporary directory to recover()
  } catch (...) {
    cleanup();
    throw;
  }
}

}  // namespace parity::ckpt
