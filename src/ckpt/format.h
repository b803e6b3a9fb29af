// The checkpoint format (docs/ckpt.md): a directory holding
//   rank<r>.safetensors   rank r's chunks, one safetensors entry "<tensor>#<k>" per rectangle
//   metadata.json         written last: version, step, data position, model config, mesh,
//                         every file (size, checksum) and every tensor (global shape, dtype,
//                         layout saved under, every rank's chunks: rectangle, file, byte
//                         offset and size in the file, CRC-32C per block of rows)
// Chunks are checksummed per block of rows along dimension 0 (about kBlockBytes each), so a
// reader that needs a few rows of a chunk reads and verifies only the blocks holding them.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/chunks.h"
#include "core/tensor.h"
#include "mesh/placement.h"
#include "model/config.h"

namespace parity::ckpt {

constexpr int kFormatVersion = 1;
constexpr int64_t kBlockBytes = int64_t{1} << 20;
inline const char* const kMetadataFile = "metadata.json";

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
  mesh::Layout layout;            // the layout it was saved under, on the saved mesh
  std::vector<ChunkMeta> chunks;  // by rank, then local order
};

struct FileMeta {
  int rank = 0;
  std::string file;
  int64_t bytes = 0;
  uint32_t checksum = 0;  // CRC-32C of the whole file
};

struct Metadata {
  int version = kFormatVersion;
  int64_t step = 0, data_position = 0;
  nlohmann::json model;     // the caller's model config, compared on load
  LayoutConfig mesh;        // the degrees it was saved under
  std::vector<FileMeta> files;
  std::vector<TensorMeta> tensors;
  const TensorMeta* find(const std::string& name) const;
};

nlohmann::ordered_json metadata_to_json(const Metadata& md);
// Throws IoError "<where>: <json path>: <what is wrong>" on a malformed or inconsistent document.
Metadata metadata_from_json(const nlohmann::json& j, const std::string& where);

// Reads DIR/metadata.json. Throws IoError naming the file.
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
std::map<std::string, HeaderEntry> read_safetensors_header(const std::string& path);

// Writes `n` bytes to `path` and fsyncs it; fsync_dir fsyncs a directory. Throw IoError.
void write_file_synced(const std::string& path, const std::string& text);
void fsync_dir(const std::string& dir);

}  // namespace parity::ckpt
