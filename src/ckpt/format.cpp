#include "ckpt/format.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "ckpt/checksum.h"
#include "core/error.h"

namespace parity::ckpt {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& where, const std::string& path, const std::string& what) {
  throw IoError(where + ": " + path + ": " + what);
}

uint32_t parse_checksum(const std::string& s, const std::string& where, const std::string& path) {
  if (s.rfind("crc32c:", 0) != 0 || s.size() != 15) bad(where, path, "not a crc32c checksum: '" + s + "'");
  return static_cast<uint32_t>(std::stoul(s.substr(7), nullptr, 16));
}

ordered_json layout_json(const mesh::Layout& l, const LayoutConfig& cfg) {
  const mesh::Mesh m(cfg);
  ordered_json p = ordered_json::array(), dims = ordered_json::array();
  for (const auto& x : l.placements) p.push_back(mesh::placement_str(x));
  for (auto d : mesh::view_dims(l.view)) dims.push_back(std::string(mesh::dim_name(d)));
  return {{"view", std::string(mesh::view_name(l.view))}, {"placements", p}, {"mesh_dims", dims},
          {"mesh", m.sizes(l.view)}};
}

ordered_json chunk_json(const ChunkMeta& c) {
  ordered_json rect = ordered_json::array(), sums = ordered_json::array();
  for (const auto& r : c.rect.dims) rect.push_back({r.begin, r.end});
  for (uint32_t s : c.checksums) sums.push_back(checksum_str(s));
  return {{"rank", c.rank},     {"rect", rect},   {"file", rank_file_name(c.rank)}, {"key", c.key},
          {"offset", c.offset}, {"bytes", c.bytes}, {"block_rows", c.block_rows},   {"checksums", sums}};
}

ChunkMeta chunk_from(const json& j, const TensorMeta& t, const std::string& where, const std::string& path) {
  ChunkMeta c;
  c.rank = j.at("rank").get<int>();
  for (const auto& r : j.at("rect")) c.rect.dims.push_back({r.at(0).get<int64_t>(), r.at(1).get<int64_t>()});
  c.key = j.at("key").get<std::string>();
  c.offset = j.at("offset").get<int64_t>();
  c.bytes = j.at("bytes").get<int64_t>();
  c.block_rows = j.at("block_rows").get<int64_t>();
  for (const auto& s : j.at("checksums")) c.checksums.push_back(parse_checksum(s.get<std::string>(), where, path));
  if (c.rect.dims.size() != t.shape.size()) bad(where, path + ".rect", "has the wrong number of dimensions");
  for (size_t d = 0; d < t.shape.size(); ++d)
    if (c.rect.dims[d].begin < 0 || c.rect.dims[d].begin >= c.rect.dims[d].end || c.rect.dims[d].end > t.shape[d])
      bad(where, path + ".rect", "dimension " + std::to_string(d) + " is outside " + shape_str(t.shape));
  if (c.bytes != c.rect.numel() * dtype_size(t.dtype)) bad(where, path + ".bytes", "is not numel(rect) * dtype size");
  const int64_t blocks = c.block_rows < 1 ? -1 : (c.rows() + c.block_rows - 1) / c.block_rows;
  if (blocks != static_cast<int64_t>(c.checksums.size()))
    bad(where, path + ".checksums", "does not hold one checksum per block of block_rows rows");
  if (j.at("file").get<std::string>() != rank_file_name(c.rank)) bad(where, path + ".file", "is not rank<rank>.safetensors");
  return c;
}

}  // namespace

std::string rank_file_name(int rank) { return "rank" + std::to_string(rank) + ".safetensors"; }

const TensorMeta* Metadata::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

mesh::Placement parse_placement(const std::string& s) {
  if (s == "Replicate") return mesh::Placement::replicate();
  if (s == "Partial(sum)") return mesh::Placement::partial();
  long long a = 0, b = 0;
  char tail = 0;
  if (std::sscanf(s.c_str(), "StridedShard(%lld, %lld%c", &a, &b, &tail) == 3 && tail == ')')
    return mesh::Placement::strided_shard(a, b);
  if (std::sscanf(s.c_str(), "Shard(%lld%c", &a, &tail) == 2 && tail == ')') return mesh::Placement::shard(a);
  throw Error("unknown placement '" + s + "'");
}

