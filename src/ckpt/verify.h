// The one check of a checkpoint, shared by every reader: ckpt::load, `parity ckpt inspect`,
// `export` and `diff` (docs/ckpt.md, "What a reader verifies").
//
//   1. metadata.json parses, is format version 2 and carries its own checksum, which must be
//      the CRC-32C of its canonical content (an edit of metadata.json alone is caught);
//   2. every rank file: its size and the CRC-32C of its header against metadata.json, and
//      every record metadata.json holds about it (the save's step, data position, mesh and
//      model config; per chunk: tensor, key, rectangle, dtype, shape, offset, size, block
//      checksums) against what the file's own header records (an edit of metadata.json
//      that also fixes its checksum is caught: swapped chunk records, keys, step);
//   3. block checksums: every block of every chunk at Depth::everything; a load verifies
//      each block it reads (block_problem) instead, so it reads only what it needs.
// Any disagreement is a damaged checkpoint: an IoError (exit 3) naming the file, the tensor
// and chunk where there is one, and what disagrees.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/format.h"

namespace parity::ckpt {

enum class Depth {
  headers,     // 1 and 2: a few KiB per file (what every load does)
  everything,  // and 3 over every byte, with each file's whole CRC-32C (inspect)
};

struct CheckReport {
  std::string dir;  // the directory read (DIR, or DIR.old after an interrupted commit)
  bool have_metadata = false;
  Metadata md;
  std::vector<std::string> problems;  // each names the file (and tensor, chunk); empty: verified
  bool ok() const { return have_metadata && problems.empty(); }
};

// Never throws for a damaged checkpoint: every problem found is in the report, the rank
// files' first, then metadata.json's own checksum.
CheckReport check_checkpoint(const std::string& dir, Depth depth);

// A checkpoint that passed check_checkpoint: the only way a reader gets metadata to load from.
class Checkpoint {
 public:
  // Throws IoError (the first problem, and how many more) when check_checkpoint finds any.
  static Checkpoint open(const std::string& dir, Depth depth = Depth::headers);
  const std::string& dir() const { return dir_; }
  const Metadata& md() const { return md_; }

 private:
  Checkpoint(std::string dir, Metadata md) : dir_(std::move(dir)), md_(std::move(md)) {}
  std::string dir_;
  Metadata md_;
};

// "" when block `b` of chunk `c` (its bytes at `p`) has the CRC-32C that metadata.json (and
// the file's header) records; else the problem, naming file, tensor, chunk, rows and bytes.
std::string block_problem(const std::string& path, const TensorMeta& t, const ChunkMeta& c, int64_t b,
                          const unsigned char* p);

}  // namespace parity::ckpt
