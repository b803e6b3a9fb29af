// The baseline's full trace (dump.h): safetensors files and manifest.json.
#include "harness/runner/dump.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/output.h"
#include "core/safetensors.h"
#include "core/text.h"
#include "harness/runner/baseline.h"
#include "harness/runner/dump_trace.h"
#include "harness/runner/twin.h"
#include "harness/scenario/scenario.h"

namespace parity {

namespace {

using nlohmann::ordered_json;

// Records the tensors written to one file for the manifest.
class ManifestFile {
 public:
  explicit ManifestFile(std::string file) : file_(std::move(file)) {}
  template <class T> void add(SafetensorsWriter& w, const std::string& name, const Tensor<T>& t) {
    w.add(name, t);
    tensors_[name] = {{"dtype", dtype_name(dtype_of<T>())}, {"shape", t.shape}};
  }
  template <class V> void add_vector(SafetensorsWriter& w, const std::string& name, const V& v, Shape s) {
    using T = typename V::value_type;
    add(w, name, Tensor<T>(std::move(s), v));
  }
  ordered_json json(int64_t step) const {
    ordered_json j{{"file", file_}};
    j["step"] = step < 0 ? ordered_json(nullptr) : ordered_json(step);
    j["tensors"] = tensors_;
    return j;
  }

