#include "parallel/sharded_param.h"

#include <algorithm>
#include <span>
#include <string>

#include "core/error.h"
#include "mesh/param_layout.h"

namespace parity {

namespace {

// Flat global indices of the elements of the model-parallel-local tensor whose index along
// dimension `d` lies in `piece`, row-major (the order of this rank's local tensor).
std::vector<int64_t> piece_global_indices(const Shape& global, const Shape& mp_shape,
                                          const std::vector<int64_t>& offset, size_t d, mesh::Range piece) {
  Shape local = mp_shape;
  local[d] = piece.size();
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(numel(local)));
  Shape idx(local.size(), 0);
  for (int64_t e = 0; e < numel(local); ++e) {
    int64_t rem = e;
    for (size_t k = local.size(); k-- > 0;) {
      idx[k] = rem % local[k];
      rem /= local[k];
    }
    int64_t flat = 0;
    for (size_t k = 0; k < global.size(); ++k)
      flat = flat * global[k] + idx[k] + offset[k] + (k == d ? piece.begin : 0);
    out.push_back(flat);
  }
  return out;
}

}  // namespace

template <class T>
ShardedParam<T>::ShardedParam(const ParamSpec& spec, const mesh::Mesh& m, const mesh::TensorLayout& layout, int rank,
                              uint64_t seed, const std::vector<MpChunk>& mp, DataParallelGroups groups)
    : spec_(spec), mp_(mp), mp_shape_(spec.shape), mp_offset_(spec.shape.size(), 0), groups_(groups) {
  for (const MpChunk& c : mp) {
    if (c.n == 1) continue;
    mesh::Range r = mesh::chunk(spec.shape[static_cast<size_t>(c.dim)], c.n, c.i);
    mp_shape_[static_cast<size_t>(c.dim)] = r.size();
    mp_offset_[static_cast<size_t>(c.dim)] = r.begin;
    mp_sharded_ = true;
  }
  if (mp_shape_.empty()) mp_shape_ = {1}, mp_offset_ = {0};  // a scalar is one row
  fsdp_dim_ = spec.shape.empty() ? 0 : mesh::fsdp_shard_dim(m, spec);
  const auto d = static_cast<size_t>(fsdp_dim_);
  for (size_t k = 0; k < d; ++k) outer_ *= mp_shape_[k];
  for (size_t k = d + 1; k < mp_shape_.size(); ++k) inner_ *= mp_shape_[k];
  const int fsdp_n = groups.fsdp ? groups.fsdp->size() : 1, fsdp_i = groups.fsdp ? groups.fsdp->rank() : 0;
  for (int i = 0; i < fsdp_n; ++i) {
    pieces_.push_back(mesh::chunk(mp_shape_[d], fsdp_n, i));
    piece_counts_.push_back(outer_ * pieces_.back().size() * inner_);
  }
  if (!mesh::holds(m, layout, rank)) {  // another pipeline stage's parameter: nothing here
    local = Tensor<T>(Shape(std::max<size_t>(spec.shape.size(), 1), 0));
    return;
  }
  const mesh::Range mine = pieces_[static_cast<size_t>(fsdp_i)];
  const Shape global = spec.shape.empty() ? Shape{1} : spec.shape;
  std::vector<int64_t> idx = piece_global_indices(global, mp_shape_, mp_offset_, d, mine);
  if (idx != mesh::global_indices(m, layout, spec.shape, rank))
    throw Error("ShardedParam: " + spec.name + " on rank " + std::to_string(rank) +
                ": FSDP x model-parallel storage disagrees with mesh::param_layout " + mesh::layout_str(layout));
  if (spec.shape.empty()) mp_shape_ = {};
  Shape local_shape = mp_shape_;
  if (!local_shape.empty()) local_shape[d] = mine.size();
  local = Tensor<T>(local_shape);
  init_elements(spec, seed, idx.data(), static_cast<int64_t>(idx.size()), local.ptr());
}

