#include "parallel/sharded_param.h"

#include <algorithm>
#include <span>
#include <string>

#include "core/error.h"

namespace parity {

namespace {

// Flat global indices of the model-parallel-local tensor's dim-0 rows [r0, r1), row-major.
std::vector<int64_t> piece_global_indices(const Shape& global, const Shape& mp_shape,
                                          const std::vector<int64_t>& offset, int64_t r0, int64_t r1) {
  std::vector<int64_t> out;
  const int64_t rows = mp_shape.empty() ? 1 : mp_shape[0];
  const int64_t inner = rows == 0 ? 0 : numel(mp_shape) / rows;
  Shape idx(mp_shape.size());
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t rem = i;
      for (size_t d = mp_shape.size(); d-- > 1;) {
        idx[d] = rem % mp_shape[d];
        rem /= mp_shape[d];
      }
      if (!idx.empty()) idx[0] = r;
      int64_t flat = 0;
      for (size_t d = 0; d < global.size(); ++d) flat = flat * global[d] + idx[d] + offset[d];
      out.push_back(flat);
    }
  return out;
}

}  // namespace

template <class T>
ShardedParam<T>::ShardedParam(const ParamSpec& spec, const mesh::Mesh& m, const mesh::Layout& layout, int rank,
                              uint64_t seed, const std::vector<MpChunk>& mp, DataParallelGroups groups)
    : spec_(spec), mp_shape_(spec.shape), mp_offset_(spec.shape.size(), 0), groups_(groups) {
  for (const MpChunk& c : mp) {
    if (c.n == 1) continue;
    mesh::Range r = mesh::chunk(spec.shape[static_cast<size_t>(c.dim)], c.n, c.i);
    mp_shape_[static_cast<size_t>(c.dim)] = r.size();
    mp_offset_[static_cast<size_t>(c.dim)] = r.begin;
    mp_sharded_ = true;
  }
  const int64_t rows = mp_shape_.empty() ? 1 : mp_shape_[0];
  const int64_t inner = rows == 0 ? 0 : numel(mp_shape_) / rows;
  const int fsdp_n = groups.fsdp->size(), fsdp_i = groups.fsdp->rank();
  for (int i = 0; i < fsdp_n; ++i) piece_counts_.push_back(mesh::chunk(rows, fsdp_n, i).size() * inner);
  mesh::Range mine = mesh::chunk(rows, fsdp_n, fsdp_i);
  std::vector<int64_t> idx = piece_global_indices(spec.shape, mp_shape_, mp_offset_, mine.begin, mine.end);
  if (idx != mesh::global_indices(m, layout, spec.shape, rank))
    throw Error("ShardedParam: " + spec.name + " on rank " + std::to_string(rank) +
                ": FSDP x model-parallel storage disagrees with mesh::param_layout " + mesh::layout_str(layout));
  Shape local_shape = mp_shape_;
  if (!local_shape.empty()) local_shape[0] = mine.size();
  local = Tensor<T>(local_shape);
  init_elements(spec, seed, idx.data(), static_cast<int64_t>(idx.size()), local.ptr());
}

template <class T> Tensor<T> ShardedParam<T>::gather() const {
  if (groups_.fsdp->size() == 1) return local;
  Tensor<T> full(mp_shape_);
  groups_.fsdp->allgatherv(std::span<const T>(local.data), std::span<T>(full.data),
                           std::span<const int64_t>(piece_counts_));
  return full;
}

template <class T> Tensor<T> ShardedParam<T>::reduce(const Tensor<T>& mp_local_grad) const {
  Tensor<T> out(local.shape);
  if (groups_.fsdp->size() == 1)
    out.data = mp_local_grad.data;
  else
    groups_.fsdp->reduce_scatterv(std::span<const T>(mp_local_grad.data), std::span<T>(out.data),
                                  std::span<const int64_t>(piece_counts_), comm::ReduceOp::sum);
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
  comm::Communicator& g = *ps.front()->groups().fsdp;
  if (g.size() == 1) {
    for (const auto* p : ps) out.push_back(p->local);
    return out;
  }
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
  for (const auto* p : ps) out.emplace_back(p->mp_shape());
  int64_t at = 0;  // rank i's block: every parameter's piece i in order
  for (size_t i = 0; i < n; ++i)
    for (size_t q = 0; q < ps.size(); ++q) {
      const auto off = piece_offsets(*ps[q]);
      std::copy_n(all.begin() + at, off[i + 1] - off[i], out[q].data.begin() + off[i]);
      at += off[i + 1] - off[i];
    }
  return out;
}

template <class T>
std::vector<Tensor<T>> reduce_all(const std::vector<const ShardedParam<T>*>& ps,
                                  const std::vector<const Tensor<T>*>& grads) {
  std::vector<Tensor<T>> out;
  if (ps.empty()) return out;
  check_same_groups(ps);
  comm::Communicator& g = *ps.front()->groups().fsdp;
  const auto n = static_cast<size_t>(g.size());
  std::vector<int64_t> counts(n, 0);
  Buffer<T> blocks;  // rank-major: block i = every parameter's piece i
  for (size_t i = 0; i < n; ++i)
    for (size_t q = 0; q < ps.size(); ++q) {
      const auto off = piece_offsets(*ps[q]);
      blocks.insert(blocks.end(), grads[q]->data.begin() + off[i], grads[q]->data.begin() + off[i + 1]);
      counts[i] += off[i + 1] - off[i];
    }
  Buffer<T> mine(static_cast<size_t>(counts[static_cast<size_t>(g.rank())]));
  if (n == 1)
    mine = blocks;
  else
    g.reduce_scatterv(std::span<const T>(blocks), std::span<T>(mine), std::span<const int64_t>(counts), comm::ReduceOp::sum);
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
