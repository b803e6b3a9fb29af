// The replicas row over the optimizer state (docs/verdict.md "Replicas, bit for bit"): per
// state entry named optim.* (moments, step count) a digest of this rank's global indices
// (its shard's identity) and one of its values' bits. Two ranks holding the same elements of
// an entry must hold the same bits: the optimizer applies the same update to every copy.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "harness/verdict/verdict_detail.h"
#include "mesh/placement.h"

namespace parity::verdict_state {

inline constexpr size_t kWidth = 2;  // per entry: key, bits

inline bool is_optimizer(const ckpt::StateEntry& e) { return e.name.rfind("optim.", 0) == 0; }

// Per optimizer entry of `st` (in order): its name and the digest of its global indices on
// `rank` (the layouts never change: computed once).
struct Keys {
  std::vector<std::string> names;
  std::vector<double> keys;
};
inline Keys entry_keys(const ckpt::ShardedState& st, const mesh::Mesh& m, int rank) {
  Keys k;
  for (const ckpt::StateEntry& e : st.entries()) {
    if (!is_optimizer(e)) continue;
    uint64_t h = verdict_detail::mix(0x13198a2e03707344ull, std::hash<std::string>{}(e.name));
    for (int64_t i : mesh::global_indices(m, e.layout, e.shape, rank))
      h = verdict_detail::mix(h, static_cast<uint64_t>(i));
    k.names.push_back(e.name), k.keys.push_back(verdict_detail::digest_as_double(h));
  }
  return k;
}

// Appends (key, bits) per optimizer entry.
inline void append_digests(const ckpt::ShardedState& st, const Keys& k, std::vector<double>& out) {
  size_t i = 0;
  for (const ckpt::StateEntry& e : st.entries()) {
    if (!is_optimizer(e)) continue;
    const auto* bytes = static_cast<const unsigned char*>(e.data());
    const int64_t n = numel(e.local_shape()) * dtype_size(e.dtype);
    uint64_t h = verdict_detail::digest_words(0xa4093822299f31d0ull, static_cast<size_t>(n / 8), [bytes](size_t w8) {
      uint64_t w;
      std::memcpy(&w, bytes + 8 * w8, sizeof w);
      return w;
    });
    for (int64_t b = n - n % 8; b < n; ++b) h = verdict_detail::mix(h, bytes[b]);
    out.insert(out.end(), {i < k.keys.size() ? k.keys[i] : 0.0, verdict_detail::digest_as_double(h)});
    ++i;
  }
}

// Over every rank's part: "optim.m.NAME on ranks a and b" per entry whose copies differ;
// pairs: the copies compared.
inline std::vector<std::string> differing(const std::vector<double>& all, size_t stride, size_t at, int world,
                                          const std::vector<std::string>& names, int64_t& pairs) {
  std::vector<std::string> out;
  for (size_t e = 0; e < names.size(); ++e) {
    std::vector<std::pair<double, int>> first;  // per key: its first holder
    bool reported = false;
    for (int r = 0; r < world; ++r) {
      const double* x = all.data() + static_cast<size_t>(r) * stride + at + kWidth * e;
      size_t i = 0;
      while (i < first.size() && first[i].first != x[0]) ++i;
      if (i == first.size()) {
        first.push_back({x[0], r});
        continue;
      }
      ++pairs;
      const double* y = all.data() + static_cast<size_t>(first[i].second) * stride + at + kWidth * e;
      if (y[1] != x[1] && !reported)
        out.push_back(names[e] + " on ranks " + std::to_string(first[i].second) + " and " + std::to_string(r)),
            reported = true;
    }
  }
  return out;
}

}  // namespace parity::verdict_state
