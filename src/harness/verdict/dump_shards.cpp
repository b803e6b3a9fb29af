// Sharded tensors in a collected dump (dump_shards.h).
#include "harness/verdict/dump_shards.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/error.h"

namespace parity {

using nlohmann::json;

namespace {

struct Place {
  enum Kind { shard, replicate, partial } kind = replicate;
  int64_t dim = 0;
  std::string word;  // as recorded: "Shard(1)", "column", ...
};

Place parse_place(const json& v, const Shape& stored, bool transposed, const std::string& where) {
  if (!v.is_string()) throw ConfigError("candidate", where + ": a placement is a string (Shard(d), Replicate, ...)");
  Place p;
  p.word = v.get<std::string>();
  const auto nd = static_cast<int64_t>(stored.size());
  if (p.word == "Replicate" || p.word == "Replicate()") return p;
  if (p.word == "Partial" || p.word == "Partial()" || p.word == "Partial(sum)") return p.kind = Place::partial, p;
  p.kind = Place::shard;
  if (p.word == "column" || p.word == "row") {
    if (nd != 2) throw ConfigError("candidate", where + ": \"" + p.word + "\" splits a 2-D weight, not a " +
                                                    std::to_string(nd) + "-D tensor (use Shard(d))");
    // column: the output features; an nn.Linear stores (out, in) (transposed to parity's (in, out))
    p.dim = (p.word == "column") == transposed ? 0 : 1;
    return p;
  }
  int64_t d = -1;
  char tail = 0;
  if (std::sscanf(p.word.c_str(), "Shard(%ld%c", &d, &tail) != 2 || tail != ')' || d < 0 || d >= nd)
    throw ConfigError("candidate", where + ": placement \"" + p.word + "\" is not Shard(d) with 0 <= d < " +
                                       std::to_string(nd) + ", Replicate, Partial, column or row");
  p.dim = d;
  return p;
}

// The flat indices of a box of `stored`, row-major.
std::vector<int64_t> box_index(const std::vector<std::pair<int64_t, int64_t>>& box, const Shape& stored) {
  std::vector<int64_t> out{0};
  for (size_t d = 0; d < box.size(); ++d) {
    std::vector<int64_t> next;
    for (int64_t base : out)
      for (int64_t i = box[d].first; i < box[d].second; ++i) next.push_back(base * stored[d] + i);
    out = std::move(next);
  }
  return out;
}

std::string box_words(const std::vector<std::pair<int64_t, int64_t>>& box, const Shape& stored) {
  std::string s;
  for (size_t d = 0; d < box.size(); ++d)
    if (box[d].first != 0 || box[d].second != stored[d])
      s += (s.empty() ? "" : ", ") + std::string("dim ") + std::to_string(d) + " " + std::to_string(box[d].first) +
           ".." + std::to_string(box[d].second - 1);
  return s.empty() ? "whole" : s;
}

double normwise(const std::vector<double>& got, const std::vector<double>& ref, double* scale = nullptr) {
  double d2 = 0, r2 = 0, dot = 0;
  for (size_t i = 0; i < got.size(); ++i)
    d2 += (got[i] - ref[i]) * (got[i] - ref[i]), r2 += ref[i] * ref[i], dot += got[i] * ref[i];
  if (scale) *scale = r2 > 0 ? dot / r2 : std::nan("");
  return r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
}

std::vector<double> gather_at(const std::vector<double>& v, const std::vector<int64_t>& index) {
  std::vector<double> out(index.size());
  for (size_t i = 0; i < index.size(); ++i) out[i] = v[static_cast<size_t>(index[i])];
  return out;
}

}  // namespace

ShardPlan ShardPlan::read(const Dump& d) {
  ShardPlan p;
  const json& m = d.manifest;
  if (!m.contains("placements")) return p;
  const std::string where = d.dir + "/manifest.json";
  if (!m["placements"].is_object() || !m.contains("mesh") || !m["mesh"].is_object())
    throw ConfigError(d.role, where + ": $.placements needs an object and $.mesh {dims, shape, ranks}");
  const json& mesh = m["mesh"];
  try {
    p.dims_ = mesh.at("dims").get<std::vector<std::string>>();
    p.sizes_ = mesh.at("shape").get<std::vector<int64_t>>();
    p.coords_ = mesh.at("ranks").get<std::vector<std::vector<int64_t>>>();
  } catch (const json::exception&) {
    throw ConfigError(d.role, where + ": $.mesh needs dims (names), shape (sizes) and ranks (each rank's coordinates)");
  }
  int64_t world = 1;
  for (int64_t s : p.sizes_) world *= s;
  if (p.dims_.size() != p.sizes_.size() || world < 1 || static_cast<int64_t>(p.coords_.size()) != world)
    throw ConfigError(d.role, where + ": $.mesh: " + std::to_string(p.dims_.size()) + " dims, " +
                                  std::to_string(p.sizes_.size()) + " sizes, " + std::to_string(p.coords_.size()) +
                                  " ranks: expected as many ranks as the sizes' product (" + std::to_string(world) +
                                  ")");
  for (size_t r = 0; r < p.coords_.size(); ++r)
    for (size_t k = 0; k < p.sizes_.size(); ++k)
      if (p.coords_[r].size() != p.sizes_.size() || p.coords_[r][k] < 0 || p.coords_[r][k] >= p.sizes_[k])
        throw ConfigError(d.role, where + ": $.mesh.ranks[" + std::to_string(r) + "] is not a coordinate of the mesh");
  std::map<std::vector<int64_t>, size_t> seen;  // every coordinate held by one rank: a copy's representative exists
  for (size_t r = 0; r < p.coords_.size(); ++r)
    if (auto [it, fresh] = seen.emplace(p.coords_[r], r); !fresh)
      throw ConfigError(d.role, where + ": $.mesh.ranks: ranks " + std::to_string(it->second) + " and " +
                                    std::to_string(r) + " have the same coordinates");
  p.placements_ = m["placements"];
  return p;
}

std::string ShardPlan::rank_words(int64_t r) const {
  std::string s = "rank " + std::to_string(r) + " (";
  for (size_t k = 0; k < dims_.size(); ++k)
    s += (k ? ", " : "") + dims_[k] + " " + std::to_string(coords_[static_cast<size_t>(r)][k]);
  return s;
}

namespace {

// A rank's flat piece [offset, numel] of a tensor of `total` elements into s; its words.
std::string flat_piece(const Dump& d, const json& piece, const std::string& at, int64_t total, Shard& s) {
  if (!piece.is_array() || piece.size() != 2 || !piece[0].is_number_integer() || !piece[1].is_number_integer())
    throw ConfigError(d.role, at + ": expected [offset, numel]");
  const int64_t off = piece[0].get<int64_t>(), n = piece[1].get<int64_t>();
  if (off < 0 || n < 0 || off + n > total)
    throw ConfigError(d.role, at + ": [" + std::to_string(off) + ", " + std::to_string(n) +
                                  "] is outside the tensor's " + std::to_string(total) + " elements");
  s.flat_offset = off;
  for (int64_t i = 0; i < n; ++i) s.index.push_back(off + i);
  return "flat " + std::to_string(off) + ".." + std::to_string(off + n - 1);
}

}  // namespace

std::vector<std::string> ShardPlan::flat_replicas(const Dump& d, const json& spec, const std::string& at) const {
  std::vector<std::string> out(dims_.size());
  if (!spec.contains("replicate")) return out;
  if (!spec["replicate"].is_array())
    throw ConfigError(d.role, at + ".replicate: expected the mesh dims the flat pieces are copies over");
  for (const json& v : spec["replicate"]) {
    const auto k = v.is_string() ? std::find(dims_.begin(), dims_.end(), v.get<std::string>()) : dims_.end();
    if (k == dims_.end()) throw ConfigError(d.role, at + ".replicate: " + v.dump() + " is not a mesh dim");
    out[static_cast<size_t>(k - dims_.begin())] = *k;
  }
  return out;
}

ShardedTensor ShardPlan::load(const Dump& d, const SafetensorsFile& f, const std::string& where, const std::string& key,
                              const std::string& name, const Shape& shape) const {
  const json& spec = placements_.at(key);
  const std::string at = where + ": $.placements[\"" + key + "\"]";
  ShardedTensor t;
  try {
    t.stored = spec.at("stored").get<Shape>();
    t.transposed = spec.value("transposed", false);
  } catch (const json::exception&) {
    throw ConfigError(d.role, at + " needs \"stored\" (the full shape as the shards hold it)");
  }
  Shape want = shape;
  if (t.transposed && want.size() == 2) std::swap(want[0], want[1]);
  if (t.stored != want || (t.transposed && shape.size() != 2))
    throw ConfigError(d.role, at + ": stored " + shape_str(t.stored) + (t.transposed ? " transposed" : "") +
                                  " is not parity's " + shape_str(shape));
  const bool flat = spec.contains("flat");
  std::vector<Place> places;
  if (!flat) {
    if (!spec.contains("placements") || !spec["placements"].is_array() || spec["placements"].size() != dims_.size())
      throw ConfigError(d.role, at + ": expected \"placements\", one per mesh dim (" + std::to_string(dims_.size()) +
                                    "), or \"flat\"");
    for (const json& v : spec["placements"]) places.push_back(parse_place(v, t.stored, t.transposed, at));
  } else if (!spec["flat"].is_array() || spec["flat"].size() != coords_.size()) {
    throw ConfigError(d.role, at + ": \"flat\" holds one [offset, numel] per rank (" + std::to_string(coords_.size()) +
                                  ")");
  } else {
    t.replicate = flat_replicas(d, spec, at);
  }
  if (!flat) {
    t.replicate.assign(dims_.size(), ""), t.partial.assign(dims_.size(), "");
    for (size_t k = 0; k < places.size(); ++k)
      if (places[k].kind == Place::replicate) t.replicate[k] = dims_[k];
      else if (places[k].kind == Place::partial) t.partial[k] = dims_[k];
  }
  std::map<std::vector<int64_t>, int64_t> rep_at;  // representative's coordinates -> its shard
  std::vector<std::vector<int64_t>> rep_of(coords_.size());  // a copy's representative's coordinates
  for (size_t r = 0; r < coords_.size(); ++r) {
    Shard s;
    s.rank = static_cast<int64_t>(r), s.coords = coords_[r];
    std::string how;
    if (flat) {
      how = flat_piece(d, spec["flat"][r], at + ".flat[" + std::to_string(r) + "]", numel(t.stored), s);
    } else {
      for (int64_t len : t.stored) s.box.emplace_back(0, len);
      for (size_t k = 0; k < places.size(); ++k) {
        const Place& p = places[k];
        how += (how.empty() ? "" : ", ") + dims_[k] + " " + p.word;
        if (p.kind != Place::shard) continue;
        auto& [lo, hi] = s.box[static_cast<size_t>(p.dim)];
        const int64_t len = hi - lo, cs = (len + sizes_[k] - 1) / sizes_[k], i = coords_[r][k];
        const int64_t a = lo + std::min(i * cs, len), b = lo + std::min((i + 1) * cs, len);
        lo = a, hi = b;
      }
      s.index = box_index(s.box, t.stored);
      how += ": " + box_words(s.box, t.stored);
    }
    std::vector<int64_t> rep = coords_[r];  // a copy's representative: coordinate 0 of the Replicate dims
    for (size_t k = 0; k < rep.size(); ++k)
      if (!t.replicate[k].empty() && rep[k] != 0)
        rep[k] = 0, s.replicate_over += (s.replicate_over.empty() ? "" : ", ") + dims_[k];
    if (s.replicate_over.empty()) rep_at[coords_[r]] = static_cast<int64_t>(r);
    else rep_of[r] = rep;
    s.where = rank_words(s.rank) + "; " + how + ")";
    const std::string stored_name = name + "@" + std::to_string(r);
    if (!f.contains(stored_name))
      throw ConfigError(d.role, where + " has no shard \"" + stored_name + "\" (" + s.where + ")");
    const Shape got = f.shape(stored_name);
    if (numel(got) != static_cast<int64_t>(s.index.size()) ||
        (!flat && got != [&] { Shape w; for (auto [lo, hi] : s.box) w.push_back(hi - lo); return w; }()))
      throw ConfigError(d.role, where + ": shard \"" + stored_name + "\" has shape " + shape_str(got) + ", but " +
                                    s.where + " gives " + std::to_string(s.index.size()) + " elements");
    s.values = stored_doubles(d, f, where, stored_name, Stored::real);
    t.shards.push_back(std::move(s));
  }
  for (size_t r = 0; r < rep_of.size(); ++r)
    if (!rep_of[r].empty()) t.shards[r].copy_of = rep_at.at(rep_of[r]);
  return t;
}

std::vector<double> assemble_stored(const ShardedTensor& t, std::vector<std::string>& gaps) {
  std::vector<double> v(static_cast<size_t>(numel(t.stored)), 0.0);
  std::vector<int64_t> held(v.size(), -1);  // flat pieces: the rank holding each element
  for (const Shard& s : t.shards) {
    if (s.copy_of >= 0) continue;
    for (size_t i = 0; i < s.index.size(); ++i) {
      const auto e = static_cast<size_t>(s.index[i]);
      v[e] += s.values[i];
      if (s.flat_offset < 0) continue;
      if (held[e] >= 0 && gaps.size() < 4)
        gaps.push_back("flat pieces overlap at element " + std::to_string(e) + ": " +
                       t.shards[static_cast<size_t>(held[e])].where + " and " + s.where);
      held[e] = s.rank;
    }
  }
  if (!t.shards.empty() && t.shards[0].flat_offset >= 0)
    for (size_t e = 0; e < held.size(); ++e)
      if (held[e] < 0) {
        gaps.push_back("no rank's flat piece holds element " + std::to_string(e));
        break;
      }
  return v;
}

std::vector<double> assemble(const ShardedTensor& t, std::vector<std::string>& gaps) {
  std::vector<double> s = assemble_stored(t, gaps);
  if (!t.transposed) return s;
  const int64_t a = t.stored[0], b = t.stored[1];  // stored (a, b) -> parity (b, a)
  std::vector<double> out(s.size());
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j) out[static_cast<size_t>(j * a + i)] = s[static_cast<size_t>(i * b + j)];
  return out;
}

