// recompute_worker: one rank of a layout, run under every activation recompute mode
// (layout.recompute none, full, attention, mlp) and compared bit for bit.
//   recompute_worker SCENARIO STEPS        fp64: every step's losses, grad norm, each gradient
//       and parameter shard after the optimizer, the expert bias, the token counts and the
//       routing of full, attention and mlp must be the bytes of none's; prints the bytes the
//       layers held for the backward and the step time of each mode; exit 1 on any difference.
//   recompute_worker SCENARIO STEPS one-ulp   the same, with the test hook moving one element of
//       the attention recompute's saved input by one ulp: attention must then differ (the
//       comparison can fail).
//   recompute_worker SCENARIO route-check MODE   the test hook (parallel/recompute.h) negates
//       the saved input of every recomputed part: the recomputed MoE routing differs, and the
//       check must throw on every rank naming the layer and a token; exit 1 if it does not.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "comm/world.h"
#include "core/error.h"
#include "harness/scenario/scenario.h"
#include "parallel/parallel_run.h"
#include "parallel/recompute.h"

using namespace parity;

namespace {

// Every number a step records, flattened in a fixed order; compared as bytes.
std::vector<double> flatten(const RankStepRecord<double>& r) {
  std::vector<double> v{r.loss, r.ce, r.aux, r.grad_norm, r.clip_coef};
  v.insert(v.end(), r.micro_losses.begin(), r.micro_losses.end());
  v.insert(v.end(), r.norm_sq_by_family.begin(), r.norm_sq_by_family.end());
  for (const auto* ts : {&r.grads, &r.params})
    for (const Tensor<double>& t : *ts) v.insert(v.end(), t.data.begin(), t.data.end());
  for (const auto& b : r.expert_bias) v.insert(v.end(), b.begin(), b.end());
  for (const auto* xs : {&r.tokens_per_expert, &r.token_ids, &r.chosen})
    for (const auto& x : *xs)
      for (int64_t i : x) v.push_back(static_cast<double>(i));
  return v;
}

struct ModeRun {
  std::vector<std::vector<double>> steps;
  int64_t bytes = 0;
  double seconds = 0;
};

ModeRun run_mode(Scenario s, Recompute mode, int64_t steps, comm::Communicator& world) {
  s.layout.recompute = mode;
  ParallelRun<double> run(s, world);
  ModeRun out;
  for (int64_t t = 0; t < steps; ++t) {
    world.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    const RankStepRecord<double> r = run.step(t);
    out.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out.steps.push_back(flatten(r));
    out.bytes = std::max(out.bytes, r.activation_bytes);
  }
  return out;
}

int bitwise(const Scenario& s, int64_t steps, bool one_ulp) {
  auto world = comm::make_world_communicator();
  const int rank = world->rank();
  std::vector<ModeRun> runs;
  for (Recompute m : {Recompute::none, Recompute::full, Recompute::attention, Recompute::mlp}) {
    if (one_ulp && m == Recompute::attention)
      recompute_test_hook() = [](int64_t, std::span<double> saved) {
        if (!saved.empty()) saved[0] = std::nextafter(saved[0], 1e300);
      };
    runs.push_back(run_mode(s, m, steps, *world));
    recompute_test_hook() = nullptr;
  }
  bool all_ok = true;
  for (size_t m = 0; m < runs.size(); ++m) {
    int64_t values = 0, differ = 0;
    for (size_t t = 0; t < runs[m].steps.size(); ++t) {
      const auto &a = runs[0].steps[t], &b = runs[m].steps[t];
      values += static_cast<int64_t>(a.size());
      if (a.size() != b.size()) {
        differ += static_cast<int64_t>(a.size());
        continue;
      }
      for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(double)) != 0;
    }
    // [values, differing, bytes (sum over ranks), seconds (max over ranks)]
    std::vector<double> sum{static_cast<double>(values), static_cast<double>(differ),
                            static_cast<double>(runs[m].bytes)};
    std::vector<double> mx{runs[m].seconds};
    world->allreduce(std::span<double>(sum), comm::ReduceOp::sum);
    world->allreduce(std::span<double>(mx), comm::ReduceOp::max);
    all_ok = all_ok && sum[1] == 0;
    if (rank == 0)
      std::printf(
          "recompute %-9s %s: %.0f values over %d ranks and %lld steps, %.0f differ; activation bytes %.0f "
          "(all ranks); %.2f ms per step\n",
          std::string(recompute_name(static_cast<Recompute>(m))).c_str(), sum[1] == 0 ? "bitwise" : "DIFFER", sum[0],
          world->size(), static_cast<long long>(steps), sum[1], sum[2], 1e3 * mx[0] / steps);
  }
  if (rank == 0) std::printf("recompute: %s\n", all_ok ? "OK" : "DIFFER");
  return all_ok ? 0 : 1;
}

int route_check(const Scenario& base, const std::string& mode) {
  auto world = comm::make_world_communicator();
  Scenario s = base;
  s.layout.recompute = mode == "full" ? Recompute::full : Recompute::mlp;
  recompute_test_hook() = [](int64_t, std::span<double> saved) {
    for (double& x : saved) x = -x;
  };
  std::string what;
  try {
    ParallelRun<double> run(s, *world);
    run.step(0);
  } catch (const Error& e) {
    what = e.what();
  }
  std::vector<double> fired{what.empty() ? 0.0 : 1.0};
  world->allreduce(std::span<double>(fired), comm::ReduceOp::sum);
  std::printf("rank %d: %s\n", world->rank(), what.empty() ? "no error" : what.c_str());
  if (world->rank() == 0) std::printf("route check fired on %.0f of %d ranks\n", fired[0], world->size());
  return fired[0] == world->size() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: recompute_worker SCENARIO STEPS | SCENARIO route-check full|mlp\n");
    return 2;
  }
  try {
    const Scenario s = load_scenario(argv[1]);
    if (std::string(argv[2]) == "route-check") return route_check(s, argc > 3 ? argv[3] : "mlp");
    return bitwise(s, std::stoll(argv[2]), argc > 3 && std::string(argv[3]) == "one-ulp");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "recompute_worker: %s\n", e.what());
    return 1;
  }
}
