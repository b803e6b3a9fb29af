// `parity dump --trace` (dump_trace.h): the traced step as full tensors.
#include "harness/runner/dump_trace.h"

#include <cmath>
#include <cstdio>

#include "core/safetensors.h"
#include "harness/runner/trace_run.h"
#include "harness/verdict/trace_verdict.h"

namespace parity {

template <class T>
TraceDumped write_trace_step(const std::string& dir, const Scenario& s, const StepRecord<T>& r,
                             const std::vector<Tensor<T>>& before, const std::vector<Buffer<T>>& bias, bool bounds) {
  const ModelConfig& c = s.model;
  const RouteOracle routes{&r.chosen, &r.select_scores, 0, 0, true};  // as the baseline chose (trace_run.cpp)
  const LossScaleScope scaled(r.loss_scale);
  const trace::Recorder base = baseline_trace<T>(s, r.step, before, bias, routes, r.fp8_scales, false);
  const std::vector<trace::Key> keys = trace_keys(c);
  const std::vector<std::vector<double>> full = trace_full(keys, base, c);
  std::vector<double> noise;
  if (bounds)
    noise = trace_sums(keys, full, baseline_trace<T>(s, r.step, before, bias, routes, r.fp8_scales, true), c);
  char name[64];
  std::snprintf(name, sizeof name, "trace_%06lld.safetensors", static_cast<long long>(r.step));
  SafetensorsWriter w;
  TraceDumped out{{{"file", name}, {"step", r.step}}, bounds ? nlohmann::ordered_json::object() : nullptr};
  nlohmann::ordered_json tensors = nlohmann::ordered_json::object();
  for (size_t k = 0; k < keys.size(); ++k) {
    const auto e = std::find_if(base.entries.begin(), base.entries.end(), [&](auto& x) { return x.key == keys[k]; });
    if (e == base.entries.end()) continue;  // a key this model does not record
    const Shape shape{c.batch, c.seq, e->full_cols};  // k, v: the key / value heads' columns
    const std::vector<T> v(full[k].begin(), full[k].begin() + c.batch * c.seq * e->full_cols);
    const std::string n = trace_verdict::tensor_name(keys[k], c.layers);
    w.add(n, Tensor<T>(shape, v));
    tensors[n] = {{"dtype", dtype_name(dtype_of<T>())}, {"shape", shape}};
    if (!bounds) continue;
    const auto d = trace_verdict::Sums::unpack(noise.data() + k * trace_verdict::Sums::kWidth);
    out.noise[n] = d.ref2 > 0 ? std::sqrt(d.diff2 / d.ref2) : std::sqrt(d.diff2);
  }
  w.write(dir + "/" + name);
  out.file["tensors"] = tensors;
  return out;
}

#define PARITY_INSTANTIATE(T)                                                                                   \
  template TraceDumped write_trace_step<T>(const std::string&, const Scenario&, const StepRecord<T>&,        \
                                           const std::vector<Tensor<T>>&, const std::vector<Buffer<T>>&, bool);
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity
