// `parity explain` (explain.h): the mesh's text, then every parameter as the plan places it.
#include "parallel/explain.h"

#include <sstream>

#include "mesh/mesh.h"
#include "mesh/mesh_text.h"
#include "mesh/placement.h"
#include "parallel/param_plan.h"
#include "parallel/pipeline.h"

namespace parity {

namespace {

using mesh::compact_shape;

void write_params(std::ostringstream& o, const mesh::Mesh& m, const ParamPlan& plan, const std::string& param) {
  o << "## Parameters (local shape on each rank)\n| parameter | shape | view | placements |";
  for (int r = 0; r < m.world(); ++r) o << " r" << r << " |";
  o << "\n| --- | --- | --- | --- |";
  for (int r = 0; r < m.world(); ++r) o << " --- |";
  o << "\n";
  for (const ParamEntry& e : plan.entries) {
    if (e.spec.name.find(param) == std::string::npos) continue;
    const mesh::TensorLayout& l = e.param;
    o << "| " << e.spec.name << " | " << compact_shape(e.spec.shape) << " | " << mesh::view_name(l.view) << " | "
      << mesh::layout_str(l) << " |";
    for (int r = 0; r < m.world(); ++r) o << " " << compact_shape(mesh::local_shape(m, l, e.spec.shape, r)) << " |";
    o << "\n";
  }
}

// The index ranges table: one row per (parameter, rank), with the local shape, DTensor's
// global offset (compute_local_shape_and_global_offset) and the ranges.
std::string ranges_table(const mesh::Mesh& m, const ParamPlan& plan, const std::string& param_filter) {
  std::ostringstream o;
  o << "## Index ranges (global offset: DTensor's, the dimension's length where a rank holds none)\n"
       "| parameter | rank | local shape | global offset | index ranges |\n| --- | --- | --- | --- | --- |\n";
  for (const ParamEntry& e : plan.entries) {
    if (e.spec.name.find(param_filter) == std::string::npos) continue;
    const mesh::TensorLayout& l = e.param;
    const Shape& shape = e.spec.shape;
    for (int r = 0; r < m.world(); ++r)
      o << "| " << e.spec.name << " | " << r << " | " << compact_shape(mesh::local_shape(m, l, shape, r)) << " | "
        << mesh::tuple_str(mesh::global_offset(m, l, shape, r)) << " | "
        << mesh::ranges_str(mesh::local_dim_ranges(m, l, shape, r)) << " |\n";
  }
  return o.str();
}

}  // namespace

std::string explain(const ValidLayout& valid, const ModelConfig& model, const std::string& title,
                    const ExplainOptions& options) {
  const LayoutConfig& layout = valid.config();
  const mesh::Mesh m(layout, model.layers);
  const ParamPlan plan = param_plan(m, model, model.precision());
  std::ostringstream o;
  o << mesh::mesh_text(m, model, title) << "\n";
  write_params(o, m, plan, options.param);
  o << "\n" << mesh::expert_owners(m, model);
  if (options.ranges) o << "\n" << ranges_table(m, plan, options.param);
  o << "\n## Reduction plan (each family's gradient, step by step: parallel/reduction_plan.h)\n" << plan_table(plan);
  o << "\n## Parameter plan (each parameter's entry: parallel/param_plan.h)\n" << param_table(plan, options.param);
  if (layout.pp > 1) o << "\n" << schedule_table(layout, model.microbatches);
  return o.str();
}

}  // namespace parity
