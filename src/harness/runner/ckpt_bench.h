// `parity ckpt bench`: save and load throughput of a synthetic training state of a
// scenario's model at W = 8 (and a reshard to W = 2), beside the disk's raw write (fsync) and
// read speed (docs/ckpt.md). One process plays every rank.
#pragma once
#include <string>

namespace parity {

// `dir` empty: $TMPDIR/parity-ckpt-bench (removed after; refused unless new, empty or a
// checkpoint). Prints the table; returns 0.
int ckpt_bench(const std::string& scenario, std::string dir);

}  // namespace parity
