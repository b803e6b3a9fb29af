#include "mesh/mesh_text.h"

#include <sstream>

#include "mesh/placement.h"
#include "model/params.h"

namespace parity::mesh {

std::string tuple_str(const std::vector<int64_t>& v) {
  std::string out = "(";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + ")";
}

namespace {

std::string view_header(View v) {
  std::string out = "(";
  const auto& dims = view_dims(v);
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::string(dim_short(dims[i]));
  return out + ")";
}

std::string view_sizes(const Mesh& m, View v) {
  std::string out = "(";
  const auto& dims = view_dims(v);
  for (size_t i = 0; i < dims.size(); ++i)
    out += (i ? ", " : "") + std::string(dim_name(dims[i])) + " " + std::to_string(m.size(dims[i]));
  return out + ")";
}

std::string dims_str(GroupKind k, const Mesh& m) {
  std::string out = std::string(view_name(group_view(k))) + ":";
  for (MeshDim d : group_dims(k))
    if (d != MeshDim::pp || m.stages() > 1) out += " " + std::string(dim_name(d));
  return out;
}

void write_ranks(std::ostringstream& o, const Mesh& m) {
  const bool pp = m.stages() > 1;  // a stage column only with pipeline parallel
  o << "## Ranks\n| rank | " << (pp ? "stage | " : "") << "dense " << view_header(View::dense) << " | expert "
    << view_header(View::expert) << " |\n| --- | " << (pp ? "--- | " : "") << "--- | --- |\n";
  for (int r = 0; r < m.world(); ++r)
    o << "| " << r << " | " << (pp ? std::to_string(m.stage(r)) + " | " : "") << tuple_str(m.coords(View::dense, r))
      << " | " << tuple_str(m.coords(View::expert, r)) << " |\n";
}

void write_groups(std::ostringstream& o, const Mesh& m) {
  o << "## Groups (docs/design/foldings.md)\n| config | TP | dense DP | EP | EDP | ETP |\n"
       "| --- | --- | --- | --- | --- | --- |\n"
    << foldings_row(m) << "\n\n";
  o << "## Every group\n| group | dimensions | size | members |\n| --- | --- | --- | --- |\n";
  for (GroupKind k : all_group_kinds()) {
    if (k == GroupKind::pp && m.stages() == 1) continue;  // no pipeline: the table as it was
    const std::vector<Group> gs = m.groups(k);
    o << "| " << group_kind_name(k) << " | " << dims_str(k, m) << " | " << gs[0].size() << " | " << groups_str(gs)
      << " |\n";
  }
}

// The numbering of both views under each order (mesh.h, docs/mesh.md "Rank order"); the cp
// coordinate appears only when cp > 1, so layouts without context parallel print as before.
std::string rank_formula(const LayoutConfig& l) {
  const bool cp = l.cp > 1;
  const std::string dense =
      cp ? "rank = tp_r + tp*(cp_r + cp*(dps_r + dp_shard*dpr_r))" : "rank = tp_r + tp*(dps_r + dp_shard*dpr_r)";
  if (l.order == RankOrder::megatron) return dense + " = etp_r + etp*(ep_r + ep*(edps_r + edp_shard*dpr_r))";
  return dense + "; expert coordinates from the TP-lane-major index\n" +
         (cp ? "tp_r*dp_shard*cp + cp_r + cp*dps_r" : "tp_r*dp_shard + dps_r") +
         " + (W/dp_replicate)*dpr_r = etp_r + etp*(ep_r + ep*(edps_r + edp_shard*dpr_r))";
}

// What layout.recompute keeps and re-runs (docs/parallel.md, "Activation recompute"); printed
// only when it is not none, so layouts without it explain as before.
std::string recompute_line(Recompute r) {
  const std::string what = r == Recompute::full ? "every layer keeps only its input"
                           : r == Recompute::attention
                               ? "every attention block (ln1, q/k/v, attention, wo) keeps only its input"
                               : "every FFN block (ln2, dense MLP or MoE) keeps only its input "
                                 "and its routing";
  return "activation recompute: " + std::string(recompute_name(r)) + " (" + what +
         "; the backward re-runs that forward, collectives included, before its backward; an MoE layer's recomputed "
         "routing is checked against the first forward's; the one-device baseline never recomputes)";
}

}  // namespace

std::string config_label(const Mesh& m) {
  std::string out;
  if (m.size(MeshDim::dp_replicate) > 1) out = "DPR" + std::to_string(m.size(MeshDim::dp_replicate)) + ", ";
  if (m.size(MeshDim::cp) > 1) out += "CP" + std::to_string(m.size(MeshDim::cp)) + ", ";
  out += "TP" + std::to_string(m.size(MeshDim::tp)) + ", EP" + std::to_string(m.size(MeshDim::ep)) + ", ETP" +
         std::to_string(m.size(MeshDim::etp));
  if (m.layout().order != RankOrder::megatron) out += ", " + std::string(order_name(m.layout().order)) + " order";
  return out;
}

std::string foldings_row(const Mesh& m) {
  std::string out = "| " + config_label(m) + " |";
  for (GroupKind k : {GroupKind::tp, GroupKind::dense_dp, GroupKind::ep, GroupKind::edp, GroupKind::etp})
    out += " " + groups_str(m.groups(k)) + " |";
  return out;
}

std::string compact_shape(const Shape& s) {
  if (s.empty()) return "()";
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "x" : "") + std::to_string(s[i]);
  return out;
}

