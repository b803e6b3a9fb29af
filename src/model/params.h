// The parameter registry: every trained tensor of MODEL.md with its name, shape, family
// and initialisation, in one fixed order. Dumps, checkpoints and reports use these names.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/fp8_delayed.h"
#include "core/tensor.h"
#include "model/config.h"

namespace parity {

// Reported per family (FOLDINGS.md "What a parity run compares").
enum class Family { embedding, attention, layernorm, router, routed_experts, shared_experts, dense_mlp, head };
inline constexpr size_t kFamilyCount = 8;
std::string_view family_name(Family f);

struct ParamSpec {
  std::string name;
  Shape shape;
  Family family;
  double init_std = 0.0;    // > 0: N(0, init_std) from Philox
  double init_value = 0.0;  // used when init_std == 0 (LayerNorm weight 1, biases 0)
  bool also_head = false;   // embed.weight under tie_embeddings: the LM head's weight too
  // attn.wk / attn.wv: the key / value heads its columns hold (model.kv_heads). TP splits them
  // into whole heads only: where tp exceeds them each head is replicated over tp / kv_heads
  // lanes (mesh/param_layout.cpp, parallel/param_plan.cpp). 0: not a key / value projection.
  int64_t kv_heads = 0;
};

std::vector<ParamSpec> param_specs(const ModelConfig& c);

// The fp8 policy's weights (core/fp8.h, docs/precision.md "fp8"): the linears' (wq, wk, wv, wo, and
// w1, w3, w2 of the dense MLP, the shared and the routed experts), each quantized to E4M3 with one
// scale per tensor. Returns how many tensors the parameter holds (its experts for the routed ones,
// else 1), 0 for a parameter that stays in the storage format (embedding, norms, router, head).
int64_t fp8_weight_blocks(const ParamSpec& p);
// Delayed scaling's modules (core/fp8_delayed.h): each module of those linears, its blocks and its
// weights in registry order, the same on every rank of every layout (a model's slots).
std::vector<Fp8Module> fp8_modules(const ModelConfig& c);
// The run's delayed-scaling state: one for the fp8-delayed policy, off (on() false) otherwise.
Fp8Delayed fp8_delayed_state(const ModelConfig& c);

// Elements of a parameter by flat global index: out[i] = init(spec, seed, index[i]).
// A rank materialises exactly its shard this way; the full tensor is index 0..numel-1.
template <class T>
void init_elements(const ParamSpec& spec, uint64_t seed, const int64_t* index, int64_t n, T* out);
// Contiguous flat range [begin, end).
template <class T>
void init_range(const ParamSpec& spec, uint64_t seed, int64_t begin, int64_t end, T* out);

// A set of named tensors in registry order (parameters, gradients or optimizer state).
template <class T> struct ParamSet {
  std::vector<ParamSpec> specs;
  std::vector<Tensor<T>> tensors;

  static ParamSet zeros(const std::vector<ParamSpec>& specs);
  static ParamSet initialised(const std::vector<ParamSpec>& specs, uint64_t seed);
  int64_t index(std::string_view name) const;  // throws Error when absent
  Tensor<T>& operator[](std::string_view name) { return tensors[static_cast<size_t>(index(name))]; }
  const Tensor<T>& operator[](std::string_view name) const { return tensors[static_cast<size_t>(index(name))]; }
  size_t size() const { return tensors.size(); }
  void zero();
};

}  // namespace parity
