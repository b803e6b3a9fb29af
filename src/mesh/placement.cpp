#include "mesh/placement.h"

#include <algorithm>

#include "core/error.h"

namespace parity::mesh {

std::string placement_str(const Placement& p) {
  switch (p.kind) {
    case PlacementKind::replicate: return "Replicate";
    case PlacementKind::shard: return "Shard(" + std::to_string(p.dim) + ")";
    case PlacementKind::strided_shard:
      return "StridedShard(" + std::to_string(p.dim) + ", " + std::to_string(p.split_factor) + ")";
    case PlacementKind::partial: return "Partial(sum)";
  }
  return "?";
}

std::string layout_str(const TensorLayout& l) {
  std::string out = "(";
  for (size_t i = 0; i < l.placements.size(); ++i) out += (i ? ", " : "") + placement_str(l.placements[i]);
  out += ")";
  if (l.stages.size() == 1) out += " on stage " + std::to_string(l.stages[0]);
  if (l.stages.size() > 1) {
    out += " on stages {";
    for (size_t i = 0; i < l.stages.size(); ++i) out += (i ? ", " : "") + std::to_string(l.stages[i]);
    out += "}";
  }
  return out;
}

bool holds(const Mesh& m, const TensorLayout& l, int rank) {
  return l.stages.empty() || std::find(l.stages.begin(), l.stages.end(), m.stage(rank)) != l.stages.end();
}

TensorLayout replicated(View v) { return {v, std::vector<Placement>(view_dims(v).size(), Placement::replicate())}; }

Range chunk(int64_t len, int64_t n, int64_t i) {
  if (n < 1 || i < 0 || i >= n || len < 0)
    throw Error("chunk: piece " + std::to_string(i) + " of " + std::to_string(n) + " over length " +
                std::to_string(len));
  const int64_t c = (len + n - 1) / n;
  return {std::min(i * c, len), std::min((i + 1) * c, len)};
}

namespace {

[[noreturn]] void bad_layout(const TensorLayout& l, const Shape& shape, const std::string& why) {
  throw Error("layout " + layout_str(l) + " on the " + std::string(view_name(l.view)) + " view for shape " +
              shape_str(shape) + ": " + why);
}

// The global ranges of positions [a, b) of the concatenation of `segs`, adjacent ones merged.
std::vector<Range> positions(const std::vector<Range>& segs, int64_t a, int64_t b) {
  std::vector<Range> out;
  int64_t at = 0;  // position of the current segment's first index
  for (const Range& r : segs) {
    const int64_t lo = std::max(a, at), hi = std::min(b, at + r.size());
    if (lo < hi) {
      const Range g{r.begin + lo - at, r.begin + hi - at};
      if (!out.empty() && out.back().end == g.begin) out.back().end = g.end;
      else out.push_back(g);
    }
    at += r.size();
  }
  return out;
}

// DTensor's rule (torch/distributed/tensor/_utils.py, compute_local_shape_and_global_offset):
// the placement chunks the local index list as a flat list. Shard keeps piece c of n;
// StridedShard(sf) splits the list into sf chunks, each into n pieces, and keeps piece c of
// every chunk, concatenated (_StridedShard._split_tensor).
std::vector<Range> flat_step(const std::vector<Range>& segs, const Placement& p, int64_t n, int64_t c) {
  int64_t len = 0;
  for (const Range& r : segs) len += r.size();
  const int64_t sf = p.kind == PlacementKind::shard ? 1 : p.split_factor;
  std::vector<Range> out;
  for (int64_t j = 0; j < sf; ++j) {
    const Range ch = chunk(len, sf, j);
    const Range piece = chunk(ch.size(), n, c);
    for (const Range& g : positions(segs, ch.begin + piece.begin, ch.begin + piece.end)) {
      if (!out.empty() && out.back().end == g.begin) out.back().end = g.end;
      else out.push_back(g);
    }
  }
  return out;
}

// The segments (global ranges) of tensor dimension d of length len held by a rank with
// these view coordinates, in local order (placement.h: the segment rule while segment
// counts divide, DTensor's flat rule from the first placement where they do not).
std::vector<Range> dim_segments(const std::vector<int64_t>& sizes, const std::vector<int64_t>& coords,
                                const TensorLayout& l, int64_t d, int64_t len) {
  std::vector<Range> segs = {{0, len}};
  bool flat = false;
  for (size_t i = 0; i < l.placements.size(); ++i) {
    const Placement& p = l.placements[i];
    if (!p.is_shard() || p.dim != d) continue;
    const int64_t n = sizes[i], c = coords[i];
    const size_t s = segs.size();
    const bool strided = p.kind == PlacementKind::strided_shard;
    std::vector<Range> next;
    if (!flat && s == 1) {
      const Range whole = segs[0];
      const int64_t sf = strided ? p.split_factor : 1;
      for (int64_t j = 0; j < sf; ++j) {
        const Range ch = chunk(whole.size(), sf, j);
        const Range piece = chunk(ch.size(), n, c);
        next.push_back({whole.begin + ch.begin + piece.begin, whole.begin + ch.begin + piece.end});
      }
    } else if (!flat && !strided && s % static_cast<size_t>(n) == 0) {
      const size_t per = s / static_cast<size_t>(n);
      for (size_t k = 0; k < per; ++k) next.push_back(segs[static_cast<size_t>(c) * per + k]);
    } else if (!flat && strided && s == static_cast<size_t>(p.split_factor * n)) {
      for (int64_t j = 0; j < p.split_factor; ++j) next.push_back(segs[static_cast<size_t>(j * n + c)]);
    } else {
      flat = true;
      next = flat_step(segs, p, n, c);
    }
    segs = std::move(next);
  }
  return segs;
}

}  // namespace

void check_layout(const Mesh& m, const TensorLayout& l, const Shape& shape) {
  const std::vector<int64_t> sizes = m.sizes(l.view);
  if (l.placements.size() != sizes.size())
    bad_layout(l, shape, std::to_string(l.placements.size()) + " placements for a view of " +
                             std::to_string(sizes.size()) + " dimensions");
  const int64_t rank = static_cast<int64_t>(shape.size());
  for (int64_t len : shape)
    if (len < 0) bad_layout(l, shape, "negative dimension");
  for (const Placement& p : l.placements) {
    if (p.is_shard() && (p.dim < 0 || p.dim >= rank))
      bad_layout(l, shape, placement_str(p) + " names a dimension outside [0, " + std::to_string(rank) + ")");
    if (p.kind == PlacementKind::strided_shard && p.split_factor < 1)
      bad_layout(l, shape, placement_str(p) + ": the split factor must be >= 1");
  }
}

std::vector<std::vector<int64_t>> local_dim_indices(const Mesh& m, const TensorLayout& l, const Shape& shape,
                                                    int rank) {
  check_layout(m, l, shape);
  const std::vector<int64_t> sizes = m.sizes(l.view), coords = m.coords(l.view, rank);
  std::vector<std::vector<int64_t>> out(shape.size());
  if (!holds(m, l, rank)) return out;  // another stage's tensor: nothing
  for (size_t d = 0; d < shape.size(); ++d)
    for (const Range& r : dim_segments(sizes, coords, l, static_cast<int64_t>(d), shape[d]))
      for (int64_t g = r.begin; g < r.end; ++g) out[d].push_back(g);
  return out;
}

std::vector<std::vector<Range>> local_dim_ranges(const Mesh& m, const TensorLayout& l, const Shape& shape, int rank) {
  check_layout(m, l, shape);
  const std::vector<int64_t> sizes = m.sizes(l.view), coords = m.coords(l.view, rank);
  std::vector<std::vector<Range>> out(shape.size());
  if (!holds(m, l, rank)) return out;
  for (size_t d = 0; d < shape.size(); ++d)
    for (const Range& r : dim_segments(sizes, coords, l, static_cast<int64_t>(d), shape[d])) {
      if (r.size() == 0) continue;
      if (!out[d].empty() && out[d].back().end == r.begin) out[d].back().end = r.end;
      else out[d].push_back(r);
    }
  return out;
}

Shape global_offset(const Mesh& m, const TensorLayout& l, const Shape& shape, int rank) {
  const auto ranges = local_dim_ranges(m, l, shape, rank);
  if (!holds(m, l, rank)) return shape;  // holds nothing: past the end everywhere
  Shape out(shape.size(), 0);
  for (const Placement& p : l.placements) {
    if (!p.is_shard()) continue;
    const auto d = static_cast<size_t>(p.dim);
    out[d] = ranges[d].empty() ? shape[d] : ranges[d].front().begin;
  }
  return out;
}

Shape local_shape(const Mesh& m, const TensorLayout& l, const Shape& shape, int rank) {
  Shape out;
  for (const auto& idx : local_dim_indices(m, l, shape, rank)) out.push_back(static_cast<int64_t>(idx.size()));
  return out;
}

std::vector<int64_t> global_indices(const Mesh& m, const TensorLayout& l, const Shape& shape, int rank) {
  const auto idx = local_dim_indices(m, l, shape, rank);
  std::vector<int64_t> out = {0};  // flat global offsets of the prefix dimensions
  for (size_t d = 0; d < shape.size(); ++d) {
    std::vector<int64_t> next;
    next.reserve(out.size() * idx[d].size());
    for (int64_t base : out)
      for (int64_t g : idx[d]) next.push_back(base * shape[d] + g);
    out = std::move(next);
  }
  return out;
}

int64_t replication(const Mesh& m, const TensorLayout& l) {
  const std::vector<int64_t> sizes = m.sizes(l.view);
  int64_t r = 1;
  for (size_t i = 0; i < l.placements.size() && i < sizes.size(); ++i)
    if (!l.placements[i].is_shard()) r *= sizes[i];
  return r * (l.stages.empty() ? m.stages() : static_cast<int64_t>(l.stages.size()));
}

bool partial_root(const Mesh& m, const TensorLayout& l, int rank) {
  const std::vector<int64_t> c = m.coords(l.view, rank);
  for (size_t i = 0; i < l.placements.size() && i < c.size(); ++i)
    if (l.placements[i].kind == PlacementKind::partial && c[i] != 0) return false;
  return true;
}

bool first_replica(const Mesh& m, const TensorLayout& l, int rank) {
  const std::vector<int64_t> c = m.coords(l.view, rank);
  if (m.stage(rank) != (l.stages.empty() ? 0 : l.stages.front())) return false;
  for (size_t i = 0; i < l.placements.size() && i < c.size(); ++i)
    if (l.placements[i].kind == PlacementKind::replicate && c[i] != 0) return false;
  return true;
}

bool has_uneven_shards(const Mesh& m, const TensorLayout& l, const Shape& shape) {
  const int first_holder = m.rank_of(l.view, std::vector<int64_t>(m.sizes(l.view).size(), 0),
                                     l.stages.empty() ? 0 : static_cast<int>(l.stages.front()));
  const Shape first = local_shape(m, l, shape, first_holder);
  for (int r = 0; r < m.world(); ++r)
    if (holds(m, l, r) && local_shape(m, l, shape, r) != first) return true;
  return false;
}

bool has_empty_shards(const Mesh& m, const TensorLayout& l, const Shape& shape) {
  if (numel(shape) == 0) return false;
  for (int r = 0; r < m.world(); ++r)
    if (holds(m, l, r) && numel(local_shape(m, l, shape, r)) == 0) return true;
  return false;
}

}  // namespace parity::mesh
