#include "ckpt/inspect.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "ckpt/checksum.h"
#include "core/error.h"
#include "core/safetensors.h"

namespace parity::ckpt {
namespace {

std::string human(int64_t bytes) {
  char buf[32];
  if (bytes >= (int64_t{1} << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  else if (bytes >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

std::string rect_str(const Rect& r) {
  std::string s = "[";
  for (size_t d = 0; d < r.dims.size(); ++d)
    s += (d ? ", " : "") + std::to_string(r.dims[d].begin) + ":" + std::to_string(r.dims[d].end);
  return s + "]";
}

void check_chunk(InspectReport& rep, const std::string& path, const std::vector<unsigned char>& bytes,
                 const std::map<std::string, HeaderEntry>& header, const TensorMeta& t, const ChunkMeta& c) {
  const std::string what = path + ": tensor '" + t.name + "' chunk " + c.key;
  const auto it = header.find(c.key);
  if (it == header.end()) return rep.problems.push_back(what + ": not in the file's safetensors header");
  const HeaderEntry& h = it->second;
  if (h.offset != c.offset || h.bytes != c.bytes || h.shape != c.rect.shape())
    return rep.problems.push_back(what + ": the file's header disagrees with metadata.json (offset, size or shape)");
  if (h.dtype != safetensors_dtype_name(t.dtype))
    return rep.problems.push_back(what + ": stored as " + h.dtype + ", metadata.json says " +
                                  std::string(dtype_name(t.dtype)));
  if (c.offset + c.bytes > static_cast<int64_t>(bytes.size()))
    return rep.problems.push_back(what + ": lies past the end of the file (truncated)");
  const int64_t rb = c.row_bytes();
  for (int64_t r = 0, b = 0; r < c.rows(); r += c.block_rows, ++b) {
    const int64_t n = std::min(c.block_rows, c.rows() - r) * rb;
    const uint32_t got = crc32c(bytes.data() + c.offset + r * rb, static_cast<size_t>(n));
    if (got != c.checksums[static_cast<size_t>(b)])
      rep.problems.push_back(what + ": checksum mismatch in rows [" + std::to_string(r) + ", " +
                             std::to_string(std::min(c.rows(), r + c.block_rows)) + "): metadata.json says " +
                             checksum_str(c.checksums[static_cast<size_t>(b)]) + ", read " + checksum_str(got));
  }
}

void check_file(InspectReport& rep, const FileMeta& f) {
  const std::string path = rep.dir + "/" + f.file;
  std::ifstream in(path, std::ios::binary);
  if (!in) return rep.problems.push_back(path + ": missing");
  const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (static_cast<int64_t>(bytes.size()) != f.bytes)
    rep.problems.push_back(path + ": " + (static_cast<int64_t>(bytes.size()) < f.bytes ? "truncated" : "wrong size") +
                           ": " + std::to_string(bytes.size()) + " bytes, metadata.json says " +
                           std::to_string(f.bytes));
  else if (const uint32_t got = crc32c(bytes.data(), bytes.size()); got != f.checksum)
    rep.problems.push_back(path + ": file checksum mismatch: metadata.json says " + checksum_str(f.checksum) +
                           ", read " + checksum_str(got));
  std::map<std::string, HeaderEntry> header;
  try {
    header = read_safetensors_header(path);
  } catch (const Error& e) {
    return rep.problems.push_back(e.what());
  }
  for (const auto& t : rep.md.tensors)
    for (const auto& c : t.chunks)
      if (c.rank == f.rank) check_chunk(rep, path, bytes, header, t, c);
}

}  // namespace

InspectReport inspect(const std::string& dir) {
  InspectReport rep;
  try {
    rep.dir = resolve(dir);
    rep.md = read_metadata(rep.dir);
    rep.have_metadata = true;
  } catch (const Error& e) {
    rep.dir = dir;
    rep.problems.push_back(e.what());
    return rep;
  }
  for (const auto& f : rep.md.files) check_file(rep, f);
  return rep;
}

std::string format_report(const InspectReport& r, bool verbose) {
  std::ostringstream o;
  o << "checkpoint " << r.dir << "\n";
  if (r.have_metadata) {
    const Metadata& md = r.md;
    const LayoutConfig& m = md.mesh;
    o << "  format version " << md.version << ", step " << md.step << ", data position " << md.data_position << "\n";
    o << "  saved on world " << m.world << " (dp_replicate " << m.dp_replicate << ", dp_shard " << m.dp_shard
      << ", tp " << m.tp << ", ep " << m.ep << ", etp " << m.etp << ")\n";
    o << "  model " << md.model.dump() << "\n";
    int64_t total = 0;
    o << "  files:\n";
    for (const auto& f : md.files) {
      char line[160];
      std::snprintf(line, sizeof line, "    %-22s %12s  %s\n", f.file.c_str(), human(f.bytes).c_str(),
                    checksum_str(f.checksum).c_str());
      o << line;
      total += f.bytes;
    }
    o << "  tensors (" << md.tensors.size() << ", " << human(total) << " in files):\n";
    for (const auto& t : md.tensors) {
      std::map<int, std::pair<int, int64_t>> per_rank;  // rank -> (chunks, bytes)
      for (const auto& c : t.chunks) {
        ++per_rank[c.rank].first;
        per_rank[c.rank].second += c.bytes;
      }
      o << "    " << t.name << "  " << dtype_name(t.dtype) << " " << shape_str(t.shape) << "  "
        << mesh::view_name(t.layout.view) << " " << mesh::layout_str(t.layout) << "\n      chunks per rank:";
      for (const auto& [rank, cb] : per_rank) o << " r" << rank << "=" << cb.first << "(" << human(cb.second) << ")";
      o << "\n";
      if (verbose)
        for (const auto& c : t.chunks) {
          o << "      " << c.key << " rank " << c.rank << " " << rect_str(c.rect) << " @" << c.offset << " +"
            << c.bytes;
          for (uint32_t s : c.checksums) o << " " << checksum_str(s);
          o << "\n";
        }
    }
  }
  for (const auto& p : r.problems) o << "  PROBLEM: " << p << "\n";
  o << (r.ok() ? "verdict: OK (every file and chunk checksum verified)\n"
               : "verdict: CORRUPT (" + std::to_string(r.problems.size()) + " problem(s))\n");
  return o.str();
}

}  // namespace parity::ckpt
