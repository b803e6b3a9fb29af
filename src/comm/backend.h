// Which collective library a run uses: the layout's `backend` (mesh/layout_config.h) and each
// communicator's own (comm/communicator.h).
#pragma once
#include <string_view>

namespace parity::comm {

enum class Backend { gloo, mpi, nccl };

std::string_view backend_name(Backend b);   // "gloo", "mpi", "nccl"
Backend parse_backend(std::string_view s);  // throws ConfigError on an unknown name

}  // namespace parity::comm
