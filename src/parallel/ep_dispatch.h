// Expert-parallel token flow (FOLDINGS.md): this rank's (token, slot) assignments travel to
// the EP rank that owns their expert (alltoallv over the EP group); with etp > 1 every ETP
// lane of that rank receives every token sent to any lane of it (allgatherv over ETP), runs
// its chunk of the hidden dimension, and the partial outputs are summed back onto the lane
// that received the token (reduce-scatter over ETP); the outputs return to their source
// (alltoallv) in (token, slot) order. The backward mirrors every step, so each token is
// dispatched once and every partial contribution is summed once.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "model/config.h"
#include "ops/permute.h"
#include "ops/swiglu.h"

namespace parity {

struct EpContext {
  comm::Communicator* ep = nullptr;   // ranks owning the other experts (same etp lane)
  comm::Communicator* etp = nullptr;  // lanes sharing this rank's experts
  int64_t E = 0, El = 0, e0 = 0;      // experts; this rank's E / ep of them, from e0
};

template <class T> struct DispatchCache {
  Permutation perm;                             // of this rank's n*K assignments
  Buffer<T> xg;                            // (n*K, D) grouped by expert, as sent
  std::vector<int64_t> send_rows, recv_rows;    // (ep) rows to / from each EP rank
  std::vector<int64_t> recv_expert_rows;        // (ep, El) from each source, per local expert
  std::vector<int64_t> lane_rows;               // (etp) rows each ETP lane received
  std::vector<int64_t> lane_expert_rows;        // (etp, ep, El)
  std::vector<int64_t> order;                   // expert-grouped row -> row of the ETP-gathered buffer
  std::vector<int64_t> expert_rows;             // (El)
  Buffer<T> xe;                            // (R, D) inputs grouped by local expert
  std::vector<FfnCache<T>> ffn;                 // (El)
  Buffer<T> y;                             // (n*K, D) complete outputs, (token, slot) order
  int64_t rows_moved = 0, rows_floor = 0;       // this forward's flow, there and back
};

template <class T> struct ExpertShard {
  const T *w1, *w3, *w2;  // (El, D, Fl), (El, D, Fl), (El, Fl, D)
  int64_t Fl;
};

// What the token flow cost this rank since the last reset (forward and backward, every
// MoE layer): rows sent to other ranks, the floor (one copy of each token per other
// destination rank, what the token counts require), and the wall time of the flow.
struct DispatchStats {
  int64_t rows_moved = 0, rows_floor = 0, calls = 0;
  double seconds = 0;
};
DispatchStats& dispatch_stats();  // this rank's counters (per thread)

// x (n, D), chosen (n, K) -> cache.y (n*K, D).
template <class T>
void ep_dispatch_forward(const ModelConfig& c, const EpContext& ep, const ExpertShard<T>& w, const T* x,
                         const int64_t* chosen, int64_t n, DispatchCache<T>& cache);
// dy (n*K, D) -> dx (n, D) +=, expert gradients (this rank's shard) +=.
template <class T>
void ep_dispatch_backward(const ModelConfig& c, const EpContext& ep, const ExpertShard<T>& w, const T* dy, int64_t n,
                          const DispatchCache<T>& cache, T* dx, T* dw1, T* dw3, T* dw2);

}  // namespace parity