template <class T> Buffer<T> ShardedParam<T>::pack(const Tensor<T>& mp) const {
  if (pieces_consecutive()) return mp.data;
  Buffer<T> out;
  out.reserve(mp.data.size());
  const int64_t len = pieces_.back().end;  // mp_shape_[fsdp_dim_]
  for (const mesh::Range& p : pieces_)
    for (int64_t o = 0; o < outer_; ++o) {
      const auto from = mp.data.begin() + (o * len + p.begin) * inner_;
      out.insert(out.end(), from, from + p.size() * inner_);
    }
  return out;
}

template <class T> Tensor<T> ShardedParam<T>::unpack(Buffer<T> packed) const {
  Tensor<T> out(mp_shape_);
  if (pieces_consecutive()) {
    out.data = std::move(packed);
    return out;
  }
  const int64_t len = pieces_.back().end;  // mp_shape_[fsdp_dim_]
  auto at = packed.begin();
  for (const mesh::Range& p : pieces_)
    for (int64_t o = 0; o < outer_; ++o) {
      std::copy_n(at, p.size() * inner_, out.data.begin() + (o * len + p.begin) * inner_);
      at += p.size() * inner_;
    }
  return out;
}

template <class T> Tensor<T> ShardedParam<T>::piece(const Tensor<T>& mp_local) const {
  Tensor<T> out(local.shape);
  const int i = groups_.fsdp ? groups_.fsdp->rank() : 0;
  int64_t at = 0;
  for (int k = 0; k < i; ++k) at += piece_counts_[static_cast<size_t>(k)];
  const Buffer<T> packed = pieces_consecutive() ? Buffer<T>() : pack(mp_local);
  const Buffer<T>& from = pieces_consecutive() ? mp_local.data : packed;
  std::copy_n(from.begin() + at, out.numel(), out.data.begin());
  return out;
}

template <class T> Tensor<T> ShardedParam<T>::gather() const {
  if (!groups_.fsdp || groups_.fsdp->size() == 1) return local;
  Buffer<T> all(static_cast<size_t>(numel(mp_shape_)));
  groups_.fsdp->allgatherv(std::span<const T>(local.data), std::span<T>(all), std::span<const int64_t>(piece_counts_));
  return unpack(std::move(all));
}

template <class T> Tensor<T> ShardedParam<T>::reduce(const Tensor<T>& mp_local_grad) const {
  Tensor<T> out(local.shape);
  if (!groups_.fsdp || groups_.fsdp->size() == 1) {
    out.data = mp_local_grad.data;
  } else {
    const Buffer<T> packed = pieces_consecutive() ? Buffer<T>() : pack(mp_local_grad);
    const Buffer<T>& pieces = pieces_consecutive() ? mp_local_grad.data : packed;
    groups_.fsdp->reduce_scatterv(std::span<const T>(pieces), std::span<T>(out.data),
                                  std::span<const int64_t>(piece_counts_), comm::ReduceOp::sum);
  }
  if (groups_.replicate->size() > 1) groups_.replicate->allreduce(std::span<T>(out.data), comm::ReduceOp::sum);
  return out;
}

namespace {

// Offsets of piece i of parameter p inside its mp-local tensor (pieces are consecutive).
template <class T> std::vector<int64_t> piece_offsets(const ShardedParam<T>& p) {
  std::vector<int64_t> off{0};
  for (int64_t c : p.piece_counts()) off.push_back(off.back() + c);
  return off;
}

template <class T> void check_same_groups(const std::vector<const ShardedParam<T>*>& ps) {
  for (const auto* p : ps)
    if (p->groups().fsdp != ps.front()->groups().fsdp || p->groups().replicate != ps.front()->groups().replicate)
      throw Error("gather_all/reduce_all: " + p->spec().name + " has other data-parallel groups than " +
                  ps.front()->spec().name);
}

}  // namespace