ordered_json metadata_to_json(const Metadata& md) {
  const LayoutConfig& m = md.mesh;
  ordered_json j;
  j["format"] = "parity-checkpoint";
  j["version"] = md.version;
  j["step"] = md.step;
  j["data_position"] = md.data_position;
  j["model"] = md.model;
  j["mesh"] = {{"world", m.world}, {"dp_replicate", m.dp_replicate}, {"dp_shard", m.dp_shard},
               {"tp", m.tp},       {"ep", m.ep},                     {"etp", m.etp}};
  ordered_json files = ordered_json::array();
  for (const auto& f : md.files)
    files.push_back({{"rank", f.rank}, {"file", f.file}, {"bytes", f.bytes}, {"checksum", checksum_str(f.checksum)}});
  j["files"] = files;
  ordered_json tensors = ordered_json::array();
  for (const auto& t : md.tensors) {
    ordered_json chunks = ordered_json::array();
    for (const auto& c : t.chunks) chunks.push_back(chunk_json(c));
    tensors.push_back({{"name", t.name},
                       {"shape", t.shape},
                       {"dtype", std::string(dtype_name(t.dtype))},
                       {"layout", layout_json(t.layout, md.mesh)},
                       {"chunks", chunks}});
  }
  j["tensors"] = tensors;
  return j;
}

namespace {

TensorMeta tensor_from(const json& j, const std::string& where, const std::string& path) {
  TensorMeta t;
  t.name = j.at("name").get<std::string>();
  t.shape = j.at("shape").get<Shape>();
  t.dtype = parse_dtype(j.at("dtype").get<std::string>());
  const json& l = j.at("layout");
  const std::string view = l.at("view").get<std::string>();
  if (view != "dense" && view != "expert") bad(where, path + ".layout.view", "must be dense or expert");
  t.layout.view = view == "dense" ? mesh::View::dense : mesh::View::expert;
  for (const auto& p : l.at("placements")) t.layout.placements.push_back(parse_placement(p.get<std::string>()));
  const auto& chunks = j.at("chunks");
  for (size_t i = 0; i < chunks.size(); ++i)
    t.chunks.push_back(chunk_from(chunks[i], t, where, path + ".chunks[" + std::to_string(i) + "]"));
  return t;
}

void check_consistent(const Metadata& md, const std::string& where) {
  for (size_t i = 0; i < md.files.size(); ++i)
    if (md.files[i].rank != static_cast<int>(i) || md.files[i].file != rank_file_name(md.files[i].rank))
      bad(where, "$.files[" + std::to_string(i) + "]", "must be rank" + std::to_string(i) + ".safetensors");
  if (static_cast<int64_t>(md.files.size()) != md.mesh.world) bad(where, "$.files", "must list one file per rank");
  for (const auto& t : md.tensors) {
    int64_t covered = 0;
    for (const auto& c : t.chunks) {
      if (c.rank < 0 || c.rank >= static_cast<int>(md.files.size()))
        bad(where, "tensor '" + t.name + "'", "chunk of rank " + std::to_string(c.rank) + " outside the world");
      if (c.offset < 0 || c.offset + c.bytes > md.files[static_cast<size_t>(c.rank)].bytes)
        bad(where, "tensor '" + t.name + "' chunk " + c.key, "lies outside " + rank_file_name(c.rank));
      covered += c.rect.numel();
    }
    if (covered != numel(t.shape))
      bad(where, "tensor '" + t.name + "'", "chunks hold " + std::to_string(covered) + " elements of " +
                                                 std::to_string(numel(t.shape)));
  }
}

}  // namespace

