// Golden curves from a run: the baseline in this process, the layout collectively.
#include <array>
#include <cstdio>
#include <memory>

#include "harness/runner/baseline.h"
#include "harness/golden/golden.h"
#include "parallel/parallel_run.h"

namespace parity {

namespace {

std::vector<int64_t> moe_layer_ids(const ModelConfig& m) {
  std::vector<int64_t> ids;
  for (int64_t l = 0; l < m.layers; ++l)
    if (m.is_moe(l)) ids.push_back(l);
  return ids;
}

// Appends one step's values; R is StepRecord<T> or RankStepRecord<T> (same field names).
template <class R> void append_step(Curves& c, const R& r) {
  c.loss.push_back(r.loss);
  c.grad_norm.push_back(r.grad_norm);
  c.aux_loss.push_back(r.aux);
  c.tokens_per_expert.resize(c.moe_layers.size());
  for (size_t l = 0; l < c.moe_layers.size(); ++l)
    c.tokens_per_expert[l].push_back(l < r.tokens_per_expert.size() ? r.tokens_per_expert[l] : std::vector<int64_t>{});
}

template <class T> Curves baseline_curves_t(const Scenario& s) {
  Curves c;
  c.moe_layers = moe_layer_ids(s.model);
  BaselineRun<T> run(s);
  for (int64_t t = 0; t < s.steps; ++t) append_step(c, run.step(t));
  return c;
}

template <class T> Curves layout_curves_t(const Scenario& s, comm::Communicator& world) {
  Curves c;
  c.moe_layers = moe_layer_ids(s.model);
  ParallelRun<T> run(s, world);
  for (int64_t t = 0; t < s.steps; ++t) append_step(c, run.step(t));
  return c;
}

}  // namespace

Curves baseline_curves(const Scenario& s) {
  return with_real(s.model.dtype, [&](auto x) { return baseline_curves_t<decltype(x)>(s); });
}

Curves layout_curves(const Scenario& s, comm::Communicator& world) {
  return with_real(s.model.dtype, [&](auto x) { return layout_curves_t<decltype(x)>(s, world); });
}

std::string current_commit(const std::string& dir) {
  const std::string cmd = "git -C '" + dir + "' rev-parse HEAD 2>/dev/null";
  struct Close {
    void operator()(FILE* f) const { pclose(f); }
  };
  std::unique_ptr<FILE, Close> p(popen(cmd.c_str(), "r"));
  if (!p) return "unknown";
  std::array<char, 128> buf{};
  std::string out;
  while (fgets(buf.data(), static_cast<int>(buf.size()), p.get()) != nullptr) out += buf.data();
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out.size() == 40 ? out : "unknown";
}

}  // namespace parity
