// Exact collective checks run inside every rank of tests/comm/comm_worker.
//
// Inputs are small integers (exact in fp32, fp64 and int64, so any summation order gives
// the same bits); each rank computes the expected output of every collective from the
// formulas of all ranks and counts its wrong elements. The counts of all ranks are summed
// with one allreduce at the end, and rank 0 prints one row per case (nccl-tests style:
// collective, type, count, group, #wrong).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace parity::comm::testing {

struct Tally {
  std::vector<std::string> names;
  std::vector<int64_t> wrong;
  void add(std::string name, int64_t w) {
    names.push_back(std::move(name));
    wrong.push_back(w);
  }
};

// Every collective, every dtype, sizes {0, 1, odd, medium}, on comm (world or a group).
void check_collectives(Communicator& comm, Tally& tally, bool include_large);

// Sub-groups: evens, odds, reversed world, a singleton, the world again (cache).
void check_groups(Communicator& world, Tally& tally);

// Sums every rank's tally over the world; rank 0 prints the table. Returns total #wrong.
int64_t report(Communicator& world, const Tally& tally);

// Random (non-exact) fp32/fp64 data through the collectives whose bits cannot depend on the
// backend (data movement, max/min, rank-ordered reduce_scatter); returns an FNV-1a digest
// of all outputs of all ranks (identical on every rank).
// with_sum: also sum allreduces of non-exact inputs (1009 elements of each dtype, 20000 fp64),
// whose bits depend on the backend's reduction order (equal for gloo's two transports).
uint64_t digest_collectives(Communicator& world, bool with_sum = false);

// RapidCheck properties: alltoallv and allgatherv with random counts including zeros.
// Every rank runs the same cases (same seed, broadcast from rank 0). True when all passed.
bool run_properties(Communicator& world, int cases);

}  // namespace parity::comm::testing