std::vector<double> to_stored(const ShardedTensor& t, const std::vector<double>& p) {
  if (!t.transposed) return p;
  const int64_t a = t.stored[0], b = t.stored[1];
  std::vector<double> out(p.size());
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j) out[static_cast<size_t>(i * b + j)] = p[static_cast<size_t>(j * a + i)];
  return out;
}

namespace {

bool is_partial(const ShardedTensor& t, size_t j) { return j < t.partial.size() && !t.partial[j].empty(); }

// The shards on `from`'s line: the same coordinates as `from` except on the dims `free` marks.
// Their values summed (they hold the same box or flat piece), and their ranks.
std::vector<double> line_sum(const ShardedTensor& t, const Shard& from, const std::vector<bool>& free,
                             std::vector<int64_t>* ranks = nullptr) {
  std::vector<double> sum(from.values.size(), 0.0);
  for (const Shard& s : t.shards) {
    bool on = s.index == from.index;
    for (size_t j = 0; on && j < s.coords.size(); ++j) on = free[j] || s.coords[j] == from.coords[j];
    if (!on) continue;
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += s.values[i];
    if (ranks) ranks->push_back(s.rank);
  }
  return sum;
}

std::string ranks_words(const std::vector<int64_t>& r) {
  std::string s = r.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  return s;
}

// What box `rep` sums to if each copy along Replicate dim k that differs from its representative
// holds its own part: per part (its Partial coordinates), the copies along k summed where they
// differ, the representative alone where they agree; `differs` set when any does.
std::vector<double> own_parts_sum(const ShardedTensor& t, const Shard& rep, size_t k, bool& differs) {
  std::vector<double> sum(rep.values.size(), 0.0);
  for (const Shard& part : t.shards) {
    bool on = part.copy_of < 0 && part.index == rep.index;
    for (size_t j = 0; on && j < part.coords.size(); ++j) on = is_partial(t, j) || part.coords[j] == rep.coords[j];
    if (!on) continue;
    std::vector<double> line = part.values;
    bool apart = false;
    for (const Shard& s : t.shards) {
      bool along = s.copy_of == part.rank;
      for (size_t j = 0; along && j < s.coords.size(); ++j) along = j == k || s.coords[j] == part.coords[j];
      if (!along) continue;
      apart = apart || s.values != part.values || s.index != part.index;
      if (s.index == part.index)
        for (size_t i = 0; i < line.size(); ++i) line[i] += s.values[i];
    }
    differs = differs || apart;
    const std::vector<double>& add = apart ? line : part.values;
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += add[i];
  }
  return sum;
}

// A copy that differs, when the tensor has Partial dims: its line's sum over them against the
// reference's slice, beside its representative's line's.
std::string partial_sum_check(const ShardedTensor& t, const Shard& s, const std::vector<double>& ref_stored,
                              double bound) {
  std::vector<bool> free(s.coords.size());
  std::string over;
  for (size_t j = 0; j < free.size(); ++j)
    if ((free[j] = is_partial(t, j))) over += (over.empty() ? "" : ", ") + t.partial[j];
  if (over.empty()) return "";
  std::vector<int64_t> mine, theirs;
  const std::vector<double> ref = gather_at(ref_stored, s.index);
  const double e = normwise(line_sum(t, s, free, &mine), ref);
  const double e0 = normwise(line_sum(t, t.shards[static_cast<size_t>(s.copy_of)], free, &theirs), ref);
  char buf[160];
  if (e <= bound) {
    std::snprintf(buf, sizeof buf, "; its sum over %s (%s) is the reference's: the parts are split otherwise, their "
                                   "sum agrees", over.c_str(), ranks_words(mine).c_str());
    return buf;
  }
  std::snprintf(buf, sizeof buf, "; its sum over %s (%s) is not the reference's (normwise %.3g)", over.c_str(),
                ranks_words(mine).c_str(), e);
  return buf + std::string(e0 <= bound ? " while " + ranks_words(theirs) + "'s is" : ", nor " + ranks_words(theirs) +
                                                                                          "'s");
}

}  // namespace

std::vector<std::string> copies_differ(const ShardedTensor& t, const std::vector<double>& ref_stored, double bound,
                                       std::string& summed) {
  std::vector<std::string> out;
  for (const Shard& s : t.shards)
    if (s.copy_of >= 0 && (s.values != t.shards[static_cast<size_t>(s.copy_of)].values ||
                           s.index != t.shards[static_cast<size_t>(s.copy_of)].index))
      out.push_back(s.where + " differs from " + t.shards[static_cast<size_t>(s.copy_of)].where +
                    " though Replicate over " + s.replicate_over + partial_sum_check(t, s, ref_stored, bound));
  summed.clear();
  if (out.empty()) return out;
  for (size_t k = 0; k < t.replicate.size(); ++k) {  // along one Replicate dim: each box's parts summed
    if (t.replicate[k].empty()) continue;
    bool differ = false, all_match = true;
    for (const Shard& rep : t.shards) {
      bool first_part = rep.copy_of < 0;  // one sum per box: from its part at coordinate 0 on the Partial dims
      for (size_t j = 0; j < rep.coords.size(); ++j) first_part = first_part && (!is_partial(t, j) || !rep.coords[j]);
      if (!first_part) continue;
      bool line_differs = false;
      const std::vector<double> sum = own_parts_sum(t, rep, k, line_differs);
      if (!line_differs) continue;
      differ = true;
      all_match = all_match && normwise(sum, gather_at(ref_stored, rep.index)) <= bound;
    }
    if (differ && all_match) summed += (summed.empty() ? "" : ", ") + t.replicate[k];
  }
  return out;
}

