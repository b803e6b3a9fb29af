#include "parallel/supported.h"

#include "mesh/mesh.h"
#include "model/batch_split.h"

namespace parity {

void check_supported(const ModelConfig& m, const LayoutConfig& l) {
  validate_layout(l, m);
  // Any batch splits over any data-parallel degree (model/batch_split.h: a rank may take no
  // sequence of a micro-batch); what is still refused is a micro-batch with no sequence.
  check_batch_split(m.batch, m.microbatches);
}

}  // namespace parity
