#include "harness/runner/trace_run.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <span>

#include "core/error.h"
#include "core/knobs.h"
#include "core/precision.h"
#include "harness/runner/twin.h"
#include "harness/verdict/tolerance.h"
#include "model/batch_split.h"
#include "model/data.h"
#include "model/model.h"
#include "parallel/param_plan.h"

namespace parity {

template <class T>
trace::Recorder baseline_trace(const Scenario& s, int64_t t, std::vector<Tensor<T>> params,
                               const std::vector<Buffer<T>>& bias, const RouteOracle& routes,
                               const std::vector<double>& fp8_scales, bool twin) {
  const ModelConfig& c = s.model;
  const PrecisionScope policy(c.precision());
  std::optional<JitterScope> jitter;
  if (twin) perturb(params, twin_stream()), jitter.emplace();
  Model<T> model(c, s.seed);
  for (size_t p = 0; p < params.size() && p < model.params.tensors.size(); ++p)
    model.params.tensors[p] = std::move(params[p]);
  model.expert_bias = bias;
  model.route_oracle = &routes;
  // fp8-delayed: the step quantizes with the baseline's scales of step t (twin.cpp does the same), not a
  // fresh state's (which would quantize nothing, and the first quantized tensor would look like the bug)
  if (!fp8_scales.empty()) std::copy(fp8_scales.begin(), fp8_scales.end(), model.fp8.scales.data.begin());
  const MarkovData data(c.vocab, s.data_seed);
  std::vector<int64_t> in(static_cast<size_t>(c.batch * c.seq)), tg(in.size());
  data.batch(t, 0, c.batch, c.seq, in.data(), tg.data());
  trace::Recorder out;
  const trace::Scope on(&out);
  for (int64_t mb = 0; mb < c.microbatches; ++mb) {  // as the baseline runs them (harness/runner/baseline.cpp)
    const SeqRange seqs = micro_batch_sequences(c.batch, c.microbatches, mb);
    const int64_t off = seqs.begin * c.seq;
    model.route_first_token = off;
    model.forward_backward(in.data() + off, tg.data() + off, seqs.size());
  }
  return out;
}

// PARITY_TRACE_PLANT=SITE:LAYER:fwd|bwd:RANK:RECORD:INDEX (a test hook, core/knobs.h): on world rank
// RANK, local element INDEX of its RECORD-th record of that key (its micro-batches in the order it ran
// them) is moved by 1, after the layout's step and before the compare, as PARITY_FAULT moves a report.
void plant(trace::Recorder& rec, int rank) {
  const char* spec = knob("PARITY_TRACE_PLANT");
  if (spec == nullptr) return;
  std::vector<std::string> f;
  for (std::string s = spec;;) {
    const size_t c = s.find(':');
    f.push_back(s.substr(0, c));
    if (c == std::string::npos) break;
    s = s.substr(c + 1);
  }
  if (f.size() != 6)
    throw ConfigError("PARITY_TRACE_PLANT", "SITE:LAYER:fwd|bwd:RANK:RECORD:INDEX, got " + std::string(spec));
  if (std::stoi(f[3]) != rank) return;
  trace::Key k{trace::Site::embed, std::stoll(f[1]), f[2] == "bwd" ? trace::Dir::bwd : trace::Dir::fwd};
  for (int i = 0; i < trace::kSites; ++i)
    if (trace::site_name(static_cast<trace::Site>(i)) == f[0]) k.site = static_cast<trace::Site>(i);
  int64_t n = std::stoll(f[4]);
  for (trace::Entry& e : rec.entries)
    if (e.key == k && n-- == 0) e.data.at(static_cast<size_t>(std::stoll(f[5]))) += 1;
}

template <class T>
trace_verdict::Result TracedStep<T>::fold(const Scenario& s, comm::Communicator& world, const mesh::Mesh& m,
                                          const StepRecord<T>& b, const std::vector<Tensor<T>>& params,
                                          double param_bound) const {
  const RouteOracle routes{&b.chosen, &b.select_scores, 0, 0, true};  // as the layout follows them
  const LossScaleScope scaled(b.loss_scale);  // fp16: the backward's seeds as the baseline's step scaled them
  const trace::Recorder base = baseline_trace<T>(s, b.step, params, bias, routes, b.fp8_scales, false);
  const trace::Recorder twin = baseline_trace<T>(s, b.step, params, bias, routes, b.fp8_scales, true);
  if (knob("PARITY_TRACE_PLANT") == nullptr) return trace_fold(s, world, m, base, twin, layout, param_bound);
  trace::Recorder planted = layout;
  plant(planted, world.rank());
  return trace_fold(s, world, m, base, twin, planted, param_bound);
}

std::vector<std::vector<double>> trace_full(const std::vector<trace::Key>& keys, const trace::Recorder& base,
                                            const ModelConfig& c) {
  const trace_verdict::StepShape shape = step_shape(c);
  std::vector<std::vector<double>> full(keys.size());  // the baseline's full tensor of the step, per key
  for (const trace::Entry& e : base.entries) {
    const auto it = std::find(keys.begin(), keys.end(), e.key);
    if (it == keys.end()) continue;
    auto& f = full[static_cast<size_t>(it - keys.begin())];
    if (f.empty()) f.assign(static_cast<size_t>(shape.elements(e.key.site)), 0.0);
    trace::for_each_global_index(e, c.seq, [&](int64_t i, int64_t j) {
      f[static_cast<size_t>(j)] = e.data[static_cast<size_t>(i)];
    });
  }
  return full;
}

std::vector<double> trace_sums(const std::vector<trace::Key>& keys, const std::vector<std::vector<double>>& full,
                               const trace::Recorder& mine, const ModelConfig& c) {
  const auto key_index = [&](const trace::Key& k) {
    return static_cast<size_t>(std::find(keys.begin(), keys.end(), k) - keys.begin());
  };
  std::vector<trace_verdict::Sums> sums(keys.size());
  for (const trace::Entry& e : mine.entries) {
    const size_t k = key_index(e.key);
    if (k == keys.size() || full[k].empty()) continue;
    trace::for_each_global_index(e, c.seq, [&](int64_t i, int64_t j) {
      if (j < 0 || static_cast<size_t>(j) >= full[k].size()) return;  // a placement off the tensor: not counted
      sums[k].add(e.data[static_cast<size_t>(i)], full[k][static_cast<size_t>(j)], j);
    });
  }
  std::vector<double> out;
  for (const auto& s : sums) s.pack(out);
  return out;
}

int64_t step_to_trace(comm::Communicator& world, const std::vector<Row>& rows, bool always) {
  double first = -1;
  for (const Row& r : rows)
    if (r.verdict == RowVerdict::fail && r.step >= 0 && (first < 0 || static_cast<double>(r.step) < first))
      first = static_cast<double>(r.step);
  if (first < 0 && always) first = 0;
  std::vector<double> v{first};
  world.allreduce(std::span<double>(v), comm::ReduceOp::max);
  return static_cast<int64_t>(v[0]);
}

std::string rank_coords(const mesh::Mesh& m, int rank) {
  std::string out;
  const auto add = [&](std::string_view name, int64_t size, int64_t coord) {
    if (size > 1) out += (out.empty() ? "" : ", ") + std::string(name) + " " + std::to_string(coord);
  };
  add("pp", m.stages(), m.stage(rank));
  for (mesh::MeshDim d : {mesh::MeshDim::dp_replicate, mesh::MeshDim::dp_shard, mesh::MeshDim::cp, mesh::MeshDim::tp,
                          mesh::MeshDim::ep, mesh::MeshDim::etp})
    add(mesh::dim_name(d), m.size(d), m.coord(d, rank));
  return out;
}

namespace {

// "0-3" / "2" / "0-1, 4-5": a sorted set of indices as runs.
std::string runs(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(v[i]) + (j > i ? "-" + std::to_string(v[j]) : "");
    i = j + 1;
  }
  return out;
}

// Where a record's elements land in the full tensor, through the canonical mapping itself
// (trace::global_token), as table cells: micro-batch, sequences, positions, columns
// ("0 | 4-5 | 0-7 | 8-15 of 16", or "all").
std::string landing(const trace::Entry& e, const ModelConfig& c, const trace_verdict::StepShape& shape) {
  std::map<int64_t, std::vector<int64_t>> pos;  // sequence -> positions
  for (int64_t r = 0; r < e.n_rows; ++r) {
    int64_t g = 0, p = 0;
    trace::global_token(e, r, c.seq, g, p);
    pos[g].push_back(p);
  }
  std::vector<int64_t> seqs;
  bool same = true;
  for (auto& [g, ps] : pos) {
    std::sort(ps.begin(), ps.end());
    same = same && ps == pos.begin()->second;
    seqs.push_back(g);
  }
  int64_t mb = 0;
  while (mb + 1 < c.microbatches && micro_batch_sequences(c.batch, c.microbatches, mb).end <= e.g0) ++mb;
  std::string rows = runs(seqs) + " | " + runs(pos.begin()->second);
  if (!same) {  // positions that differ from sequence to sequence (a flat range of routed rows)
    rows = runs(seqs) + " |";
    for (const auto& [g, ps] : pos) rows += " " + std::to_string(g) + ": " + runs(ps) + ";";
  }
  const int64_t C = shape.cols(e.key.site);
  const std::string cols = e.cols == C ? "all"
                                       : std::to_string(e.col0) + "-" + std::to_string(e.col0 + e.cols - 1) + " of " +
                                             std::to_string(C);
  return std::to_string(mb) + " | " + rows + " | " + cols;
}

}  // namespace

