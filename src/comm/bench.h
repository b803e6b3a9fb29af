// `parity bench comm`: nccl-tests style bandwidth of every collective, run inside every
// rank of a launched world (the CLI starts the ranks with launch_main and each rank calls
// run_comm_bench on its world communicator; rank 0 prints).
//
// Columns: size (bytes), count (elements), type, redop, time (us, the slowest rank's mean
// per iteration), algbw = size / time, busbw = algbw * the nccl-tests factor
// (allreduce 2(n-1)/n; allgather, reduce_scatter, alltoall (n-1)/n; broadcast 1), #wrong
// (a checked run before the timed ones, exact inputs, summed over ranks).
// The first line gives a one-process memcpy busbw as the ceiling of loopback transports, and
// (when allreduce is timed) the allreduce ceiling of this host for n ranks (below).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace parity::comm {

struct CommBenchOptions {
  int64_t min_bytes = 8;                 // -b
  int64_t max_bytes = int64_t{64} << 20;  // -e
  int factor = 2;                        // -f: size multiplier between rows
  int max_iters = 20;                    // timed iterations for small sizes (fewer for large)
  DType dtype = DType::f32;
  bool json = false;                     // one JSON object per row instead of the table
  std::vector<std::string> ops = {"allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast"};
};

// Collective over `world`; rank 0 writes to `out`. Returns #wrong summed over all ranks.
int64_t run_comm_bench(Communicator& world, const CommBenchOptions& opts, std::ostream& out);

// GB/s of a one-process memcpy of `bytes` (read + write counted once, like busbw).
double memcpy_gbps(int64_t bytes);

// The busbw no one-host allreduce of `ranks` buffers of `bytes` can beat here: the buffers in
// one process, reduced in place by min(ranks, cores) threads, each owning a share of the
// elements: every input read once, every output written once, no copies through a segment,
// no waits. With more ranks than cores the cores, not the transport, bound the collective.
// Best of 3; allocates 2 x ranks x bytes.
double allreduce_ceiling_gbps(int ranks, int64_t bytes);

}  // namespace parity::comm
