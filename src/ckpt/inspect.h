// `parity ckpt inspect DIR`: everything metadata.json says, every byte verified (verify.h).
#pragma once
#include <string>
#include <vector>

#include "ckpt/verify.h"

namespace parity::ckpt {

using InspectReport = CheckReport;

// check_checkpoint(dir, Depth::everything): metadata.json's own checksum, then every rank
// file whole: its size and CRC-32C, its header's CRC-32C, every record of metadata.json
// against the file's header, every chunk block's CRC-32C. Never throws for a corrupt
// checkpoint: every problem found is in the report.
InspectReport inspect(const std::string& dir);

// The human-readable report: tensors (shape, dtype, layout saved under), chunks per rank
// with sizes and checksums (all of them with `verbose`), files, and the verdict line.
std::string format_report(const InspectReport& r, bool verbose);

}  // namespace parity::ckpt