template <class T> std::vector<Tensor<T>> gather_all(const std::vector<const ShardedParam<T>*>& ps) {
  std::vector<Tensor<T>> out;
  if (ps.empty()) return out;
  check_same_groups(ps);
  if (!ps.front()->groups().fsdp || ps.front()->groups().fsdp->size() == 1) {
    for (const auto* p : ps) out.push_back(p->local);
    return out;
  }
  comm::Communicator& g = *ps.front()->groups().fsdp;
  const auto n = static_cast<size_t>(g.size());
  std::vector<int64_t> counts(n, 0);
  Buffer<T> mine;
  for (const auto* p : ps) {
    for (size_t i = 0; i < n; ++i) counts[i] += p->piece_counts()[i];
    mine.insert(mine.end(), p->local.data.begin(), p->local.data.end());
  }
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  Buffer<T> all(static_cast<size_t>(total));
  g.allgatherv(std::span<const T>(mine), std::span<T>(all), std::span<const int64_t>(counts));
  std::vector<Buffer<T>> packed;  // each parameter's pieces, piece after piece
  for (const auto* p : ps) packed.emplace_back(static_cast<size_t>(numel(p->mp_shape())));
  std::vector<std::vector<int64_t>> offs;  // once per parameter, not once per (rank, parameter): O(n), not O(n^2)
  for (const auto* p : ps) offs.push_back(piece_offsets(*p));
  int64_t at = 0;  // rank i's block: every parameter's piece i in order
  for (size_t i = 0; i < n; ++i)
    for (size_t q = 0; q < ps.size(); ++q) {
      const auto& off = offs[q];
      std::copy_n(all.begin() + at, off[i + 1] - off[i], packed[q].begin() + off[i]);
      at += off[i + 1] - off[i];
    }
  for (size_t q = 0; q < ps.size(); ++q) out.push_back(ps[q]->unpack(std::move(packed[q])));
  return out;
}

template <class T>
std::vector<Tensor<T>> reduce_all(const std::vector<const ShardedParam<T>*>& ps,
                                  const std::vector<const Tensor<T>*>& grads) {
  std::vector<Tensor<T>> out;
  if (ps.empty()) return out;
  check_same_groups(ps);
  comm::Communicator* g = ps.front()->groups().fsdp;  // nullptr: unsharded, one piece
  const auto n = static_cast<size_t>(g ? g->size() : 1);
  std::vector<int64_t> counts(n, 0);
  std::vector<Buffer<T>> packed;  // each gradient's pieces, piece after piece
  for (size_t q = 0; q < ps.size(); ++q)
    packed.push_back(ps[q]->pieces_consecutive() ? Buffer<T>() : ps[q]->pack(*grads[q]));
  std::vector<std::vector<int64_t>> offs;
  for (const auto* p : ps) offs.push_back(piece_offsets(*p));
  Buffer<T> blocks;  // rank-major: block i = every parameter's piece i
  for (size_t i = 0; i < n; ++i)
    for (size_t q = 0; q < ps.size(); ++q) {
      const auto& off = offs[q];
      const Buffer<T>& gq = ps[q]->pieces_consecutive() ? grads[q]->data : packed[q];
      blocks.insert(blocks.end(), gq.begin() + off[i], gq.begin() + off[i + 1]);
      counts[i] += off[i + 1] - off[i];
    }
  Buffer<T> mine(static_cast<size_t>(counts[static_cast<size_t>(g ? g->rank() : 0)]));
  if (n == 1)
    mine = blocks;
  else
    g->reduce_scatterv(std::span<const T>(blocks), std::span<T>(mine), std::span<const int64_t>(counts),
                      comm::ReduceOp::sum);
  comm::Communicator& rep = *ps.front()->groups().replicate;
  if (rep.size() > 1) rep.allreduce(std::span<T>(mine), comm::ReduceOp::sum);
  int64_t at = 0;
  for (const auto* p : ps) {
    out.emplace_back(p->local.shape);
    std::copy_n(mine.begin() + at, p->local.numel(), out.back().data.begin());
    at += p->local.numel();
  }
  return out;
}

template class ShardedParam<float>;
template class ShardedParam<double>;
template std::vector<Tensor<float>> gather_all<float>(const std::vector<const ShardedParam<float>*>&);
template std::vector<Tensor<double>> gather_all<double>(const std::vector<const ShardedParam<double>*>&);
template std::vector<Tensor<float>> reduce_all<float>(const std::vector<const ShardedParam<float>*>&,
                                                      const std::vector<const Tensor<float>*>&);
template std::vector<Tensor<double>> reduce_all<double>(const std::vector<const ShardedParam<double>*>&,
                                                        const std::vector<const Tensor<double>*>&);

}  // namespace parity
