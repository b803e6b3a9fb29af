// MPI start-up, shut-down and the helpers the mpi backend and the MPI bootstrap share.
#pragma once
#include <mpi.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/diagnose.h"

namespace parity::comm::mpi {

void ensure_init();        // MPI_Init_thread once; MPI_Finalize at exit unless marked failed
void mark_failed();        // a collective failed: skip MPI_Finalize (it could hang)
MPI_Comm dup_world();      // a private duplicate of MPI_COMM_WORLD

// Polls req until done or timeout; throws CommError("timed out after ...") on timeout.
void wait(MPI_Request& req, std::chrono::milliseconds timeout);

// Notes posted to every member as point-to-point messages (tag kFailTag) on comm, whose
// ranks are world ranks.
class MessageBoard : public FailureBoard {
 public:
  MessageBoard(MPI_Comm comm, std::vector<int> members, int me);
  void post(const std::string& note) override;
  std::optional<std::string> read(int group_rank) override;

 private:
  MPI_Comm comm_;
  std::vector<int> members_;
  int me_;
};

// Receives one message from `source` with `tag` before the deadline, or nothing.
std::optional<std::string> try_recv(MPI_Comm comm, int source, int tag);
// Sends a copy of s without waiting; the buffer is kept alive until process exit.
void post_send(MPI_Comm comm, int dest, int tag, const std::string& s);

constexpr int kFailTag = 7101;
constexpr int kBlobTag = 7102;
constexpr int kHandshakeTag = 7103;

}  // namespace parity::comm::mpi
