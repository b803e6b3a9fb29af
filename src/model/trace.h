// Activation traces (issue 45, docs/verdict.md "The trace"): the tensors a micro-batch's forward
// computes in each block, and in the backward the gradient arriving at each of them, recorded by
// the one-device model (model.cpp) and by every layout's model (parallel/pmodel.cpp) through the
// same calls, one per point: trace::record(Site::ln1, layer, Dir::fwd, ...). A layout's record is
// its shard; where the shard sits in the full tensor is its Placement (this rank's coordinates)
// and the record's own rows and columns (for_each_global_index): the canonical mapping the verdict's
// trace compares with (harness/runner/trace_run.h).
//
// Off (no Recorder active on this thread: every step but the traced one) a record is one load of
// a thread-local pointer and a branch. Threads: a simulated world's ranks are threads, each with
// its own Recorder.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace parity::trace {

// The one list of traced tensors, in the order data flows through a block's forward (enum
// order); the backward records the gradient arriving at each, in the reverse order. embed is
// before layer 0, final_ln and logits after the last layer (layer -1 and `layers` in a key).
// Inside an MoE layer's block (after ln2, before ffn_out in the flow; appended here so that no
// earlier site's number moves): router (the gate's logits, one column per expert), scores (the
// router's scores), route_w (each token's K routing weights), experts (each routed expert's output
// at its (token, slot): the dispatched rows mapped back through the dispatch plan, K·dim columns),
// combine (the weighted sum of a token's K outputs), shared (the shared expert's output). Their
// backward: the gradient arriving at experts, route_w, scores and router (combine's and shared's
// is ffn_out's, h_out's backward).
enum class Site : uint8_t {
  embed, ln1, q, k, v, attn, attn_out, h_mid, ln2, ffn_out, h_out, final_ln, logits,
  router, scores, route_w, experts, combine, shared
};
inline constexpr int kSites = 19;
enum class Dir : uint8_t { fwd, bwd };
// A record's rows: `stream` the residual stream's (this rank's context-parallel chunk of each
// sequence, split again over tp lanes under sequence parallel); `chunk` the context-parallel chunk
// whole (inside a tensor-parallel region: every lane holds every row of it); `routed` the rows
// [row0, row0 + n_rows) of the chunk's b·(S / cp) rows, flat (the MoE block's routing without
// sequence parallel: tp lane r routes chunk(n, tp, r) of the copies, parallel/pmoe.h).
enum class Rows : uint8_t { stream, chunk, routed };

// A rank's coordinates that place a record's rows (parallel/pmodel.cpp sets them; the baseline:
// the defaults, one rank holding everything).
struct Placement {
  int64_t tp_rank = 0, tp = 1, cp_rank = 0, cp = 1;
  bool sp = false;
  // This rank's context-parallel chunk as blocks of rows: (first row, rows, first global position),
  // parallel/cp_ops.h CpContext::blocks (contiguous, or the load-balanced order's two); empty: one
  // contiguous chunk, rank cp_rank's.
  struct Block {
    int64_t row = 0, rows = 0, pos = 0;
  };
  std::vector<Block> blocks;
};

// Which tensor: the site of one layer in one direction.
struct Key {
  Site site = Site::embed;
  int64_t layer = 0;
  Dir dir = Dir::fwd;
  bool operator==(const Key&) const = default;
};
std::string site_name(Site s);  // "ln1", "q", "attn_out", ...
// "layer 1 attn_out, forward" / "final_ln, backward"
std::string key_name(const Key& k, int64_t layers);
// Which layers are MoE (from first_moe on; -1: none) and whether their block has a shared expert.
struct MoeSites {
  int64_t first_moe = -1;
  bool shared = false;
};
// Every key a model of `layers` layers records, in data-flow order: the forward's, then the
// backward's (the gradient arriving at each, from the logits back to the embedding); an MoE layer's
// block adds its own sites between ln2 and ffn_out.
std::vector<Key> flow_keys(int64_t layers, MoeSites moe = {});

