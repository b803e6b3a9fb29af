// The gloo backend: CPU collectives over Gloo's TCP transport.
//
// Connection: each member creates one TCP pair per peer and publishes the pair addresses
// (with its host and pid) through a Rendezvous (file store or MPI bootstrap); sub-groups
// get their own full mesh on the same device, rendezvous scoped by their member list.
#pragma once
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/rendezvous.h"

namespace parity::comm {

// host: the address the TCP transport binds ("127.0.0.1" for one host).
std::unique_ptr<Communicator> make_gloo_world(int rank, int world_size,
                                              std::shared_ptr<Rendezvous> rendezvous,
                                              const std::string& host,
                                              std::chrono::milliseconds timeout);

}  // namespace parity::comm
