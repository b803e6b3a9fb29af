#include "parallel/recompute.h"

#include <algorithm>
#include <span>
#include <string>

#include "core/error.h"

namespace parity {

namespace {

template <class V> int64_t bytes(const V& v) { return static_cast<int64_t>(v.size() * sizeof(typename V::value_type)); }

template <class T> int64_t bytes(const FfnCache<T>& f) { return bytes(f.a) + bytes(f.b) + bytes(f.h); }

template <class T> int64_t bytes(const DispatchCache<T>& d) {
  int64_t n = bytes(d.perm.counts) + bytes(d.perm.src) + bytes(d.xg) + bytes(d.send_rows) + bytes(d.recv_rows) +
              bytes(d.recv_expert_rows) + bytes(d.lane_rows) + bytes(d.lane_expert_rows) + bytes(d.order) +
              bytes(d.expert_rows) + bytes(d.xe) + bytes(d.y);
  for (const FfnCache<T>& f : d.ffn) n += bytes(f);
  return n;
}

template <class T> int64_t bytes(const PMoeCache<T>& k) {
  return bytes(k.x_d) + bytes(k.logits) + bytes(k.s) + bytes(k.w) + bytes(k.chosen) + bytes(k.s_full) +
         bytes(k.chosen_full) + bytes(k.dispatch) + bytes(k.x_full) + bytes(k.shared);
}

}  // namespace

template <class T> void drop_for_recompute(LayerCache<T>& L, Recompute r) {
  if (recomputes_attention(r)) {
    Buffer<T> h_in = std::move(L.h_in), h_mid = std::move(L.h_mid);
    LayerCache<T> kept;
    kept.h_in = std::move(h_in), kept.h_mid = std::move(h_mid);
    kept.bn_res = std::move(L.bn_res), kept.m2 = std::move(L.m2), kept.r2 = std::move(L.r2);
    kept.bn_full = std::move(L.bn_full), kept.mlp = std::move(L.mlp), kept.moe = std::move(L.moe);
    L = std::move(kept);
  }
  if (recomputes_ffn(r)) {
    L.routed = std::move(L.moe.chosen);  // empty for a dense layer
    L.bn_res = {}, L.m2 = {}, L.r2 = {}, L.bn_full = {}, L.mlp = {}, L.moe = {};
  }
  if (r == Recompute::full) L.h_mid = {};
}

template <class T> int64_t held_bytes(const LayerCache<T>& L) {
  int64_t n = 0;
  for (const Buffer<T>* b :
       {&L.h_in, &L.a_res, &L.m1, &L.r1, &L.a_full, &L.q, &L.k, &L.v, &L.att, &L.probs, &L.h_mid, &L.cp_attn.k_full,
        &L.cp_attn.v_full, &L.cp_attn.probs, &L.bn_res, &L.m2, &L.r2, &L.bn_full, &L.q_raw, &L.k_raw, &L.rq, &L.rk})
    n += bytes(*b);
  return n + bytes(L.mlp) + bytes(L.moe) + bytes(L.routed);
}

void check_recomputed_routing(comm::Communicator& world, int64_t layer, int64_t seq, const Buffer<int64_t>& first,
                              const Buffer<int64_t>& again, const std::vector<int64_t>& token_ids, int64_t K) {
  // this rank's first differing row, or -1
  int64_t row = first.size() == again.size() ? -1 : 0;
  for (size_t i = 0; row < 0 && i < first.size(); ++i)
    if (first[i] != again[i]) row = static_cast<int64_t>(i) / K;
  const int64_t token = row >= 0 && row < static_cast<int64_t>(token_ids.size()) ? token_ids[row] : -1;
  std::vector<double> v{row >= 0 ? 1.0 : 0.0, static_cast<double>(token)};  // token ids are exact below 2^53
  world.allreduce(std::span<double>(v), comm::ReduceOp::max);
  if (v[0] == 0) return;
  const std::string where = "layers." + std::to_string(layer) + ": activation recompute: ";
  const std::string why =
      "; the recomputed forward is not the first forward (docs/parallel.md, \"Activation recompute\")";
  if (row < 0) {
    const int64_t t = static_cast<int64_t>(v[1]);
    throw Error(where + "the recomputed MoE routing differs from the first forward's on another rank" +
                (t >= 0 ? " (token " + std::to_string(t) + ")" : "") + why);
  }
  int64_t slot = 0;
  while (slot + 1 < K && row * K + slot < static_cast<int64_t>(first.size()) &&
         first[static_cast<size_t>(row * K + slot)] == again[static_cast<size_t>(row * K + slot)])
    ++slot;
  const auto at = [&](const Buffer<int64_t>& c) {
    const int64_t i = row * K + slot;
    return i < static_cast<int64_t>(c.size()) ? std::to_string(c[static_cast<size_t>(i)]) : std::string("none");
  };
  const std::string tok = token >= 0 ? "token " + std::to_string(token) + " (sequence " + std::to_string(token / seq) +
                                           ", position " + std::to_string(token % seq) + ")"
                                     : "routed row " + std::to_string(row);
  throw Error(where + "the recomputed MoE routing differs from the first forward's at " + tok + ", slot " +
              std::to_string(slot) + ": expert " + at(first) + " first, " + at(again) + " recomputed" + why);
}

std::function<void(int64_t, std::span<double>)>& recompute_test_hook() {
  static std::function<void(int64_t, std::span<double>)> hook;
  return hook;
}

#define PARITY_INSTANTIATE(T)                                     \
  template void drop_for_recompute<T>(LayerCache<T>&, Recompute); \
  template int64_t held_bytes<T>(const LayerCache<T>&);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity
