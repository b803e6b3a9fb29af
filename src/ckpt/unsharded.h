// A checkpoint's state unsharded: every tensor whole, as one device holds it, read through
// the same resharding load as any layout (a world-1 mesh, every tensor replicated). Two
// checkpoints saved under different layouts hold the same training state exactly when
// their unsharded states are bitwise equal (`parity ckpt export`, `parity ckpt diff`).
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "ckpt/format.h"
#include "core/tensor.h"

namespace parity::ckpt {

struct WholeTensor {
  std::string name;
  std::variant<Tensor<float>, Tensor<double>, Tensor<int64_t>> value;
  DType dtype() const;
  const Shape& shape() const;
  const void* data() const;
  int64_t bytes() const;
};

struct UnshardedState {
  Metadata md;                       // of the checkpoint read (step, data position, model, mesh)
  std::vector<WholeTensor> tensors;  // metadata order
};

// Reads every tensor of the checkpoint in `dir` (resolved as a reader does) whole:
// Checkpoint::open (verify.h), then every block of every chunk read and its checksum
// verified. Throws IoError / ConfigError as ckpt::load does.
UnshardedState read_unsharded(const std::string& dir);

// The name a checkpoint tensor has in an export: the name `parity dump` and parity_torch give it
// ("expert_bias.layers.1" -> "layers.1.moe.expert_bias"); every other name as it is. The
// checkpoint keeps its own key (a format key: old checkpoints read as before).
std::string export_name(const std::string& ckpt_name);

// Writes the unsharded state as one safetensors file (metadata: format "parity-export", step,
// data_position and the model config as JSON), each tensor under export_name. Deterministic:
// equal states give equal bytes, whatever the layouts they were saved under. An existing `path`
// is replaced only when it is an export parity wrote (kExportSignature) or, with `force`, any
// regular file; anything else is ConfigError naming `option` (core/output.h). Throws IoError naming the file.
inline constexpr const char* kExportSignature = "\"format\":\"parity-export\"";
void write_unsharded(const UnshardedState& st, const std::string& path, bool force = false,
                     const std::string& option = "out");

// Every difference between two unsharded states, one line each: a tensor only in one, a
// dtype or shape mismatch, or the count of elements whose bits differ with the first one
// (flat index, both values); then a different step or data position. Empty: bitwise equal.
std::vector<std::string> diff_unsharded(const UnshardedState& a, const UnshardedState& b);

}  // namespace parity::ckpt
