#include "harness/runner/floors_first.h"

#include <span>

#include "core/error.h"
#include "core/knobs.h"
#include "harness/verdict/tolerance.h"

namespace parity {

bool floors_first_enabled() { return knob_on("PARITY_FLOORS_FIRST"); }

int64_t first_twin_sets(const Scenario& s) {
  return s.twin_sets == 1 && floors_first(s.model.precision()) && floors_first_enabled() ? 0 : s.twin_sets;
}

std::pair<bool, std::string> floors_failed(comm::Communicator& world, const VerdictReport& rep,
                                           const std::vector<Row>& rows) {
  std::vector<double> v{0};
  std::string why;
  if (world.rank() == 0) {
    VerdictReport first = rep;
    first.rows = rows;
    if (first.compared() && !first.passed()) {
      v[0] = 1;
      why = "run after the floors alone failed it (floors first): this verdict is the one with its twin";
    }
  }
  world.allreduce(std::span<double>(v), comm::ReduceOp::max);
  return {v[0] > 0, why};
}

std::unique_ptr<BaselineProducer> share_second(comm::Communicator& world, const Scenario& s,
                                               const std::string& path, int slot, std::string& file) {
  file.clear();
  std::unique_ptr<BaselineProducer> p;
  const int readers = path.empty() ? 0 : shared_baseline_readers(path);
  if (readers > 0) {
    file = path + ".twins";
    if (slot == 0) try {
        p = std::make_unique<BaselineProducer>(s, file, readers, 0);
        p->start();
      } catch (const IoError&) {  // no room for a second file: every rank of this host trains its own (no file)
        p.reset();
      }
  }
  world.barrier();  // the file exists before any rank looks for it
  return p;
}

}  // namespace parity
