// Which collective library a run uses: the layout's `backend` (mesh/layout_config.h) and each
// communicator's own (comm/communicator.h).
#pragma once
#include <string_view>

namespace parity::comm {

// sim: every rank a thread of one process (comm/sim/sim_world.h), started by `parity run` itself.
enum class Backend { gloo, mpi, nccl, sim };

std::string_view backend_name(Backend b);   // "gloo", "mpi", "nccl", "sim"
Backend parse_backend(std::string_view s);  // throws ConfigError on an unknown name

// A pointer for a transport call on a buffer of zero elements (Gloo and MPI refuse null ones).
inline void* non_null(const void* p) {
  static char empty[8];
  return p ? const_cast<void*>(p) : empty;
}

}  // namespace parity::comm
