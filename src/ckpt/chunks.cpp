#include "ckpt/chunks.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace parity::ckpt {
namespace {

struct Run {
  int64_t local_begin, global_begin, len;
};

std::vector<Run> runs_of(const std::vector<int64_t>& idx) {
  std::vector<Run> out;
  for (size_t i = 0; i < idx.size(); ++i) {
    if (!out.empty() && out.back().global_begin + out.back().len == idx[i]) {
      ++out.back().len;
    } else {
      out.push_back({static_cast<int64_t>(i), idx[i], 1});
    }
  }
  return out;
}

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

// Calls f(flat offset) for every element of the box [begin, begin + extent) of a row-major
// tensor with strides `st`, in row-major order of the box; the last dimension as a run.
template <class F>
void for_rows(const std::vector<int64_t>& st, const std::vector<int64_t>& begin, const Shape& extent, F&& f) {
  const size_t n = extent.size();
  if (n == 0) {
    f(int64_t{0}, int64_t{0}, int64_t{1});
    return;
  }
  for (int64_t e : extent)
    if (e == 0) return;
  std::vector<int64_t> pos(n, 0);
  int64_t row = 0;
  for (;;) {
    int64_t off = 0;
    for (size_t d = 0; d < n; ++d) off += (begin[d] + pos[d]) * st[d];
    f(row, off, extent[n - 1]);
    ++row;
    size_t d = n - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++pos[d] < extent[d]) break;
      pos[d] = 0;
    }
  }
}

}  // namespace

Shape Rect::shape() const {
  Shape s;
  for (const auto& r : dims) s.push_back(r.size());
  return s;
}

int64_t Rect::numel() const { return parity::numel(shape()); }

std::string rect_str(const Rect& r) {
  std::string s = "[";
  for (size_t d = 0; d < r.dims.size(); ++d)
    s += (d ? ", " : "") + std::to_string(r.dims[d].begin) + ":" + std::to_string(r.dims[d].end);
  return s + "]";
}

bool writes_shard(const mesh::Mesh& m, const mesh::TensorLayout& l, const std::string& tensor, int rank) {
  for (const mesh::Placement& p : l.placements)
    if (p.kind == mesh::PlacementKind::partial)
      throw Error("checkpoint: tensor '" + tensor + "' has a Partial placement " + mesh::layout_str(l) +
                  "; reduce it before saving (a checkpoint holds values, not addends)");
  return mesh::first_replica(m, l, rank);  // coordinate 0 on every Replicate dimension, on the first stage holding it
}

std::vector<LocalChunk> shard_chunks(const mesh::Mesh& m, const mesh::TensorLayout& l, const Shape& shape, int rank) {
  const auto idx = mesh::local_dim_indices(m, l, shape, rank);
  std::vector<std::vector<Run>> runs;
  for (const auto& v : idx) {
    if (v.empty()) return {};
    runs.push_back(runs_of(v));
  }
  std::vector<LocalChunk> out;
  std::vector<size_t> pick(runs.size(), 0);
  for (;;) {
    LocalChunk c;
    for (size_t d = 0; d < runs.size(); ++d) {
      const Run& r = runs[d][pick[d]];
      c.rect.dims.push_back({r.global_begin, r.global_begin + r.len});
      c.local_begin.push_back(r.local_begin);
    }
    out.push_back(std::move(c));
    size_t d = runs.size();
    for (;;) {
      if (d == 0) return out;
      --d;
      if (++pick[d] < runs[d].size()) break;
      pick[d] = 0;
    }
  }
}

void extract_chunk(const void* local, const Shape& local_shape, const LocalChunk& c, int64_t elem, void* out) {
  const auto st = strides_of(local_shape);
  const auto* src = static_cast<const unsigned char*>(local);
  auto* dst = static_cast<unsigned char*>(out);
  const Shape ext = c.rect.shape();
  for_rows(st, c.local_begin, ext, [&](int64_t row, int64_t off, int64_t len) {
    const int64_t last = ext.empty() ? 1 : ext.back();
    std::memcpy(dst + row * last * elem, src + off * elem, static_cast<size_t>(len * elem));
  });
}

bool Overlap::empty() const {
  return std::any_of(dims.begin(), dims.end(), [](const auto& v) { return v.empty(); });
}

int64_t Overlap::numel() const {
  int64_t n = 1;
  for (const auto& v : dims) n *= static_cast<int64_t>(v.size());
  return n;
}

int64_t Overlap::first_row() const {
  if (dims.empty()) return 0;
  int64_t r = dims[0].front().second;
  for (const auto& p : dims[0]) r = std::min(r, p.second);
  return r;
}

int64_t Overlap::last_row() const {
  if (dims.empty()) return 0;
  int64_t r = dims[0].front().second;
  for (const auto& p : dims[0]) r = std::max(r, p.second);
  return r;
}

Overlap overlap(const std::vector<std::vector<int64_t>>& local_idx, const Rect& r) {
  Overlap ov;
  ov.dims.resize(local_idx.size());
  for (size_t d = 0; d < local_idx.size(); ++d)
    for (size_t i = 0; i < local_idx[d].size(); ++i) {
      const int64_t g = local_idx[d][i];
      if (g >= r.dims[d].begin && g < r.dims[d].end)
        ov.dims[d].push_back({static_cast<int64_t>(i), g - r.dims[d].begin});
    }
  return ov;
}

void scatter_overlap(const Overlap& ov, const Rect& r, int64_t row0, const void* src, const Shape& local_shape,
                     int64_t elem, void* dst) {
  const size_t n = ov.dims.size();
  const auto* s = static_cast<const unsigned char*>(src);
  auto* t = static_cast<unsigned char*>(dst);
  if (n == 0) {
    std::memcpy(t, s, static_cast<size_t>(elem));
    return;
  }
  if (ov.empty()) return;
  const auto lst = strides_of(local_shape);
  auto rst = strides_of(r.shape());
  std::vector<size_t> pos(n, 0);
  const auto& inner = ov.dims[n - 1];
  for (;;) {
    int64_t lo = 0, ro = 0;
    for (size_t d = 0; d + 1 < n; ++d) {
      lo += ov.dims[d][pos[d]].first * lst[d];
      ro += (ov.dims[d][pos[d]].second - (d == 0 ? row0 : 0)) * rst[d];
    }
    if (n == 1) ro -= row0 * rst[0];
    size_t i = 0;
    while (i < inner.size()) {  // copy runs that are consecutive on both sides at once
      size_t j = i + 1;
      while (j < inner.size() && inner[j].first == inner[j - 1].first + 1 && inner[j].second == inner[j - 1].second + 1)
        ++j;
      std::memcpy(t + (lo + inner[i].first) * elem, s + (ro + inner[i].second) * elem,
                  static_cast<size_t>(static_cast<int64_t>(j - i) * elem));
      i = j;
    }
    size_t d = n - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++pos[d] < ov.dims[d].size()) break;
      pos[d] = 0;
    }
  }
}

}  // namespace parity::ckpt
