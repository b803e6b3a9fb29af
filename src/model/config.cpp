#include "model/config.h"

namespace parity {

std::string_view score_name(Score s) { return s == Score::softmax ? "softmax" : "sigmoid"; }

std::string_view norm_name(NormKind k) { return k == NormKind::layernorm ? "layernorm" : "rmsnorm"; }

std::string_view position_name(Position p) { return p == Position::none ? "none" : "rope"; }

std::string_view optim_name(OptimKind k) {
  switch (k) {
    case OptimKind::sgd: return "sgd";
    case OptimKind::adam: return "adam";
    case OptimKind::adamw: return "adamw";
  }
  return "?";
}

}  // namespace parity
