// Layouts and the model of the checkpoint tests, shared by test_ckpt and ckpt_worker.
// A layout is written "dpr1.dps4.tp2.ep2.etp1" (missing fields are 1; world is the product
// dp_replicate * dp_shard * cp * tp); "ds1" selects the deepspeed rank order, "cp2" context
// parallel; "fde2" puts FSDP of the routed experts on dim 2 and "fdd1" FSDP of every 2-D
// family on dim 1 (layout.fsdp_dim; 0 when absent).
#pragma once
#include <cstdint>
#include <sstream>
#include <string>

#include "core/error.h"
#include "mesh/mesh.h"
#include "mesh/layout_config.h"
#include "model/params.h"

namespace parity::ckpt::testing {

// Small, but with every family: dense and MoE layers, shared experts, untied head; lengths
// that 3 does not divide (vocab 64, dim 16), so fsdp3 shards unevenly.
inline ModelConfig test_model() {
  ModelConfig c;
  c.vocab = 64;
  c.dim = 16;
  c.layers = 2;
  c.dense_layers = 1;
  c.heads = 4;
  c.mlp_hidden = 24;
  c.experts = 4;
  c.top_k = 2;
  c.expert_hidden = 8;
  c.shared_experts = 1;
  c.shared_hidden = 8;
  return c;
}

inline LayoutConfig parse_layout(const std::string& s) {
  LayoutConfig l;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, '.')) {
    size_t i = 0;
    while (i < part.size() && !std::isdigit(static_cast<unsigned char>(part[i]))) ++i;
    const std::string key = part.substr(0, i);
    const int64_t v = std::stoll(part.substr(i));
    if (key == "dpr") l.dp_replicate = v;
    else if (key == "dps") l.dp_shard = v;
    else if (key == "cp") l.cp = v;
    else if (key == "tp") l.tp = v;
    else if (key == "ep") l.ep = v;
    else if (key == "etp") l.etp = v;
    else if (key == "ds") l.order = v == 1 ? RankOrder::deepspeed : RankOrder::megatron;
    else if (key == "fde") l.fsdp_dim[static_cast<size_t>(Family::routed_experts)] = {FsdpDimRule::Kind::dim, v};
    else if (key == "fdd")
      for (Family f : {Family::embedding, Family::attention, Family::router, Family::shared_experts, Family::dense_mlp,
                       Family::head})
        l.fsdp_dim[static_cast<size_t>(f)] = {FsdpDimRule::Kind::dim, v};
    else throw Error("bad layout field '" + part + "' in " + s);
  }
  l.world = l.dp_replicate * l.dp_shard * l.cp * l.tp;
  validate_layout(l, test_model());
  return l;
}

}  // namespace parity::ckpt::testing
