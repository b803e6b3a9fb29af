#include "comm/mpi/mpi_runtime.h"

#include <sched.h>

#include <deque>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace parity::comm::mpi {

namespace {

struct Runtime {
  bool we_initialised = false;
  bool failed = false;
  std::deque<std::string> send_buffers;  // alive until exit: posted sends may still be pending
  ~Runtime() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (we_initialised && !failed && !fin) MPI_Finalize();
  }
};

Runtime& runtime() {
  static Runtime r;
  return r;
}

}  // namespace

void ensure_init() {
  Runtime& r = runtime();
  int init = 0;
  MPI_Initialized(&init);
  if (init) return;
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    throw CommError("MPI_Init_thread failed");
  r.we_initialised = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

void mark_failed() { runtime().failed = true; }

MPI_Comm dup_world() {
  MPI_Comm c;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &c) != MPI_SUCCESS) throw CommError("MPI_Comm_dup failed");
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  return c;
}

void wait(MPI_Request& req, std::chrono::milliseconds timeout) {
  auto start = std::chrono::steady_clock::now();
  for (long spins = 0;; ++spins) {
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) throw CommError("MPI_Test failed");
    if (done) return;
    if ((spins & 63) != 63) continue;
    auto waited = std::chrono::steady_clock::now() - start;
    if (waited > timeout)
      throw CommError("timed out after " + std::to_string(timeout.count()) +
                      " ms waiting for the other members");
    // Oversubscribed runs (more ranks than cores) need the core back quickly.
    if (waited > std::chrono::milliseconds(2)) std::this_thread::sleep_for(std::chrono::microseconds(50));
    else sched_yield();
  }
}

void post_send(MPI_Comm comm, int dest, int tag, const std::string& s) {
  auto& buf = runtime().send_buffers.emplace_back(s);
  MPI_Request req;
  MPI_Isend(buf.data(), static_cast<int>(buf.size()), MPI_CHAR, dest, tag, comm, &req);
  MPI_Request_free(&req);
}

std::optional<std::string> try_recv(MPI_Comm comm, int source, int tag) {
  int flag = 0;
  MPI_Status st;
  MPI_Iprobe(source, tag, comm, &flag, &st);
  if (!flag) return std::nullopt;
  int n = 0;
  MPI_Get_count(&st, MPI_CHAR, &n);
  std::string s(static_cast<size_t>(n), '\0');
  MPI_Recv(s.data(), n, MPI_CHAR, source, tag, comm, MPI_STATUS_IGNORE);
  return s;
}

MessageBoard::MessageBoard(MPI_Comm comm, std::vector<int> members, int me)
    : comm_(comm), members_(std::move(members)), me_(me) {}

void MessageBoard::post(const std::string& note) {
  mark_failed();
  for (size_t r = 0; r < members_.size(); ++r)
    if (static_cast<int>(r) != me_) post_send(comm_, members_[r], kFailTag, note);
}

std::optional<std::string> MessageBoard::read(int r) {
  return try_recv(comm_, members_[static_cast<size_t>(r)], kFailTag);
}

}  // namespace parity::comm::mpi