std::string misplaced(const Shard& s, const Shape& stored, const std::vector<double>& ref_stored) {
  if (s.values == gather_at(ref_stored, s.index) || s.values.empty()) return "";
  const auto match = [&](const std::vector<int64_t>& index) { return s.values == gather_at(ref_stored, index); };
  if (s.flat_offset >= 0) {
    const auto n = static_cast<int64_t>(s.values.size()), total = static_cast<int64_t>(ref_stored.size());
    for (int64_t off = 0; off + n <= total; ++off) {
      if (ref_stored[static_cast<size_t>(off)] != s.values[0]) continue;  // the first element first: one pass
      std::vector<int64_t> index(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) index[static_cast<size_t>(i)] = off + i;
      if (off != s.flat_offset && match(index))
        return s.where + " holds the reference's elements " + std::to_string(off) + ".." + std::to_string(off + n - 1) +
               ": a wrong shard offset";
    }
    return "";
  }
  for (size_t d = 0; d < s.box.size(); ++d) {  // slide the box along each split dim
    const int64_t len = s.box[d].second - s.box[d].first;
    if (len == stored[d]) continue;
    for (int64_t lo = 0; lo + len <= stored[d]; ++lo) {
      if (lo == s.box[d].first) continue;
      auto box = s.box;
      box[d] = {lo, lo + len};
      int64_t first = 0;  // the box's first element, checked before the whole box: one pass over the offsets
      for (size_t k = 0; k < box.size(); ++k) first = first * stored[k] + box[k].first;
      if (ref_stored[static_cast<size_t>(first)] != s.values[0]) continue;
      if (match(box_index(box, stored)))
        return s.where + " holds the reference's " + box_words(box, stored) + ": a wrong shard offset";
    }
  }
  return "";
}

std::string worst_shard(const ShardedTensor& t, const std::vector<double>& ref_stored,
                        const std::vector<double>& got_stored, double bound) {
  double worst = bound, scale = 0;
  const Shard* at = nullptr;
  for (const Shard& s : t.shards) {
    if (s.copy_of >= 0) continue;
    double sc = 0;
    const double e = normwise(gather_at(got_stored, s.index), gather_at(ref_stored, s.index), &sc);
    if (e > worst || std::isnan(e)) worst = e, scale = sc, at = &s;
  }
  if (!at) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, ": normwise %.3g, scale %.4g", worst, scale);
  return "worst shard " + at->where + buf;
}

}  // namespace parity