std::string ranges_str(const std::vector<std::vector<Range>>& ranges) {
  std::string out = "[";
  for (size_t d = 0; d < ranges.size(); ++d) {
    out += d ? ", " : "";
    if (ranges[d].empty()) out += "-";
    for (size_t k = 0; k < ranges[d].size(); ++k)
      out += (k ? "+" : "") + std::to_string(ranges[d][k].begin) + ":" + std::to_string(ranges[d][k].end);
  }
  return out + "]";
}

// Which ranks hold each routed expert: its EP coordinate is e / (E / ep); every rank with
// that coordinate holds a piece of it (ETP lanes split its hidden dimension, EDP ranks its
// FSDP rows, dp_replicate copies it).
std::string expert_owners(const Mesh& m, const ModelConfig& model) {
  if (model.moe_layers() == 0) return "";
  std::ostringstream o;
  const int64_t ep = m.size(MeshDim::ep), per = model.experts / ep;
  o << "## Expert owners (every MoE layer)\n| expert | ep coordinate | ranks holding a piece |\n| --- | --- | --- |\n";
  for (int64_t e = 0; e < model.experts; ++e) {
    o << "| " << e << " | " << e / per << " |";
    for (int r = 0; r < m.world(); ++r)
      if (m.coord(MeshDim::ep, r) == e / per) o << " " << r;
    o << " |\n";
  }
  return o.str();
}

std::string mesh_text(const Mesh& m, const ModelConfig& model, const std::string& title) {
  const LayoutConfig& layout = m.layout();
  std::ostringstream o;
  o << "# " << title << "\n\n";
  o << "world " << m.world() << ", folding " << folding_name(folding(m)) << "\n";
  o << "dense view  " << view_sizes(m, View::dense) << "\n";
  o << "expert view " << view_sizes(m, View::expert) << "\n";
  o << "rank order " << order_name(layout.order) << "\n" << rank_formula(layout) << "\n";
  if (m.size(MeshDim::cp) > 1)
    o << "context parallel: cp " << m.size(MeshDim::cp) << ", groups " << groups_str(m.groups(GroupKind::cp))
      << " (each holds one contiguous chunk of every sequence; the expert view has no cp: edp absorbs it)\n";
  if (layout.recompute != Recompute::none) o << recompute_line(layout.recompute) << "\n";
  if (m.stages() > 1) {
    o << "pipeline parallel: pp " << m.stages() << " (outermost: rank = stage * " << m.world() / m.stages()
      << " + the rank inside its stage), schedule " << pp_schedule_name(layout.pp_schedule) << "; layers per stage:";
    const auto split = pp_stage_layers(layout, model.layers);
    for (size_t v = 0; v < split.size(); ++v)
      o << " " << (v == 0 ? "" : "| ") << "v" << v << "@stage " << static_cast<int64_t>(v) % m.stages() << " ["
        << split[v].first << ", " << split[v].second << ")";
    o << "\n";
  }
  o << "\n";
  write_ranks(o, m);
  o << "\n";
  write_groups(o, m);
  return o.str();
}

}  // namespace parity::mesh
