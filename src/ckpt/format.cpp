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
#include "core/files.h"
#include "core/output.h"
#include "core/safetensors.h"
#include "core/text.h"

namespace parity::ckpt {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& where, const std::string& path, const std::string& what) {
  throw IoError(where + ": " + path + ": " + what);
}

// Runs a parser's body so that whatever it meets leaves as an IoError naming `where` (a bad
// file is an I/O verdict, exit 1): nlohmann's exceptions as "<where>: <malformed>: <what>",
// a typed Error with its message, an IoError (bad()'s, already named) as it is.
template <class Body>
void as_io_error(const std::string& where, const char* malformed, Body&& body) {
  try {
    body();
  } catch (const json::exception& e) {
    throw IoError(where + ": " + malformed + ": " + e.what());
  } catch (const IoError&) {
    throw;
  } catch (const Error& e) {
    throw IoError(where + ": " + e.what());
  }
}

uint32_t parse_checksum(const std::string& s, const std::string& where, const std::string& path) {
  if (s.rfind("crc32c:", 0) != 0 || s.size() != 15 ||
      s.find_first_not_of("0123456789abcdefABCDEF", 7) != std::string::npos)
    bad(where, path, "not a crc32c checksum: '" + printable(s, 40) + "'");  // stoul would throw std::invalid_argument
  return static_cast<uint32_t>(std::stoul(s.substr(7), nullptr, 16));
}

ordered_json layout_json(const mesh::TensorLayout& l, const LayoutConfig& cfg) {
  const mesh::Mesh m(cfg);
  ordered_json p = ordered_json::array(), dims = ordered_json::array();
  for (const auto& x : l.placements) p.push_back(mesh::placement_str(x));
  for (auto d : mesh::view_dims(l.view)) dims.push_back(std::string(mesh::dim_name(d)));
  ordered_json out = {{"view", std::string(mesh::view_name(l.view))}, {"placements", p}, {"mesh_dims", dims},
                      {"mesh", m.sizes(l.view)}};
  if (!l.stages.empty()) out["stages"] = l.stages;  // pipeline parallel: the stages holding it
  return out;
}

// The checkpoint's layout record is mesh/layout_config.h's codec: "cp" and "order" only where
// they are not the default, so checkpoints without them are byte-for-byte those written
// before either existed, and read back the same.
ordered_json mesh_json(const LayoutConfig& m) { return layout_json(m, LayoutRecord::checkpoint); }

LayoutConfig mesh_from(const json& m) { return read_layout(m, "$.mesh", LayoutRecord::checkpoint); }

mesh::TensorLayout layout_from(const json& l, const std::string& where, const std::string& path) {
  mesh::TensorLayout out;
  const std::string view = l.at("view").get<std::string>();
  if (view != "dense" && view != "expert") bad(where, path + ".layout.view", "must be dense or expert");
  out.view = view == "dense" ? mesh::View::dense : mesh::View::expert;
  for (const auto& p : l.at("placements")) out.placements.push_back(parse_placement(p.get<std::string>()));
  if (l.contains("stages")) out.stages = l.at("stages").get<std::vector<int64_t>>();
  // A dense layout saved before the cp dimension existed has (dp_replicate, dp_shard, tp):
  // the same layout with cp (size 1) replicated.
  if (out.view == mesh::View::dense && out.placements.size() == 3 && l.contains("mesh_dims") &&
      l.at("mesh_dims").size() == 3)
    out.placements.insert(out.placements.begin() + 2, mesh::Placement::replicate());
  return out;
}

ordered_json rect_json(const Rect& r) {
  ordered_json out = ordered_json::array();
  for (const auto& d : r.dims) out.push_back({d.begin, d.end});
  return out;
}

Rect rect_from(const json& j) {
  Rect r;
  for (const auto& d : j) r.dims.push_back({d.at(0).get<int64_t>(), d.at(1).get<int64_t>()});
  return r;
}

ordered_json checksums_json(const std::vector<uint32_t>& v) {
  ordered_json out = ordered_json::array();
  for (uint32_t s : v) out.push_back(checksum_str(s));
  return out;
}

ordered_json chunk_json(const ChunkMeta& c) {
  return {{"rank", c.rank},     {"rect", rect_json(c.rect)}, {"file", rank_file_name(c.rank)},
          {"key", c.key},       {"offset", c.offset},        {"bytes", c.bytes},
          {"block_rows", c.block_rows}, {"checksums", checksums_json(c.checksums)}};
}

