#include "core/inject.h"

#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace parity {

const std::vector<Injection>& injections() {
  static const std::vector<Injection> all = {
      {"norm_counts_replicas", "parallel/parallel_run.cpp, grad norm",
       "every replica of a replicated gradient enters the global norm (TP replicas counted tp times: the grad-norm "
       "clipping bug class of Megatron-LM and torchtitan)"},
      {"norm_drops_experts", "parallel/parallel_run.cpp, grad norm",
       "the routed experts' gradients are left out of the global norm (expert parameters on their own process "
       "group, forgotten by the clip: DeepSpeed MoE's class)"},
      {"router_grad_averaged", "parallel/parallel_run.cpp, TP reduction of the router",
       "the router gate's gradient averaged over the TP lanes where each lane holds a part of the sum (router "
       "gradients averaged where they should be summed: the reduction-op class of the seeds, one way round)"},
      {"sp_layernorm_not_summed", "parallel/parallel_run.cpp, TP reduction under SP",
       "LayerNorm gradients not summed over the TP group under sequence parallel, so each lane keeps the part of "
       "its own sequence chunk (Megatron-LM's sequence-parallel LayerNorm class)"},
      {"expert_grads_times_tp", "parallel/parallel_run.cpp, expert gradient reduction",
       "the routed experts' gradients come out tp times too large (summed over TP lanes that each hold the whole "
       "expert gradient); Adam hides it almost entirely, SGD and the gradient check do not"},
      {"dp_averaged_twice", "parallel/parallel_run.cpp, data-parallel reduction",
       "the dense gradients divided by the data-parallel size twice (a mean reduce-scatter followed by a second "
       "division)"},
      {"adam_step_not_restored", "ckpt/training_state.cpp, resume",
       "a resumed run restarts the optimizer's step count at 0, so Adam's bias correction starts over"},
      {"bias_update_sign", "parallel/parallel_run.cpp, expert-bias update",
       "the aux-loss-free expert-bias update applied with its sign flipped: overloaded experts gain bias"},
      {"aux_coef_per_microbatch", "parallel/pmoe.cpp, aux loss",
       "the aux-loss coefficient divided by the micro-batch size instead of the batch size, so with gradient "
       "accumulation the balance loss is microbatches times too strong"},
      {"tokens_per_expert_local", "parallel/parallel_run.cpp, step bookkeeping",
       "tokens_per_expert counted per rank and never all-reduced, so the load-balancing statistics and the "
       "expert-bias update see one rank's tokens"},
  };
  return all;
}

namespace {
std::vector<std::string> parse_env() {
  std::vector<std::string> out;
  const char* v = std::getenv("PARITY_INJECT");
  if (v == nullptr) return out;
  std::stringstream in(v);
  for (std::string name; std::getline(in, name, ',');)
    if (!name.empty()) out.push_back(name);
  return out;
}
}  // namespace

bool injected(std::string_view name) {
  static const std::vector<std::string> on = parse_env();
  for (const auto& n : on)
    if (n == name) return true;
  return false;
}

std::string injected_names() {
  std::string out;
  for (const auto& n : parse_env()) {
    bool known = false;
    for (const auto& i : injections()) known = known || i.name == n;
    if (!known) {
      std::string names;
      for (const auto& i : injections()) names += (names.empty() ? "" : ", ") + std::string(i.name);
      throw ConfigError("--inject", "unknown injection '" + n + "' (known: " + names + ")");
    }
    out += (out.empty() ? "" : ",") + n;
  }
  return out;
}

}  // namespace parity