Metadata metadata_from_json(const json& j, const std::string& where) {
  Metadata md;
  try {
    if (j.at("format").get<std::string>() != "parity-checkpoint") bad(where, "$.format", "is not parity-checkpoint");
    md.version = j.at("version").get<int>();
    if (md.version != kFormatVersion)
      bad(where, "$.version", "is " + std::to_string(md.version) + ", this build reads version " +
                                  std::to_string(kFormatVersion));
    md.step = j.at("step").get<int64_t>();
    md.data_position = j.at("data_position").get<int64_t>();
    md.model = j.at("model");
    const json& m = j.at("mesh");
    md.mesh.world = m.at("world").get<int64_t>();
    md.mesh.dp_replicate = m.at("dp_replicate").get<int64_t>();
    md.mesh.dp_shard = m.at("dp_shard").get<int64_t>();
    md.mesh.tp = m.at("tp").get<int64_t>();
    md.mesh.ep = m.at("ep").get<int64_t>();
    md.mesh.etp = m.at("etp").get<int64_t>();
    const json& files = j.at("files");
    for (const auto& f : files)
      md.files.push_back({f.at("rank").get<int>(), f.at("file").get<std::string>(), f.at("bytes").get<int64_t>(),
                          parse_checksum(f.at("checksum").get<std::string>(), where, "$.files")});
    const json& tensors = j.at("tensors");
    for (size_t i = 0; i < tensors.size(); ++i)
      md.tensors.push_back(tensor_from(tensors[i], where, "$.tensors[" + std::to_string(i) + "]"));
  } catch (const json::exception& e) {
    throw IoError(where + ": malformed metadata: " + e.what());
  } catch (const IoError&) {
    throw;
  } catch (const Error& e) {
    throw IoError(where + ": " + e.what());
  }
  check_consistent(md, where);
  return md;
}

Metadata read_metadata(const std::string& dir) {
  const std::string path = dir + "/" + kMetadataFile;
  std::ifstream in(path);
  if (!in) throw IoError(path + ": missing (cannot open: " + std::strerror(errno) + ")");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw IoError(path + ": not valid JSON: " + e.what());
  }
  return metadata_from_json(j, path);
}

void write_file_synced(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(path + ": cannot create: " + std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      throw IoError(path + ": write failed: " + std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  const bool ok = ::fsync(fd) == 0;
  const int e = errno;
  ::close(fd);
  if (!ok) throw IoError(path + ": fsync failed: " + std::strerror(e));
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError(dir + ": cannot open directory: " + std::strerror(errno));
  const bool ok = ::fsync(fd) == 0;
  const int e = errno;
  ::close(fd);
  if (!ok && e != EINVAL) throw IoError(dir + ": fsync failed: " + std::strerror(e));
}

void write_metadata(const std::string& dir, const Metadata& md) {
  write_file_synced(dir + "/" + kMetadataFile, metadata_to_json(md).dump(1) + "\n");
}

std::map<std::string, HeaderEntry> read_safetensors_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": missing (cannot open: " + std::strerror(errno) + ")");
  unsigned char len8[8];
  if (!in.read(reinterpret_cast<char*>(len8), 8)) throw IoError(path + ": truncated (no safetensors header)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len8[i];
  if (n > (uint64_t{1} << 30)) throw IoError(path + ": header length " + std::to_string(n) + " is not plausible");
  std::string text(n, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(n))) throw IoError(path + ": truncated header");
  std::map<std::string, HeaderEntry> out;
  try {
    const json h = json::parse(text);
    for (const auto& [name, e] : h.items()) {
      if (name == "__metadata__") continue;
      HeaderEntry x;
      x.dtype = e.at("dtype").get<std::string>();
      x.shape = e.at("shape").get<Shape>();
      const int64_t b = e.at("data_offsets").at(0).get<int64_t>(), en = e.at("data_offsets").at(1).get<int64_t>();
      x.offset = 8 + static_cast<int64_t>(n) + b;
      x.bytes = en - b;
      out[name] = x;
    }
  } catch (const json::exception& e) {
    throw IoError(path + ": malformed safetensors header: " + e.what());
  }
  return out;
}

}  // namespace parity::ckpt
