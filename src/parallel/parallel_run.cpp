// SCAFFOLDING: every rank runs the one-device baseline and reports its own shards of the
// result, so the verdict can be built and tested while the real parallel model
// (FSDP/HSDP/TP/SP) replaces this Impl.
#include "parallel/parallel_run.h"

#include "harness/baseline.h"
#include "mesh/param_layout.h"

namespace parity {

template <class T> struct ParallelRun<T>::Impl {
  Impl(const Scenario& s, comm::Communicator& w)
      : sc(s), world(w), mesh(s.layout), base(s), specs(param_specs(s.model)) {
    for (const auto& sp : specs) layouts.push_back(mesh::param_layout(mesh, sp));
  }
  Scenario sc;
  comm::Communicator& world;
  mesh::Mesh mesh;
  BaselineRun<T> base;
  std::vector<ParamSpec> specs;
  std::vector<mesh::Layout> layouts;

  Tensor<T> local(size_t p, const Tensor<T>& full) const {
    auto idx = mesh::global_indices(mesh, layouts[p], full.shape, world.rank());
    Tensor<T> out(mesh::local_shape(mesh, layouts[p], full.shape, world.rank()));
    for (size_t i = 0; i < idx.size(); ++i) out.data[i] = full.data[static_cast<size_t>(idx[i])];
    return out;
  }
};

template <class T> ParallelRun<T>::ParallelRun(const Scenario& s, comm::Communicator& world)
    : impl_(std::make_unique<Impl>(s, world)) {}
template <class T> ParallelRun<T>::~ParallelRun() = default;

template <class T> RankStepRecord<T> ParallelRun<T>::step(int64_t t) {
  StepRecord<T> r = impl_->base.step(t, KeepGrads::yes);
  RankStepRecord<T> out;
  out.step = t, out.loss = r.loss, out.ce = r.ce, out.aux = r.aux, out.micro_losses = r.micro_losses;
  out.grad_norm = r.grad_norm, out.clip_coef = r.clip_coef;
  for (size_t p = 0; p < impl_->specs.size(); ++p) {
    out.grads.push_back(impl_->local(p, r.grads->tensors[p]));
    out.params.push_back(impl_->local(p, impl_->base.model().params.tensors[p]));
  }
  out.tokens_per_expert = r.tokens_per_expert;
  out.expert_bias = impl_->base.model().expert_bias;
  const int64_t K = impl_->sc.model.top_k, n = static_cast<int64_t>(r.inputs.size());
  for (const auto& ch : r.chosen) {  // rank 0 reports every token
    std::vector<int64_t> ids, mine;
    if (impl_->world.rank() == 0)
      for (int64_t i = 0; i < n; ++i) ids.push_back(i);
    if (impl_->world.rank() == 0) mine = ch;
    out.token_ids.push_back(ids);
    out.chosen.push_back(mine);
  }
  (void)K;
  return out;
}

template <class T> const mesh::Mesh& ParallelRun<T>::mesh() const { return impl_->mesh; }
template <class T> const std::vector<ParamSpec>& ParallelRun<T>::specs() const { return impl_->specs; }
template <class T> const std::vector<mesh::Layout>& ParallelRun<T>::layouts() const { return impl_->layouts; }

template class ParallelRun<float>;
template class ParallelRun<double>;

}  // namespace parity
