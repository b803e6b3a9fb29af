#include "model/trace.h"

#include <array>

namespace parity::trace {

std::string site_name(Site s) {
  static const std::array<const char*, kSites> names{
      "embed",  "ln1",      "q",      "k",      "v",       "attn",    "attn_out", "h_mid",   "ln2",   "ffn_out",
      "h_out",  "final_ln", "logits", "router", "scores",  "route_w", "experts",  "combine", "shared"};
  return names[static_cast<size_t>(s)];
}

std::string key_name(const Key& k, int64_t layers) {
  const bool in_layer = k.layer >= 0 && k.layer < layers;
  return (in_layer ? "layer " + std::to_string(k.layer) + " " : std::string()) + site_name(k.site) + ", " +
         (k.dir == Dir::fwd ? "forward" : "backward");
}

std::vector<Key> flow_keys(int64_t layers, MoeSites moe) {
  static constexpr std::array kLayer{Site::ln1,   Site::q,   Site::k,       Site::v,     Site::attn,
                                     Site::attn_out, Site::h_mid, Site::ln2, Site::ffn_out, Site::h_out};
  // the backward's gradients in the order it computes them (attn_out's is h_mid's, ffn_out's h_out's)
  static constexpr std::array kBack{Site::h_out, Site::ln2, Site::h_mid, Site::attn, Site::v, Site::k, Site::q,
                                    Site::ln1};
  // an MoE block's, after ln2 (forward) and after h_out (backward: combine's gradient is ffn_out's)
  static constexpr std::array kMoe{Site::router, Site::scores, Site::route_w, Site::experts, Site::combine};
  static constexpr std::array kMoeBack{Site::experts, Site::route_w, Site::scores, Site::router};
  const auto is_moe = [&](int64_t l) { return moe.first_moe >= 0 && l >= moe.first_moe; };
  std::vector<Key> out{{Site::embed, -1, Dir::fwd}};
  for (int64_t l = 0; l < layers; ++l)
    for (Site s : kLayer) {
      out.push_back({s, l, Dir::fwd});
      if (s != Site::ln2 || !is_moe(l)) continue;
      for (Site m : kMoe) out.push_back({m, l, Dir::fwd});
      if (moe.shared) out.push_back({Site::shared, l, Dir::fwd});
    }
  out.push_back({Site::final_ln, layers, Dir::fwd});
  out.push_back({Site::logits, layers, Dir::fwd});
  out.push_back({Site::logits, layers, Dir::bwd});
  out.push_back({Site::final_ln, layers, Dir::bwd});
  for (int64_t l = layers - 1; l >= 0; --l)
    for (Site s : kBack) {
      out.push_back({s, l, Dir::bwd});
      if (s == Site::h_out && is_moe(l))
        for (Site m : kMoeBack) out.push_back({m, l, Dir::bwd});
    }
  out.push_back({Site::embed, -1, Dir::bwd});
  return out;
}

// The rows: the micro-batch's sequences [g0, g0 + b), each holding npos = n_rows / b positions: this
// rank's context-parallel chunk (Placement::blocks: contiguous, or the load-balanced order's two
// blocks, parallel/cp_ops.h), and of it, for the residual stream under sequence parallel, tp lane
// tp_rank's part (parallel/tp_ops.h).
// Rows::routed: flat row row0 + r of the chunk's b·(S / cp) rows.
void global_token(const Entry& e, int64_t r, int64_t S, int64_t& g, int64_t& s) {
  const Placement& p = e.place;
  const bool flat = e.rows == Rows::routed;
  const int64_t npos = flat ? S / p.cp : e.n_rows / e.b;
  if (flat) r += e.row0;
  int64_t row = r % npos;  // the row in this rank's chunk
  if (e.rows == Rows::stream && p.sp && p.tp > 1) row += p.tp_rank * npos;
  g = e.g0 + r / npos;
  s = p.cp_rank * (S / p.cp) + row;
  for (const Placement::Block& k : p.blocks)
    if (row >= k.row && row < k.row + k.rows) s = k.pos + (row - k.row);
}

}  // namespace parity::trace
