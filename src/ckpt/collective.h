// Internal to src/ckpt: the few collectives a save or load needs, on top of Communicator.
#pragma once
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace parity::ckpt {

// Runs f on this rank, then every rank learns whether any rank failed. A rank whose f threw
// rethrows its own error; the others throw IoError "checkpoint <what> failed on rank(s) ...".
void agreed(comm::Communicator& world, const std::string& what, const std::function<void()>& f);

// Every rank's string, on every rank (index = group rank).
std::vector<std::string> allgather_strings(comm::Communicator& world, const std::string& mine);

}  // namespace parity::ckpt