ChunkMeta chunk_from(const json& j, const TensorMeta& t, const std::string& where, const std::string& path) {
  ChunkMeta c;
  c.rank = j.at("rank").get<int>();
  c.rect = rect_from(j.at("rect"));
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
  if (j.at("file").get<std::string>() != rank_file_name(c.rank))
    bad(where, path + ".file", "is not rank<rank>.safetensors");
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
  j["checksum"] = "";  // set below, over everything else
  j["step"] = md.step;
  j["data_position"] = md.data_position;
  j["model"] = md.model;
  if (!md.run.is_null()) j["run"] = md.run;
  j["mesh"] = mesh_json(m);
  ordered_json files = ordered_json::array();
  for (const auto& f : md.files)
    files.push_back({{"rank", f.rank},
                     {"file", f.file},
                     {"bytes", f.bytes},
                     {"checksum", checksum_str(f.checksum)},
                     {"header_checksum", checksum_str(f.header_checksum)}});
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
  j["checksum"] = checksum_str(metadata_checksum(json::parse(j.dump())));
  return j;
}

uint32_t json_checksum(const json& j) {
  const std::string s = j.dump();
  return crc32c(s.data(), s.size());
}

uint32_t metadata_checksum(const json& doc) {
  if (!doc.is_object() || !doc.contains("checksum")) return json_checksum(doc);
  json rest = doc;
  rest.erase("checksum");
  return json_checksum(rest);
}

namespace {

TensorMeta tensor_from(const json& j, const std::string& where, const std::string& path) {
  TensorMeta t;
  t.name = j.at("name").get<std::string>();
  t.shape = j.at("shape").get<Shape>();
  t.dtype = parse_dtype(j.at("dtype").get<std::string>());
  t.layout = layout_from(j.at("layout"), where, path);
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
  as_io_error(where, "malformed metadata", [&] {
    if (j.at("format").get<std::string>() != "parity-checkpoint") bad(where, "$.format", "is not parity-checkpoint");
    md.version = j.at("version").get<int>();
    if (md.version < kFormatVersion)
      bad(where, "$.version", "is " + std::to_string(md.version) + ", this build reads version " +
                                  std::to_string(kFormatVersion) +
                                  " only: an older checkpoint has no checksum of metadata.json and no chunk records "
                                  "in its rank files to verify it against; save it again");
    if (md.version != kFormatVersion)
      bad(where, "$.version", "is " + std::to_string(md.version) + ", this build reads version " +
                                  std::to_string(kFormatVersion));
    if (!j.contains("checksum")) bad(where, "$.checksum", "missing: metadata.json must carry its own checksum");
    md.checksum = parse_checksum(j.at("checksum").get<std::string>(), where, "$.checksum");
    md.content_checksum = metadata_checksum(j);
    md.step = j.at("step").get<int64_t>();
    md.data_position = j.at("data_position").get<int64_t>();
    md.model = j.at("model");
    if (j.contains("run")) md.run = j.at("run");
    md.mesh = mesh_from(j.at("mesh"));
    const json& files = j.at("files");
    for (const auto& f : files)
      md.files.push_back({f.at("rank").get<int>(), f.at("file").get<std::string>(), f.at("bytes").get<int64_t>(),
                          parse_checksum(f.at("checksum").get<std::string>(), where, "$.files"),
                          parse_checksum(f.at("header_checksum").get<std::string>(), where, "$.files")});
    const json& tensors = j.at("tensors");
    for (size_t i = 0; i < tensors.size(); ++i)
      md.tensors.push_back(tensor_from(tensors[i], where, "$.tensors[" + std::to_string(i) + "]"));
  });
  check_consistent(md, where);
  return md;
}

namespace {

// The first floating-point number in `j`, or nullptr.
const json* first_float(const json& j) {
  if (j.is_number_float()) return &j;
  if (j.is_structured())
    for (const auto& v : j)
      if (const json* f = first_float(v)) return f;
  return nullptr;
}

}  // namespace

Metadata read_metadata(const std::string& dir) {
  const std::string path = dir + "/" + kMetadataFile;
  // A FIFO, a directory, a link to /dev/zero: a damaged checkpoint, never a blocking read.
  const auto read = read_regular_if_exists(path, static_cast<int64_t>(kMetadataLimits.max_bytes),
                                           Blame::damaged_data, "checkpoint metadata");
  if (!read) throw IoError(path + ": missing (cannot open: " + std::strerror(ENOENT) + ")");
  const std::string& text = *read;
  // Before the parser: deep nesting would overflow the stack of the first copy or dump.
  if (const std::string problem = json_limits_problem(text, kMetadataLimits); !problem.empty())
    throw IoError(path + ": refused before parsing: " + problem + " (docs/ckpt.md)");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw IoError(path + ": not valid JSON: " + e.what());
  }
  // nlohmann turns a float into an integer with a plain cast, undefined behaviour beyond the
  // integer's range (1e300 as a rank: found by fuzz_ckpt_metadata under UBSan). The format
  // writes integers everywhere but in the caller's $.model and $.run: any other float is refused here.
  if (j.is_object())
    for (const auto& [key, value] : j.items())
      if (key != "model" && key != "run" && first_float(value) != nullptr)
        throw IoError(path + ": $." + printable(key, 64) + ": holds the number " + first_float(value)->dump() +
                      " where the format writes integers only");
  return metadata_from_json(j, path);
}

