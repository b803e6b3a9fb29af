// The checkpoint format (docs/ckpt.md), version 2: a directory holding
//   rank<r>.safetensors   rank r's chunks, one safetensors entry "<tensor>#<k>" per rectangle;
//                         its header's "__metadata__" records the save (step, data position,
//                         mesh, model config checksum) and every chunk it holds (tensor,
//                         rectangle, size, CRC-32C per block), so that metadata.json can be
//                         checked against the file that holds the bytes
//   metadata.json         written last: version, its own checksum, step, data position, model
//                         config, mesh, every file (size, checksum, header checksum) and every
//                         tensor (global shape, dtype, layout saved under, every rank's chunks:
//                         rectangle, file, byte offset and size in the file, CRC-32C per block)
// Chunks are checksummed per block of rows along dimension 0 (about kBlockBytes each), so a
// reader that needs a few rows of a chunk reads and verifies only the blocks holding them.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/chunks.h"
#include "core/tensor.h"
#include "core/text.h"
#include "mesh/placement.h"
#include "mesh/layout_config.h"

namespace parity::ckpt {

constexpr int kFormatVersion = 2;
constexpr int64_t kBlockBytes = int64_t{1} << 20;
inline const char* const kMetadataFile = "metadata.json";
// The largest rank file a reader opens (core/files.h): far above any real shard, a bound that
// refuses a link to an endless device before a byte is read.
constexpr int64_t kMaxRankFileBytes = int64_t{1} << 40;
// What metadata.json may be, checked before it is parsed (docs/ckpt.md): bytes, nesting, strings.
inline constexpr JsonLimits kMetadataLimits{std::size_t{256} << 20, 64, std::size_t{64} << 10};

std::string rank_file_name(int rank);  // "rank3.safetensors"

struct ChunkMeta {
  int rank = 0;
  Rect rect;
  std::string key;          // the safetensors entry: "<tensor>#<k>"
  int64_t offset = 0;       // of the chunk's first byte in the rank's file
  int64_t bytes = 0;        // numel(rect) * dtype size
  int64_t block_rows = 1;   // rows of dimension 0 per checksum block (a 0-d chunk is one block)
  std::vector<uint32_t> checksums;  // CRC-32C of each block
  int64_t rows() const { return rect.dims.empty() ? 1 : rect.dims[0].size(); }
  int64_t row_bytes() const { return rows() == 0 ? 0 : bytes / rows(); }
};

struct TensorMeta {
  std::string name;
  DType dtype = DType::f64;
  Shape shape;
  mesh::TensorLayout layout;            // the layout it was saved under, on the saved mesh
  std::vector<ChunkMeta> chunks;  // by rank, then local order
};

struct FileMeta {
  int rank = 0;
  std::string file;
  int64_t bytes = 0;
  uint32_t checksum = 0;         // CRC-32C of the whole file
  uint32_t header_checksum = 0;  // CRC-32C of its first 8 + N bytes: the length and the safetensors header
};

struct Metadata {
  int version = kFormatVersion;
  int64_t step = 0, data_position = 0;
  nlohmann::json model;     // the caller's model config, compared on load
  nlohmann::json run;       // the run's identity (CheckpointInfo::run); null when not recorded
  LayoutConfig mesh;        // the degrees it was saved under
  std::vector<FileMeta> files;
  std::vector<TensorMeta> tensors;
  uint32_t checksum = 0;          // "checksum" as read (metadata_to_json writes a fresh one)
  uint32_t content_checksum = 0;  // what the document read hashes to; verify.h compares the two
  const TensorMeta* find(const std::string& name) const;
};

// CRC-32C of `doc` without its top-level "checksum" member, serialized canonically (object
// keys sorted, no whitespace, integers exact, doubles in nlohmann's shortest round-trip form):
// metadata.json's "checksum". Reformatting or reordering the file keeps it; any edit of a
// value, a record or its place in an array changes it.
uint32_t metadata_checksum(const nlohmann::json& doc);
// The same canonical CRC-32C of any JSON value (the model config, recorded in every rank file).
uint32_t json_checksum(const nlohmann::json& j);

nlohmann::ordered_json metadata_to_json(const Metadata& md);
// Throws IoError "<where>: <json path>: <what is wrong>" on a malformed or inconsistent document.
Metadata metadata_from_json(const nlohmann::json& j, const std::string& where);

// Reads and parses DIR/metadata.json (its own checksum computed, not yet compared; nothing
// checked against the rank files: readers use ckpt::Checkpoint::open, verify.h). Throws
// IoError naming the file.
Metadata read_metadata(const std::string& dir);
// Writes DIR/metadata.json and fsyncs it. Throws IoError naming the file.
void write_metadata(const std::string& dir, const Metadata& md);

// "Replicate", "Shard(1)", "StridedShard(0, 2)", "Partial(sum)" back to a Placement.
mesh::Placement parse_placement(const std::string& s);

// The absolute byte offset and size of every entry of a safetensors file, from its header.
struct HeaderEntry {
  std::string dtype;
  Shape shape;
  int64_t offset = 0, bytes = 0;
};
struct RankHeader {
  int64_t bytes = 0;      // 8 + N: the length field and the JSON header (with its padding)
  uint32_t checksum = 0;  // CRC-32C of those bytes (metadata.json's files[r].header_checksum)
  std::string text;       // the N bytes of JSON
  std::map<std::string, HeaderEntry> entries;   // by key   } filled by parse_header_json
  std::map<std::string, std::string> metadata;  // "__metadata__" }
};
enum class HeaderJson { parse, skip };  // skip: to check the checksum before trusting the JSON
// Reads only the header of a safetensors file; parse_rank_header takes the file's first
// `size` (or more) bytes already in memory. Throw IoError naming the file.
RankHeader read_rank_header(const std::string& path, HeaderJson json = HeaderJson::parse);
RankHeader parse_rank_header(const unsigned char* p, int64_t size, const std::string& path,
                             HeaderJson json = HeaderJson::parse);
void parse_header_json(RankHeader& h, const std::string& path);

// What a rank file's header says about itself: the save it belongs to and every chunk it
// holds. Encoded in "__metadata__" at save (rank_record_metadata; chunk offsets are left out:
// the safetensors entries hold them), decoded by readers (rank_record_from), which fill each
// chunk's offset from its entry and check the entry's dtype, shape and size against the record.
struct RankRecordHeader {
  int rank = 0;
  LayoutConfig mesh;
  int64_t step = 0, data_position = 0;
  uint32_t model_checksum = 0;      // json_checksum of the model config
  std::optional<uint32_t> run_checksum;  // json_checksum of the run identity, when recorded
  std::vector<TensorMeta> tensors;  // only the tensors (and chunks) of this file
};
std::map<std::string, std::string> rank_record_metadata(const RankRecordHeader& r);
RankRecordHeader rank_record_from(const RankHeader& h, const std::string& path);

// Writes `text` to `path` (core/output.h AtomicFile: a unique temporary name, fsynced, renamed);
// fsync_dir fsyncs a directory. Throw IoError.
void write_file_synced(const std::string& path, const std::string& text);
void fsync_dir(const std::string& dir);

}  // namespace parity::ckpt
