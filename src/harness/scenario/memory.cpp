// The run's memory floor from the scenario's sizes (harness/scenario/memory.h). Every count is a
// double: a model of dim 2^40 gives 2^80-element tensors, which int64_t cannot hold.
#include "harness/scenario/memory.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "proc/launch.h"
#include "comm/sim/sim_world.h"
#include "core/device.h"
#include "core/error.h"
#include "harness/runner/shared_baseline.h"

namespace parity {

namespace {

std::string elements_str(double n) {
  char buf[48];
  std::snprintf(buf, sizeof buf, n < 1e6 ? "%.0f" : "%.3g", n);
  return buf;
}

// Optimizer moments per parameter element.
double moments(const OptimConfig& o) {
  if (o.kind == OptimKind::adam || o.kind == OptimKind::adamw) return 2;
  return o.momentum > 0 ? 1 : 0;
}

}  // namespace

std::string bytes_str(double bytes) {
  static const char* const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) bytes /= 1024, ++u;
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : bytes < 1e4 ? "%.1f %s" : "%.3g %s", bytes, units[u]);
  return buf;
}

MemoryEstimate estimate_memory(const ModelConfig& m, const OptimConfig& o, const LayoutConfig& l, BaselinePlace where) {
  const auto d = [](int64_t v) { return static_cast<double>(v); };
  const double V = d(m.vocab), D = d(m.dim), L = d(m.layers), H = d(m.heads), S = d(m.seq);
  const double dense = d(m.dense_layers), moe = L - dense, E = d(m.experts), K = d(m.top_k);
  const double F = d(m.mlp_hidden), Fe = d(m.expert_hidden), Fs = d(m.shared_hidden);
  const double shared = m.shared_experts > 0 ? 1 : 0;
  const double nseq = d(m.micro_batch()), n = nseq * S;  // the largest micro-batch: sequences, tokens

  MemoryEstimate est;
  // Parameters (model/params.cpp's registry): embedding, head, layer norms, attention, FFNs.
  const double norm = m.norm == NormKind::rmsnorm ? 1 : 2;  // a norm's vectors: weight, and LayerNorm's bias
  est.parameters = V * D * (m.tie_embeddings ? 1 : 2) + norm * D + L * (4 * D * D + 2 * norm * D) +
                   dense * 3 * D * F + moe * (D * E + E * 3 * D * Fe + shared * 3 * D * Fs);
  // Activations kept for the backward pass of one micro-batch (model/model.cpp, model/moe.cpp):
  // per layer about nine (n, D) buffers and the attention probabilities, the FFN hidden states,
  // the routed copies of each token, and the logits with their gradient.
  const double activations = L * (9 * n * D + nseq * H * S * S) + dense * 3 * n * F +
                             moe * (2 * n * E + 3 * n * K * D + 3 * n * K * Fe + shared * 3 * n * Fs) + 2 * n * V;
  const double element = static_cast<double>(dtype_size(m.dtype));
  const double chain = 4 * 8 * V;  // the Markov chain's successor table (model/data.cpp)
  est.state_bytes = element * est.parameters * (2 + moments(o));
  est.process_bytes = est.state_bytes + element * activations + chain;
  est.processes = l.world;
  est.baseline = l.world > 1 ? where : BaselinePlace::in_every_rank;  // world 1: the run is the baseline
  if (est.baseline == BaselinePlace::once_per_host)
    // The launcher's baseline, the shared file's initial parameters, then the layout: dp_replicate
    // copies of the state over the ranks, one micro-batch's activations and a chain per rank.
    est.run_bytes = est.process_bytes + element * est.parameters + d(l.dp_replicate) * est.state_bytes +
                    element * activations + d(l.world) * chain;
  else
    est.run_bytes = est.process_bytes * d(l.world);

  const std::vector<std::pair<std::string, double>> tensors = {
      {"embedding (vocab x dim)", V * D},
      {"attention weight (dim x dim)", D * D},
      {"dense MLP weight (dim x mlp_hidden)", dense > 0 ? D * F : 0},
      {"routed experts (experts x dim x expert_hidden)", moe > 0 ? E * D * Fe : 0},
      {"shared expert weight (dim x shared_hidden)", moe > 0 ? shared * D * Fs : 0},
      {"attention probabilities (batch/microbatches x heads x seq x seq)", nseq * H * S * S},
      {"logits (batch/microbatches x seq x vocab)", n * V},
      {"routed tokens (batch/microbatches x seq x top_k x dim)", moe > 0 ? n * K * D : 0}};
  for (const auto& [what, count] : tensors)
    if (count > est.largest_elements)
      est.largest = what + ": " + elements_str(count) + " elements", est.largest_elements = count;
  return est;
}

void check_plausible_size(const ModelConfig& model, const OptimConfig& optim) {
  LayoutConfig one;  // one process: the sizes alone, whatever the layout
  const MemoryEstimate est = estimate_memory(model, optim, one);
  if (est.process_bytes > kAbsurdBytes)
    throw ConfigError("$.model", "sizes beyond any machine: one process would need at least " +
                                     bytes_str(est.process_bytes) + " of memory (the limit for a scenario is " +
                                     bytes_str(kAbsurdBytes) + "); the largest tensor is the " + est.largest);
}

void require_memory(const Scenario& s, const LayoutConfig& layout, const std::string& what) {
  // A simulated world's ranks (threads) always share the launcher's baseline (harness/runner/sim_launch.h).
  const BaselinePlace place = layout.backend == comm::Backend::sim ? BaselinePlace::once_per_host : baseline_place();
  const MemoryEstimate est = estimate_memory(s.model, s.optim, layout, place);
  const bool gpu = layout.device == Device::cuda;
  const int64_t have = gpu ? cuda_memory_bytes() : host_memory_bytes();
  if (have <= 0 || est.run_bytes <= static_cast<double>(have)) return;  // unknown: nothing to check against
  const std::string n = std::to_string(est.processes);
  const std::string per = est.processes == 1 ? "one process"
                          : est.baseline == BaselinePlace::once_per_host
                              ? "the launcher's one-device baseline of " + bytes_str(est.process_bytes) + " and " + n +
                                    " ranks holding the layout's share"
                              : n + " processes (one per rank) x " + bytes_str(est.process_bytes);
  throw UnavailableError(what + ": needs at least " + bytes_str(est.run_bytes) + " of " +
                         (gpu ? "GPU memory" : "memory") + " (" + per + ": " + elements_str(est.parameters) +
                         " parameters with gradients and optimizer state, one micro-batch's activations), this "
                         "machine has " + bytes_str(static_cast<double>(have)) +
                         (gpu ? " on its visible GPUs" : ""));
}

std::string measured_again_memory(const Scenario& s, int64_t twins) {
  const MemoryEstimate est = estimate_memory(s.model, s.optim, s.layout, BaselinePlace::in_every_rank);
  const bool gpu = s.layout.device == Device::cuda;
  const int64_t have = gpu ? cuda_memory_bytes() : host_memory_bytes();
  const double need = est.run_bytes + static_cast<double>(est.processes * twins) * est.process_bytes;
  if (have <= 0 || need <= static_cast<double>(have)) return "";
  return "it would need at least " + bytes_str(need) + " of " + (gpu ? "GPU memory" : "memory") + " (" +
         std::to_string(est.processes) + " ranks, each with its own baseline and " + std::to_string(twins) +
         " twins of " + bytes_str(est.process_bytes) + "), this machine has " + bytes_str(static_cast<double>(have));
}

void require_ranks_per_host(const Scenario& s, int nnodes, const std::string& what) {
  const int64_t cap = proc::kMaxRanksPerHost, hosts = std::max(nnodes, 1);
  for (const auto& [path, layout] : {std::pair{"$.layout.world", &s.layout},
                                     std::pair{"$.resume.layout.world", s.resume ? &s.resume->layout : nullptr}}) {
    if (layout == nullptr || (layout->world + hosts - 1) / hosts <= cap) continue;
    if (layout->backend == comm::Backend::sim) {  // threads, not processes: the simulated world's own cap
      if (layout->world <= comm::kMaxSimRanks) continue;
      throw ConfigError(what + ": " + path, "a simulated world (--backend sim) holds at most " +
                                                std::to_string(comm::kMaxSimRanks) + " ranks, got " +
                                                std::to_string(layout->world));
    }
    const std::string w = std::to_string(layout->world);
    throw ConfigError(what + ": " + path, "must put at most " + std::to_string(cap) +
                                              " ranks on one host (the per-host cap: ranks one "
                                              "launcher starts), got " +
                                              w + (hosts > 1 ? " over " + std::to_string(hosts) + " hosts" : "") +
                                              "; spread it over more hosts with --nnodes (at least " +
                                              std::to_string((layout->world + cap - 1) / cap) +
                                              ") or use a smaller layout");
  }
}

}  // namespace parity
