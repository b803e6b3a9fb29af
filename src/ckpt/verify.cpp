#include "ckpt/verify.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sys/stat.h>

#include "ckpt/checkpoint.h"
#include "ckpt/checksum.h"
#include "core/error.h"
#include "core/files.h"
#include "mesh/layout_config.h"

namespace parity::ckpt {
namespace {

// What metadata.json says is in one rank file: every chunk record naming that rank.
struct Ref {
  const TensorMeta* t;
  const ChunkMeta* c;
};

std::string sums_str(const std::vector<uint32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + checksum_str(v[i]);
  return s;
}

// The fields on which metadata.json (a) and the file's header (b) disagree.
class Disagreement {
 public:
  template <class T, class F> void field(const char* name, const T& a, const T& b, F str) {
    if (a != b) differs(name, str(a), str(b));
  }
  // a field already found to differ, its two values in words
  void differs(const std::string& name, const std::string& a, const std::string& b) {
    out_ += (out_.empty() ? "" : ", ") + name + " (metadata.json " + a + ", file " + b + ")";
  }
  void field(const char* name, int64_t a, int64_t b) {
    field(name, a, b, [](int64_t x) { return std::to_string(x); });
  }
  bool empty() const { return out_.empty(); }
  // "<what>: metadata.json disagrees with the file's header on f (metadata.json A, file B), ..."
  std::string message(const std::string& what) const {
    return what + ": metadata.json disagrees with the file's header on " + out_;
  }