 private:
  std::string file_;
  ordered_json tensors_ = ordered_json::object();
};

template <class T>
void add_params(ManifestFile& mf, SafetensorsWriter& w, const std::string& prefix, const ParamSet<T>& p) {
  for (size_t i = 0; i < p.size(); ++i) mf.add(w, prefix + p.specs[i].name, p.tensors[i]);
}

template <class T>
ordered_json write_step(const std::string& dir, const Scenario& s, BaselineRun<T>& run, const StepRecord<T>& r) {
  const ModelConfig& c = s.model;
  char name[64];
  std::snprintf(name, sizeof name, "step_%06lld.safetensors", static_cast<long long>(r.step));
  ManifestFile mf(name);
  SafetensorsWriter w;
  mf.add_vector(w, "inputs", r.inputs, {c.batch, c.seq});
  mf.add_vector(w, "targets", r.targets, {c.batch, c.seq});
  mf.add_vector(w, "loss", std::vector<double>{r.loss}, {});
  mf.add_vector(w, "micro_losses", r.micro_losses, {c.microbatches});
  mf.add_vector(w, "grad_norm", std::vector<double>{r.grad_norm}, {});
  mf.add_vector(w, "clip_coef", std::vector<double>{r.clip_coef}, {});
  add_params(mf, w, "grads.", *r.grads);
  add_params(mf, w, "params.", run.model().params);
  for (int64_t m = 0; m < c.moe_layers(); ++m) {
    const std::string p = "layers." + std::to_string(m + c.dense_layers) + ".moe.";
    const auto l = static_cast<size_t>(m);
    mf.add_vector(w, p + "tokens_per_expert", r.tokens_per_expert[l], {c.experts});
    mf.add_vector(w, p + "expert_bias", run.model().expert_bias[l], {c.experts});
    mf.add_vector(w, p + "chosen", r.chosen[l], {c.batch * c.seq, c.top_k});
    mf.add_vector(w, p + "select_scores", r.select_scores[l], {c.batch * c.seq, c.experts});
  }
  w.write(dir + "/" + name);
  return mf.json(r.step);
}

ordered_json conventions() {
  return {
      {"matrices", "stored (in, out): y = x · W"},
      {"inputs, targets", "(B, S) int64: sequence g of the step is row g"},
      {"loss", "fp64: mean cross-entropy over the step's B*S tokens plus the aux loss"},
      {"micro_losses", "each micro-batch's part of loss (they sum to loss)"},
      {"grads.*", "gradient of loss, accumulated over micro-batches, before clipping"},
      {"params.*", "parameters after the optimizer step"},
      {"grad_norm, clip_coef", "global L2 norm before clipping; the factor applied to every gradient"},
      {"layers.{l}.moe.tokens_per_expert", "(token, slot) assignments per expert over the step"},
      {"layers.{l}.moe.expert_bias", "after this step's bias update"},
      {"layers.{l}.moe.chosen", "(B*S, K) chosen experts per token, descending score + bias"},
      {"layers.{l}.moe.select_scores", "(B*S, E) fp64: score + bias, what top-k ranked (near-ties)"},
      {"steps[].noise", "the rounding twin's distance to this run per verdict row (docs/verdict.md \"Bounds\"); "
                        "`parity compare` holds a candidate to 10x its largest value so far"},
  };
}

ordered_json noise_json(const std::vector<double>& noise) {
  ordered_json j = ordered_json::object();
  for (size_t i = 0; i < noise.size() && i < kNoiseWidth; ++i)
    j[noise_name(i)] = std::isfinite(noise[i]) ? ordered_json(noise[i]) : ordered_json(nullptr);
  return j;
}

template <class T> int dump(const Scenario& s, const std::string& dir, bool bounds, int64_t trace_steps) {
  const bool trace = trace_steps != 0;
  prepare_output_dir("dir", dir);  // new, empty, or a dump parity wrote (docs/faults.md "Nothing lost")
  const DirLock lock("dir", dir);   // one writer per directory
  // An earlier dump's manifest would describe this dump's files until it ends: removed first,
  // so a dump that stops early (diverged, killed) leaves no manifest, never a misleading one.
  const std::string path = dir + "/manifest.json";
  check_replaceable("dir", path, Replace{"\"format\": \"parity-dump/1\""});
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    throw IoError(printable(path) + ": cannot remove the earlier dump's manifest: " + std::strerror(errno));
  BaselineRun<T> run(s);
  std::optional<TwinRun<T>> twin;
  if (bounds) twin.emplace(s);
  ordered_json files = ordered_json::array(), steps = ordered_json::array(), traces = ordered_json::array();
  {
    ManifestFile mf("init.safetensors");
    SafetensorsWriter w;
    add_params(mf, w, "", run.model().params);
    w.write(dir + "/init.safetensors");
    files.push_back(mf.json(-1));
  }
  for (int64_t t = 0; t < s.steps; ++t) {
    const std::vector<Tensor<T>> before = twin || trace ? run.model().params.tensors : std::vector<Tensor<T>>{};
    const bool traced = trace && (trace_steps < 0 || t < trace_steps);
    const std::vector<Buffer<T>> bias = traced ? run.model().expert_bias : std::vector<Buffer<T>>{};
    StepRecord<T> r = run.step(t, KeepGrads::yes);
    require_finite_baseline(r, run.model().params.specs, run.model().params.tensors);  // exit 4, as `run`
    if (twin) r.noise = twin->step(t, r, before, run.model().params.tensors, run.model().expert_bias);
    files.push_back(write_step(dir, s, run, r));
    steps.push_back({{"step", t}, {"loss", r.loss}, {"grad_norm", r.grad_norm}, {"clip_coef", r.clip_coef}});
    if (twin) steps.back()["noise"] = noise_json(r.noise);
    if (traced) {  // --trace: the step traced again from the same parameters (dump_trace.h)
      TraceDumped d = write_trace_step<T>(dir, s, r, before, bias, bounds);
      traces.push_back(std::move(d.file));
      if (bounds) steps.back()["trace_noise"] = std::move(d.noise);
    }
    std::printf("step %lld loss %.8f\n", static_cast<long long>(t), r.loss);
  }
  ordered_json params = ordered_json::array();
  for (const auto& sp : run.model().params.specs)
    params.push_back({{"name", sp.name}, {"shape", sp.shape}, {"family", family_name(sp.family)}});
  ordered_json m{{"format", "parity-dump/1"},     {"scenario", scenario_to_json(s)},
                 {"entropy_floor", run.data().entropy_floor()}, {"conventions", conventions()},
                 {"parameters", params},          {"files", files},
                 {"steps", steps}};
  if (trace) m["trace_files"] = traces;
  write_file_atomically(path, m.dump(2) + "\n", Replace{"\"format\": \"parity-dump/1\""}, "dump manifest", "dir");
  std::printf("wrote %zu files and manifest.json to %s\n", files.size(), dir.c_str());
  return 0;
}

}  // namespace

int write_dump(const Scenario& s, const std::string& dir, bool bounds, int64_t trace_steps) {
  return with_real(s.model.dtype, [&](auto x) { return dump<decltype(x)>(s, dir, bounds, trace_steps); });
}

}  // namespace parity
