// `parity ckpt inspect DIR`: everything metadata.json says, every byte verified.
#pragma once
#include <string>
#include <vector>

#include "ckpt/format.h"

namespace parity::ckpt {

struct InspectReport {
  std::string dir;        // the directory read (DIR, or DIR.old after an interrupted commit)
  bool have_metadata = false;
  Metadata md;
  std::vector<std::string> problems;  // each names the file (and tensor); empty: verified
  bool ok() const { return have_metadata && problems.empty(); }
};

// Reads metadata.json, then every rank file whole: its size and CRC-32C against
// metadata.json, its safetensors header against every chunk (key, dtype, shape, offset,
// size), and every chunk block's CRC-32C. Never throws for a corrupt checkpoint: every
// problem found is in the report.
InspectReport inspect(const std::string& dir);

// The human-readable report: tensors (shape, dtype, layout saved under), chunks per rank
// with sizes and checksums (all of them with `verbose`), files, and the verdict line.
std::string format_report(const InspectReport& r, bool verbose);

}  // namespace parity::ckpt