 private:
  std::string out_;
};

void check_identity(std::vector<std::string>& problems, const std::string& path, const Metadata& md, int rank,
                    const RankRecordHeader& h) {
  Disagreement d;
  d.field("rank", rank, h.rank);
  d.field("step", md.step, h.step);
  d.field("data_position", md.data_position, h.data_position);
  // every key of the checkpoint's mesh record (each degree of the table, pp_layers, order)
  for (const FieldDifference& f : mesh_differences(md.mesh, h.mesh)) d.differs("mesh." + f.key, f.a, f.b);
  d.field("model (checksum)", json_checksum(md.model), h.model_checksum, checksum_str);
  auto sum = [](std::optional<uint32_t> c) { return c ? checksum_str(*c) : std::string("none"); };
  d.field("run (checksum)", md.run.is_null() ? std::nullopt : std::optional<uint32_t>(json_checksum(md.run)),
          h.run_checksum, sum);
  if (!d.empty()) problems.push_back(d.message(path));
}

// One chunk record of metadata.json against the file's own record of the same key.
void check_record(std::vector<std::string>& problems, const std::string& what, const Ref& m, const TensorMeta& ft,
                  const ChunkMeta& fc) {
  Disagreement d;
  d.field("tensor", m.t->name, ft.name, [](const std::string& s) { return "'" + s + "'"; });
  d.field("rect", m.c->rect, fc.rect, rect_str);
  d.field("dtype", m.t->dtype, ft.dtype, [](DType x) { return std::string(dtype_name(x)); });
  d.field("tensor shape", m.t->shape, ft.shape, shape_str);
  d.field("layout", m.t->layout, ft.layout, mesh::layout_str);
  d.field("offset", m.c->offset, fc.offset);
  d.field("bytes", m.c->bytes, fc.bytes);
  d.field("block_rows", m.c->block_rows, fc.block_rows);
  d.field("block checksums", m.c->checksums, fc.checksums, sums_str);
  if (!d.empty()) problems.push_back(d.message(what));
}

// Every record metadata.json holds about the file at `path` against its header; with the
// file's bytes (Depth::everything), every block's checksum too.
void check_chunks(std::vector<std::string>& problems, const std::string& path, const std::vector<Ref>& refs,
                  const RankRecordHeader& h, const std::vector<unsigned char>* bytes) {
  std::map<std::string, std::pair<const TensorMeta*, const ChunkMeta*>> held;
  for (const auto& t : h.tensors)
    for (const auto& c : t.chunks) held[c.key] = {&t, &c};
  std::map<std::string, int> seen;
  for (const Ref& m : refs) {
    const std::string what = path + ": tensor '" + m.t->name + "' chunk " + m.c->key;
    const auto it = held.find(m.c->key);
    if (it == held.end()) {
      problems.push_back(what + ": not in the file (its header records no chunk " + m.c->key + ")");
      continue;
    }
    if (seen[m.c->key]++ > 0) {
      problems.push_back(what + ": listed again in metadata.json (a chunk is recorded once)");
      continue;
    }
    const size_t before = problems.size();
    check_record(problems, what, m, *it->second.first, *it->second.second);
    if (!bytes || problems.size() != before) continue;
    const ChunkMeta& c = *m.c;
    if (c.offset + c.bytes > static_cast<int64_t>(bytes->size())) {
      problems.push_back(what + ": lies past the end of the file (truncated)");
      continue;
    }
    for (int64_t b = 0; b * c.block_rows < c.rows(); ++b)
      if (std::string p = block_problem(path, *m.t, c, b, bytes->data() + c.offset + b * c.block_rows * c.row_bytes());
          !p.empty())
        problems.push_back(p);
  }
  for (const auto& [key, tc] : held)
    if (!seen.count(key))
      problems.push_back(path + ": tensor '" + tc.first->name + "' chunk " + key +
                         ": in the file but not in metadata.json");
}

std::string needs(const std::vector<Ref>& refs) {
  return refs.empty() ? "" : " (tensor '" + refs.front().t->name + "' needs it)";
}

// The file's header, unparsed (its checksum is compared before its JSON is trusted): read
// alone (Depth::headers) or from the whole file, whose size and CRC-32C are checked on the way
// (Depth::everything). False when nothing more can be checked.
bool read_file(std::vector<std::string>& problems, const std::string& path, const FileMeta& f,
               const std::vector<Ref>& refs, Depth depth, RankHeader& h, std::vector<unsigned char>& bytes) {
  // A FIFO, a directory, a link to /dev/zero in place of a rank file: a damaged checkpoint,
  // named as what it is, never a read that blocks or never ends (core/files.h).
  const std::string why = regular_file_problem(path, kMaxRankFileBytes);
  if (why == "is missing") {
    problems.push_back(path + ": missing" + needs(refs) + ": " + std::strerror(ENOENT));
    return false;
  }
  if (!why.empty()) {
    problems.push_back(path + ": checkpoint rank file " + why + needs(refs));
    return false;
  }
  struct stat st{};
  ::stat(path.c_str(), &st);
  const int64_t size = st.st_size;
  if (size != f.bytes)
    problems.push_back(path + ": " + (size < f.bytes ? "truncated" : "wrong size") + ": " + std::to_string(size) +
                       " bytes, metadata.json says " + std::to_string(f.bytes) + needs(refs));
  try {
    if (depth == Depth::headers) {
      h = read_rank_header(path, HeaderJson::skip);
      return true;
    }
    const std::string all = read_regular(path, kMaxRankFileBytes, Blame::damaged_data, "checkpoint rank file");
    bytes.assign(all.begin(), all.end());
    if (size == f.bytes)
      if (const uint32_t got = crc32c(bytes.data(), bytes.size()); got != f.checksum)
        problems.push_back(path + ": file checksum mismatch: metadata.json says " + checksum_str(f.checksum) +
                           ", read " + checksum_str(got));
    h = parse_rank_header(bytes.data(), static_cast<int64_t>(bytes.size()), path, HeaderJson::skip);
    return true;
  } catch (const Error& e) {
    problems.push_back(e.what());
    return false;
  }
}

void check_file(CheckReport& rep, const FileMeta& f, const std::vector<Ref>& refs, Depth depth) {
  const std::string path = rep.dir + "/" + f.file;
  RankHeader h;
  std::vector<unsigned char> bytes;
  if (!read_file(rep.problems, path, f, refs, depth, h, bytes)) return;
  if (h.checksum != f.header_checksum)
    return rep.problems.push_back(path + ": header checksum mismatch: metadata.json says " +
                                  checksum_str(f.header_checksum) + ", read " + checksum_str(h.checksum) +
                                  " (the file's header is damaged, or not this checkpoint's)");
  RankRecordHeader rec;
  try {
    parse_header_json(h, path);
    rec = rank_record_from(h, path);
  } catch (const Error& e) {
    return rep.problems.push_back(e.what());
  }
  check_identity(rep.problems, path, rep.md, f.rank, rec);
  check_chunks(rep.problems, path, refs, rec, depth == Depth::everything ? &bytes : nullptr);
}

}  // namespace

std::string block_problem(const std::string& path, const TensorMeta& t, const ChunkMeta& c, int64_t b,
                          const unsigned char* p) {
  const int64_t rb = c.row_bytes(), r = b * c.block_rows, n = std::min(c.block_rows, c.rows() - r);
  const uint32_t want = c.checksums.at(static_cast<size_t>(b));
  const uint32_t got = crc32c(p, static_cast<size_t>(n * rb));
  if (got == want) return "";
  return path + ": checksum mismatch in tensor '" + t.name + "' (chunk " + c.key + ", rows [" + std::to_string(r) +
         ", " + std::to_string(r + n) + "), bytes [" + std::to_string(c.offset + r * rb) + ", " +
         std::to_string(c.offset + (r + n) * rb) + ")): metadata.json says " + checksum_str(want) + ", read " +
         checksum_str(got);
}

CheckReport check_checkpoint(const std::string& dir, Depth depth) {
  CheckReport rep;
  try {
    rep.dir = resolve(dir);
    rep.md = read_metadata(rep.dir);
    rep.have_metadata = true;
  } catch (const Error& e) {
    if (rep.dir.empty()) rep.dir = dir;
    rep.problems.push_back(e.what());
    return rep;
  }
  std::vector<std::vector<Ref>> refs(rep.md.files.size());  // per rank (check_consistent: ranks are in range)
  for (const auto& t : rep.md.tensors)
    for (const auto& c : t.chunks) refs[static_cast<size_t>(c.rank)].push_back({&t, &c});
  for (const auto& f : rep.md.files) check_file(rep, f, refs[static_cast<size_t>(f.rank)], depth);
  if (rep.md.checksum != rep.md.content_checksum)
    rep.problems.push_back(rep.dir + "/" + kMetadataFile + ": checksum mismatch: it says " +
                           checksum_str(rep.md.checksum) + ", its content hashes to " +
                           checksum_str(rep.md.content_checksum) + " (edited after the save)");
  return rep;
}

Checkpoint Checkpoint::open(const std::string& dir, Depth depth) {
  CheckReport rep = check_checkpoint(dir, depth);
  if (rep.ok()) return Checkpoint(std::move(rep.dir), std::move(rep.md));
  std::string msg = rep.problems.front();
  if (rep.problems.size() > 1)
    msg += " (and " + std::to_string(rep.problems.size() - 1) + " more problem(s): `parity ckpt inspect " + dir +
           "` lists every one)";
  throw IoError(msg);
}

}  // namespace parity::ckpt
