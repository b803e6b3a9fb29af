// Golden curves from a run: the baseline in this process, the layout collectively.
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "ckpt/training_state.h"
#include "core/error.h"
#include "harness/golden/golden.h"
#include "harness/runner/baseline.h"
#include "harness/scenario/scenario.h"
#include "harness/runner/twin.h"
#include "harness/verdict/bounds.h"
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

template <class T> Curves baseline_curves_t(const Scenario& s, std::vector<double>* bound) {
  Curves c;
  c.moe_layers = moe_layer_ids(s.model);
  BaselineRun<T> run(s);
  if (bound == nullptr) {
    for (int64_t t = 0; t < s.steps; ++t) append_step(c, run.step(t));
    return c;
  }
  // The free-running twin beside it (the golden's layout runs free too): the loss's envelope
  // of noise up to each step, held to the verdict's measured bound (harness/verdict/bounds.h).
  const Precision p = s.model.precision();
  TwinRun<T> twin(s);
  bound->clear();
  double envelope = 0;
  for (int64_t t = 0; t < s.steps; ++t) {
    const std::vector<Tensor<T>> before = run.model().params.tensors;
    const StepRecord<T> r = run.step(t, KeepGrads::yes);
    append_step(c, r);
    const std::vector<double> noise = twin.step(t, r, before, run.model().params.tensors, run.model().expert_bias);
    if (!noise.empty() && std::isfinite(noise[kNoiseLoss])) envelope = std::max(envelope, noise[kNoiseLoss]);
    bound->push_back(measured_bound(p, Quantity::loss, envelope).value);
  }
  return c;
}

template <class T> Curves layout_curves_t(const Scenario& s, comm::Communicator& world, const CurvesCheckpoint& ck) {
  Curves c;
  c.moe_layers = moe_layer_ids(s.model);
  ParallelRun<T> run(s, world, ck.valid);
  const nlohmann::json model = scenario_to_json(s)["model"], identity = checkpoint_run(s);
  if (!ck.resume_dir.empty()) {
    c.start_step = ParallelRunState<T>(run, world).load(ck.resume_dir, model, identity).step;
    if (c.start_step > s.steps)
      throw ConfigError("resume", ck.resume_dir + " was saved after step " + std::to_string(c.start_step) +
                                      ", beyond the run's last step");
  }
  for (int64_t t = c.start_step; t < s.steps; ++t) {
    if (t == ck.save_at)  // saving reads the state, changes nothing: the curves go on as without it
      ParallelRunState<T>(run, world).save(ck.ckpt_dir, {t, data_position_after(s.model, t), model, identity});
    append_step(c, run.step(t));
  }
  return c;
}

}  // namespace

Curves baseline_curves(const Scenario& s, std::vector<double>* bound) {
  return with_real(s.model.dtype, [&](auto x) { return baseline_curves_t<decltype(x)>(s, bound); });
}

ProcessUsage process_usage() {
  ProcessUsage u;
  rusage r{};
  if (getrusage(RUSAGE_SELF, &r) == 0)
    u.cpu_s = static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
              static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) u.peak_rss_mib = std::stod(line.substr(6)) / 1024.0;  // "VmHWM:  1234 kB"
  if (u.peak_rss_mib == 0 && getrusage(RUSAGE_SELF, &r) == 0) u.peak_rss_mib = static_cast<double>(r.ru_maxrss) / 1024;
  return u;
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";  // resets VmHWM to the current resident size (Linux 4.0)
  f.flush();
  return static_cast<bool>(f);
}

std::string machine_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string model = "unknown CPU";
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      model = line.substr(line.find(':') + 1);
      model.erase(0, model.find_first_not_of(" \t"));
      break;
    }
  const unsigned cpus = std::thread::hardware_concurrency();
  return model + " x " + std::to_string(cpus) + (cpus == 1 ? " CPU" : " CPUs");
}

Curves layout_curves(const Scenario& s, comm::Communicator& world, const CurvesCheckpoint& ck) {
  return with_real(s.model.dtype, [&](auto x) { return layout_curves_t<decltype(x)>(s, world, ck); });
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