void write_file_synced(const std::string& path, const std::string& text) {
  write_file_atomically(path, text, Replace{}, "checkpoint file");  // a fresh temporary directory's
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

RankHeader parse_rank_header(const unsigned char* p, int64_t size, const std::string& path, HeaderJson mode) {
  if (size < 8) throw IoError(path + ": truncated (no safetensors header)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | p[i];
  if (n > (uint64_t{1} << 30)) throw IoError(path + ": header length " + std::to_string(n) + " is not plausible");
  if (static_cast<uint64_t>(size) - 8 < n) throw IoError(path + ": truncated header");
  RankHeader out;
  out.bytes = 8 + static_cast<int64_t>(n);
  out.checksum = crc32c(p, static_cast<size_t>(out.bytes));
  out.text.assign(reinterpret_cast<const char*>(p) + 8, n);
  if (mode == HeaderJson::parse) parse_header_json(out, path);
  return out;
}

void parse_header_json(RankHeader& out, const std::string& path) {
  try {
    const json h = json::parse(out.text);
    for (const auto& [name, e] : h.items()) {
      if (name == "__metadata__") {
        for (const auto& [k, v] : e.items()) out.metadata[k] = v.get<std::string>();
        continue;
      }
      HeaderEntry x;
      x.dtype = e.at("dtype").get<std::string>();
      x.shape = e.at("shape").get<Shape>();
      const int64_t b = e.at("data_offsets").at(0).get<int64_t>(), en = e.at("data_offsets").at(1).get<int64_t>();
      x.offset = out.bytes + b;
      x.bytes = en - b;
      out.entries[name] = x;
    }
  } catch (const json::exception& e) {
    throw IoError(path + ": malformed safetensors header: " + e.what());
  }
}

RankHeader read_rank_header(const std::string& path, HeaderJson mode) {
  const auto f = open_regular_if_exists(path, kMaxRankFileBytes, Blame::damaged_data, "checkpoint rank file");
  if (!f) throw IoError(path + ": missing (cannot open: " + std::strerror(ENOENT) + ")");
  auto read = [&](unsigned char* p, size_t n) {
    size_t done = 0;
    while (done < n) {
      const ssize_t got = ::read(f->fd(), p + done, n - done);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      done += static_cast<size_t>(got);
    }
    return true;
  };
  std::vector<unsigned char> buf(8);
  if (!read(buf.data(), 8)) throw IoError(path + ": truncated (no safetensors header)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | buf[static_cast<size_t>(i)];
  if (n > (uint64_t{1} << 30)) throw IoError(path + ": header length " + std::to_string(n) + " is not plausible");
  if (n > static_cast<uint64_t>(f->size()) - 8) throw IoError(path + ": truncated header");
  buf.resize(8 + n);
  if (!read(buf.data() + 8, static_cast<size_t>(n))) throw IoError(path + ": truncated header");
  return parse_rank_header(buf.data(), static_cast<int64_t>(buf.size()), path, mode);
}

std::map<std::string, std::string> rank_record_metadata(const RankRecordHeader& r) {
  ordered_json tensors = ordered_json::array();
  for (const auto& t : r.tensors) {
    ordered_json chunks = ordered_json::array();
    for (const auto& c : t.chunks)
      chunks.push_back({{"key", c.key},
                        {"rect", rect_json(c.rect)},
                        {"bytes", c.bytes},
                        {"block_rows", c.block_rows},
                        {"checksums", checksums_json(c.checksums)}});
    tensors.push_back({{"name", t.name},
                       {"shape", t.shape},
                       {"dtype", std::string(dtype_name(t.dtype))},
                       {"layout", layout_json(t.layout, r.mesh)},
                       {"chunks", chunks}});
  }
  std::map<std::string, std::string> out{{"format", "parity-checkpoint"},
                                         {"version", std::to_string(kFormatVersion)},
                                         {"rank", std::to_string(r.rank)},
                                         {"mesh", mesh_json(r.mesh).dump()},
                                         {"step", std::to_string(r.step)},
                                         {"data_position", std::to_string(r.data_position)},
                                         {"model", checksum_str(r.model_checksum)},
                                         {"tensors", tensors.dump()}};
  if (r.run_checksum) out["run"] = checksum_str(*r.run_checksum);
  return out;
}

namespace {

TensorMeta record_tensor_from(const json& j, const RankHeader& h, int rank, const std::string& where,
                              const std::string& path) {
  TensorMeta t;
  t.name = j.at("name").get<std::string>();
  t.shape = j.at("shape").get<Shape>();
  t.dtype = parse_dtype(j.at("dtype").get<std::string>());
  t.layout = layout_from(j.at("layout"), where, path);
  for (const auto& x : j.at("chunks")) {
    ChunkMeta c;
    c.rank = rank;
    c.key = x.at("key").get<std::string>();
    c.rect = rect_from(x.at("rect"));
    c.bytes = x.at("bytes").get<int64_t>();
    c.block_rows = x.at("block_rows").get<int64_t>();
    for (const auto& s : x.at("checksums")) c.checksums.push_back(parse_checksum(s.get<std::string>(), where, path));
    const auto e = h.entries.find(c.key);
    if (e == h.entries.end()) bad(where, path, "chunk " + c.key + " has no safetensors entry");
    if (e->second.dtype != safetensors_dtype_name(t.dtype) || e->second.shape != c.rect.shape() ||
        e->second.bytes != c.bytes)
      bad(where, path, "chunk " + c.key + ": the safetensors entry (" + e->second.dtype + " " +
                           shape_str(e->second.shape) + ", " + std::to_string(e->second.bytes) +
                           " bytes) is not the recorded chunk (" + std::string(dtype_name(t.dtype)) + " " +
                           shape_str(c.rect.shape()) + ", " + std::to_string(c.bytes) + " bytes)");
    c.offset = e->second.offset;
    t.chunks.push_back(std::move(c));
  }
  return t;
}

}  // namespace

RankRecordHeader rank_record_from(const RankHeader& h, const std::string& path) {
  const std::string where = path + ": header __metadata__";
  auto get = [&](const std::string& k) -> const std::string& {
    const auto it = h.metadata.find(k);
    if (it == h.metadata.end()) bad(where, k, "missing: not a rank file of a version-2 parity checkpoint");
    return it->second;
  };
  if (get("format") != "parity-checkpoint") bad(where, "format", "is not parity-checkpoint");
  if (get("version") != std::to_string(kFormatVersion))
    bad(where, "version", "is " + get("version") + ", this build reads version " + std::to_string(kFormatVersion));
  RankRecordHeader r;
  // The records hold integers only: a float would reach nlohmann's float-to-int cast
  // (undefined behaviour beyond the range), so any float is refused before it is read.
  auto ints = [&](const std::string& k) {
    json v = json::parse(get(k));
    if (const json* f = first_float(v)) bad(where, k, "holds the number " + f->dump() + " where integers belong");
    return v;
  };
  as_io_error(where, "malformed", [&] {
    r.rank = ints("rank").get<int>();
    r.mesh = mesh_from(ints("mesh"));
    r.step = ints("step").get<int64_t>();
    r.data_position = ints("data_position").get<int64_t>();
    r.model_checksum = parse_checksum(get("model"), where, "model");
    if (h.metadata.count("run")) r.run_checksum = parse_checksum(get("run"), where, "run");
    const json tensors = ints("tensors");
    size_t held = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      r.tensors.push_back(record_tensor_from(tensors[i], h, r.rank, where, "tensors[" + std::to_string(i) + "]"));
      held += r.tensors.back().chunks.size();
    }
    if (held != h.entries.size())
      bad(where, "tensors", "records " + std::to_string(held) + " chunks, the file has " +
                                std::to_string(h.entries.size()) + " entries");
  });
  return r;
}

}  // namespace parity::ckpt