std::vector<std::string> placement_lines(comm::Communicator& world, const mesh::Mesh& m, const trace::Recorder& mine,
                                         const ModelConfig& c) {
  const trace_verdict::StepShape shape = step_shape(c);
  // this rank's records grouped by where they land: per group, each site's layers and directions
  std::vector<std::pair<std::string, std::map<int, std::pair<std::set<int64_t>, std::set<int>>>>> groups;
  for (const trace::Entry& e : mine.entries) {
    const std::string at = landing(e, c, shape);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == at; });
    if (it == groups.end()) it = groups.insert(groups.end(), {at, {}});
    auto& site = it->second[static_cast<int>(e.key.site)];
    if (e.key.layer >= 0 && e.key.layer < c.layers) site.first.insert(e.key.layer);
    site.second.insert(static_cast<int>(e.key.dir));
  }
  std::string text;
  const std::string who = "rank " + std::to_string(world.rank()) + " (" + rank_coords(m, world.rank()) + ")";
  for (const auto& [at, sites] : groups) {
    std::string names;
    for (const auto& [site, ld] : sites) {
      const std::vector<int64_t> layers(ld.first.begin(), ld.first.end());
      names += (names.empty() ? "" : "; ") + trace::site_name(static_cast<trace::Site>(site)) +
               (layers.empty() ? "" : " L" + runs(layers)) + (ld.second.size() == 2 ? " fwd+bwd"
                                                              : *ld.second.begin() == 0 ? " fwd" : " bwd");
    }
    text += "| " + who + " | " + at + " | " + names + " |\n";
  }
  // every rank's lines on every rank (text as int64 characters): the table is rank 0's to print
  const std::vector<int64_t> chars(text.begin(), text.end());
  std::vector<int64_t> counts(static_cast<size_t>(world.size()));
  const std::vector<int64_t> n{static_cast<int64_t>(chars.size())};
  world.allgather(std::span<const int64_t>(n), std::span<int64_t>(counts));
  std::vector<int64_t> all(static_cast<size_t>(std::accumulate(counts.begin(), counts.end(), int64_t{0})));
  world.allgatherv(std::span<const int64_t>(chars), std::span<int64_t>(all), std::span<const int64_t>(counts));
  std::vector<std::string> out{"| rank | micro-batch | sequences | positions | columns | traced (site, layers, "
                               "direction) |",
                               "| --- | --- | --- | --- | --- | --- |"};
  std::string line;
  for (int64_t ch : all) {
    if (ch != '\n') {
      line += static_cast<char>(ch);
      continue;
    }
    out.push_back(line), line.clear();
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> plan_reductions(const Scenario& s, const mesh::Mesh& m) {
  const ParamPlan plan = param_plan(m, s.model, s.model.precision());
  const auto over = [&](mesh::GroupKind k) {
    const size_t n = m.group(k, 0).size();
    return std::string(mesh::group_kind_name(k)) + " (" + std::to_string(n) + (n == 1 ? " rank)" : " ranks)");
  };
  std::vector<std::pair<std::string, std::string>> out;
  for (const ParamEntry& e : plan.entries) {
    const FamilyReduction& r = e.reduction;
    std::string w = s.model.microbatches > 1
                        ? "accumulated over " + std::to_string(s.model.microbatches) + " micro-batches, then "
                        : std::string();
    w += std::string(r.dp_op == DpOp::sum ? "summed" : "averaged") + " over " + over(r.dp_group);
    if (r.tp_sum)
      w += r.tp_sharers > 0 ? ", then over the " + std::to_string(r.tp_sharers) + " tp lanes sharing each KV head"
                            : ", then over " + over(mesh::GroupKind::tp);
    if (e.pair_synced)
      w += ", then over pipeline stages " + std::to_string(e.pair.first) + " and " + std::to_string(e.pair.last);
    out.emplace_back(e.spec.name, std::move(w));
  }
  return out;
}

trace_verdict::Result trace_fold(const Scenario& s, comm::Communicator& world, const mesh::Mesh& m,
                                 const trace::Recorder& base, const trace::Recorder& twin,
                                 const trace::Recorder& mine, double param_bound) {
  const ModelConfig& c = s.model;
  const std::vector<trace::Key> keys = trace_keys(c);
  const std::vector<std::vector<double>> full = trace_full(keys, base, c);  // once for both sums below
  const std::vector<double> own = trace_sums(keys, full, mine, c);
  std::vector<double> all(own.size() * static_cast<size_t>(world.size()));
  world.allgather(std::span<const double>(own), std::span<double>(all));
  const std::vector<double> noise = trace_sums(keys, full, twin, c);  // the twin's distance, per key
  const trace_verdict::StepShape shape = step_shape(c);
  std::vector<double> bounds;
  for (size_t k = 0; k < keys.size(); ++k) {
    const auto n = trace_verdict::Sums::unpack(noise.data() + k * trace_verdict::Sums::kWidth);
    const double rel = n.ref2 > 0 ? std::sqrt(n.diff2 / n.ref2) : std::sqrt(n.diff2);
    bounds.push_back(trace_bound(c.precision(), shape.elements(keys[k].site), rel, param_bound, !s.trajectory).value);
  }
  std::vector<std::string> coords;
  for (int r = 0; r < world.size(); ++r) coords.push_back(rank_coords(m, r));
  trace_verdict::Result out = trace_verdict::first_diverging(keys, all, world.size(), bounds, coords, shape,
                                                             layout_factors(s.layout, c.microbatches));
  out.placements = placement_lines(world, m, mine, c);
  out.reduced = trace_verdict::reduced_after(c, plan_reductions(s, m));
  return out;
}

#define PARITY_INSTANTIATE(T)                                                                              \
  template trace::Recorder baseline_trace<T>(const Scenario&, int64_t, std::vector<Tensor<T>>,               \
                                             const std::vector<Buffer<T>>&, const RouteOracle&,               \
                                             const std::vector<double>&, bool);                             \
  template struct TracedStep<T>;
PARITY_INSTANTIATE(float)
PARITY_INSTANTIATE(double)
#undef PARITY_INSTANTIATE

}  // namespace parity