// One record: a (rows, cols) block of the full tensor (B·S, full_cols) of the step.
struct Entry {
  Key key;
  int64_t g0 = 0, b = 0;  // the micro-batch's sequences on this rank: [g0, g0 + b) of the step
  Rows rows = Rows::stream;
  Placement place;
  int64_t n_rows = 0, cols = 0, col0 = 0, full_cols = 0;  // this block's columns [col0, col0 + cols)
  std::vector<double> data;                               // (n_rows, cols) row-major
  int64_t row0 = 0;                                       // Rows::routed: the first flat row of the chunk
};

// The global sequence and position of row r of e (token = g·S + s).
void global_token(const Entry& e, int64_t r, int64_t S, int64_t& g, int64_t& s);
// The canonical mapping: f(i, j) for every local element i of e in order, j its flat index in the full (B·S,
// full_cols) tensor of the step (sequence-major, then position, then column), S the model's sequence. One
// global_token per row, not per element: a 1024-rank simulated world's traced step spent more in those divisions
// than in comparing.
template <class F> void for_each_global_index(const Entry& e, int64_t S, F&& f) {
  const auto n = static_cast<int64_t>(e.data.size());
  for (int64_t r = 0; e.cols > 0 && r * e.cols < n; ++r) {
    int64_t g = 0, s = 0;
    global_token(e, r, S, g, s);
    const int64_t at = (g * S + s) * e.full_cols + e.col0;
    for (int64_t k = 0, i = r * e.cols; k < e.cols && i < n; ++k, ++i) f(i, at + k);
  }
}

class Recorder {
 public:
  std::vector<Entry> entries;
  int64_t g0 = 0, b = 0;  // the running micro-batch (micro())
  Placement place;
  int paused = 0;  // > 0: inside a recompute (parallel/recompute.h), the forward already recorded
  template <class T>
  void add(Key k, const T* x, int64_t n_rows, int64_t cols, Rows rows, int64_t col0, int64_t full_cols) {
    if (paused > 0 || n_rows == 0 || b == 0) return;
    Entry e{k, g0, b, rows, place, n_rows, cols, col0, full_cols < 0 ? cols : full_cols, {}};
    e.data.assign(x, x + n_rows * cols);
    entries.push_back(std::move(e));
  }
};

// This thread's recorder, null when tracing is off.
inline Recorder*& active() {
  thread_local Recorder* r = nullptr;
  return r;
}
// Activates r on this thread for the scope.
struct Scope {
  explicit Scope(Recorder* r) : prev(active()) { active() = r; }
  ~Scope() { active() = prev; }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  Recorder* prev;
};
// No record inside: a recompute re-runs a forward that was recorded already.
struct Pause {
  Pause() {
    if (active()) ++active()->paused;
  }
  ~Pause() {
    if (active()) --active()->paused;
  }
  Pause(const Pause&) = delete;
  Pause& operator=(const Pause&) = delete;
};

// The running micro-batch's sequences [g0, g0 + b) and this rank's placement.
inline void micro(int64_t g0, int64_t b, const Placement& p = {}) {
  if (Recorder* r = active()) r->g0 = g0, r->b = b, r->place = p;
}
// x (n_rows, cols): columns [col0, col0 + cols) of a tensor of full_cols (-1: cols, all of them).
template <class T>
inline void record(Site s, int64_t layer, Dir d, const T* x, int64_t n_rows, int64_t cols, Rows rows = Rows::stream,
                   int64_t col0 = 0, int64_t full_cols = -1) {
  if (Recorder* r = active()) r->add(Key{s, layer, d}, x, n_rows, cols, rows, col0, full_cols);
}
// x (n_rows, cols): rows [row0, row0 + n_rows) of this rank's context-parallel chunk, flat over the
// micro-batch's sequences (Rows::routed), every column.
template <class T>
inline void record_routed(Site s, int64_t layer, Dir d, const T* x, int64_t n_rows, int64_t cols, int64_t row0) {
  Recorder* r = active();
  if (r == nullptr) return;
  const size_t before = r->entries.size();
  r->add(Key{s, layer, d}, x, n_rows, cols, Rows::routed, 0, cols);
  if (r->entries.size() > before) r->entries.back().row0 = row0;
}

}  // namespace parity::trace
