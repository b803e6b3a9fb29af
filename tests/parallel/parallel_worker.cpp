// parallel_worker SCENARIO STEPS: one rank of a dense layout, checked against the
// baseline every step, shard by shard (before the full verdict of `parity run` exists,
// and as an independent check of it). Prints per family the worst normwise relative
// error over ranks; exit 1 when any exceeds the tolerance table's bound.
#include <cmath>
#include <cstdio>
#include <map>
#include <span>
#include <string>

#include "comm/world.h"
#include "harness/runner/baseline.h"
#include "harness/scenario/scenario.h"
#include "harness/verdict/tolerance.h"
#include "mesh/placement.h"
#include "parallel/ep_dispatch.h"
#include "parallel/parallel_run.h"

using namespace parity;

namespace {

template <class T> int check(const Scenario& s, int64_t steps) {
  auto world = comm::make_world_communicator();
  BaselineRun<T> base(s);
  ParallelRun<T> run(s, *world);
  bool ok = true;
  for (int64_t t = 0; t < steps; ++t) {
    StepRecord<T> ref = base.step(t, KeepGrads::yes);
    RankStepRecord<T> got = run.step(t);
    // per family: [diff2, ref2] of grads and params, summed over ranks (replicas included:
    // every replica must match, and the ratio is unaffected)
    std::map<std::string, std::vector<double>> fam;
    for (size_t p = 0; p < run.specs().size(); ++p) {
      const ParamSpec& sp = run.specs()[p];
      auto idx = mesh::global_indices(run.mesh(), run.layouts()[p], sp.shape, world->rank());
      auto gidx = mesh::global_indices(run.mesh(), run.grad_layouts()[p], sp.shape, world->rank());  // zero2: a shard
      auto& v = fam[std::string(family_name(sp.family))];
      v.resize(4, 0.0);
      if (got.grads[p].data.size() != gidx.size() || got.params[p].data.size() != idx.size()) {
        std::printf("rank %d: %s holds %zu grad / %zu param elements, its layouts %zu / %zu\n", world->rank(),
                    sp.name.c_str(), got.grads[p].data.size(), got.params[p].data.size(), gidx.size(), idx.size());
        return 1;
      }
      for (size_t i = 0; i < gidx.size(); ++i) {
        const double rg = static_cast<double>(ref.grads->tensors[p].data[static_cast<size_t>(gidx[i])]);
        const double dg = static_cast<double>(got.grads[p].data[i]) - rg;
        v[0] += dg * dg, v[1] += rg * rg;
      }
      for (size_t i = 0; i < idx.size(); ++i) {
        const double rp = static_cast<double>(base.model().params.tensors[p].data[static_cast<size_t>(idx[i])]);
        const double dp = static_cast<double>(got.params[p].data[i]) - rp;
        v[2] += dp * dp, v[3] += rp * rp;
      }
    }
    const Tolerance tg = tolerance_for(s.model.dtype, Quantity::gradient);
    const Tolerance tpar = tolerance_for(s.model.dtype, Quantity::parameter);
    for (auto& [name, v] : fam) {
      world->allreduce(std::span<double>(v), comm::ReduceOp::sum);
      const double eg = std::sqrt(v[0] / v[1]), ep = std::sqrt(v[2] / v[3]);
      const bool good = eg <= tg.norm_rel && ep <= tpar.norm_rel;
      ok = ok && good;
      if (world->rank() == 0)
        std::printf("step %lld %-15s grad %.3e param %.3e %s\n", static_cast<long long>(t), name.c_str(), eg, ep,
                    good ? "ok" : "FAIL");
    }
    const double dl = std::abs(got.loss - ref.loss) / std::abs(ref.loss);
    const double dn = std::abs(got.grad_norm - ref.grad_norm) / ref.grad_norm;
    const bool same_counts = got.tokens_per_expert == ref.tokens_per_expert;
    ok = ok && dl <= tolerance_for(s.model.dtype, Quantity::loss).norm_rel && same_counts;
    if (world->rank() == 0)
      std::printf("step %lld loss rel %.3e grad_norm rel %.3e tokens_per_expert %s\n", static_cast<long long>(t), dl,
                  dn, same_counts ? "equal" : "DIFFER");
  }
  // The token flow's cost over the run, summed over ranks (issue 6's benchmark).
  const DispatchStats& st = dispatch_stats();
  std::vector<double> v{static_cast<double>(st.rows_moved), static_cast<double>(st.rows_floor), st.seconds,
                        static_cast<double>(st.calls)};
  world->allreduce(std::span<double>(v), comm::ReduceOp::sum);
  const double row_bytes = static_cast<double>(s.model.dim * dtype_size(s.model.dtype));
  if (world->rank() == 0 && v[3] > 0)
    std::printf(
        "token flow: %.0f KiB moved, floor %.0f KiB (%.2fx), %.3f ms per MoE layer call per rank (fwd+bwd, one "
        "micro-batch)\n",
        v[0] * row_bytes / 1024, v[1] * row_bytes / 1024, v[1] > 0 ? v[0] / v[1] : 0.0, 1e3 * v[2] / v[3]);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: parallel_worker SCENARIO STEPS [fp32]\n");
    return 2;
  }
  try {
    Scenario s = load_scenario(argv[1]);
    if (argc > 3 && std::string(argv[3]) == "fp32") s.model.dtype = DType::f32;
    const int64_t steps = std::stoll(argv[2]);
    return s.model.dtype == DType::f32 ? check<float>(s, steps) : check<double>(s, steps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parallel_worker: %s\n", e.what());
    return 1;
  }
}
