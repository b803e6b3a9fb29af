// `parity compare` (dump_compare.h): two dumps' steps side by side, row by row as `parity run`
// folds them (harness/verdict), with world 1 and every tensor full.
#include "harness/verdict/dump_compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/safetensors.h"
#include "harness/verdict/dump_read.h"
#include "harness/verdict/dump_shards.h"
#include "harness/verdict/dump_split.h"
#include "harness/verdict/trace_compare.h"
#include "harness/scenario/scenario.h"
#include "harness/verdict/bounds.h"
#include "harness/verdict/family_sums.h"
#include "harness/verdict/verdict_detail.h"
#include "harness/verdict/verdict_flow.h"
#include "harness/verdict/verdict_wire.h"
#include "mesh/layout_config.h"
#include "model/params.h"
#include "optim/optimizer.h"

namespace parity {

namespace vd = verdict_detail;
using nlohmann::json;

namespace {

constexpr int64_t kMaxMapBytes = int64_t{16} << 20;

// parity name -> (candidate name, transpose)
using NameMap = std::map<std::string, std::pair<std::string, bool>>;

NameMap read_map(const std::string& file, const std::vector<ParamSpec>& specs) {
  NameMap m;
  for (const ParamSpec& p : specs) m[p.name] = {p.name, false};
  if (file.empty()) return m;
  const json j = json::parse(read_regular(file, kMaxMapBytes, Blame::user_input, "--map file"), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw ConfigError("--map", file + ": expected a JSON object {\"candidate name\": \"parity name\"}");
  for (const auto& [cand, v] : j.items()) {
    std::string name;
    bool transpose = false;
    if (v.is_string()) name = v.get<std::string>();
    else if (v.is_object() && v.contains("name") && v["name"].is_string())
      name = v["name"].get<std::string>(), transpose = v.value("transpose", false);
    else throw ConfigError("--map", file + ": $." + cand + ": expected a parity name or {\"name\", \"transpose\"}");
    if (!m.count(name)) throw ConfigError("--map", file + ": $." + cand + ": \"" + name + "\" is not a parameter of "
                                                   "the reference's model");
    m[name] = {cand, transpose};
  }
  return m;
}

// Tokens, counts and chosen experts are integers (I64); every other tensor a float.
bool integer_valued(const std::string& name) {
  const auto ends = [&](const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return name == "inputs" || name == "targets" || ends(".tokens_per_expert") || ends(".chosen");
}

// Reads `name` of `f` (step `step` of dump `d`) in parity's layout: `shape`, transposed from
// (b, a) when asked. Missing tensors and other shapes are bad input, named.
std::vector<double> read(const Dump& d, const SafetensorsFile& f, int64_t step, const std::string& name,
                         const Shape& shape, bool transpose = false) {
  const std::string where =
      d.dir + (step < 0 ? " initial parameters" : " step " + std::to_string(step)) + " (" + f.path() + ")";
  if (!f.contains(name))
    throw ConfigError(d.role, where + " has no tensor \"" + name + "\"" +
                                  (d.role == "candidate" ? " (names that differ: --map FILE)" : ""));
  Shape want = shape;
  if (transpose && want.size() == 2) std::swap(want[0], want[1]);
  if (f.shape(name) != want)
    throw ConfigError(d.role, where + ": \"" + name + "\" has shape " + shape_str(f.shape(name)) + ", expected " +
                                  shape_str(want) +
                                  (!transpose && shape.size() == 2 && f.shape(name) == Shape{shape[1], shape[0]}
                                       ? " (stored (out, in)? map it with \"transpose\": true)"
                                       : ""));
  std::vector<double> v = stored_doubles(d, f, where, name, integer_valued(name) ? Stored::integer : Stored::real);
  if (d.role == "reference") require_finite_reference(d, step, name, v);  // exit 4: nothing to judge against
  if (!transpose || shape.size() != 2) return v;
  std::vector<double> t(v.size());
  const int64_t a = shape[0], b = shape[1];
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j) t[static_cast<size_t>(i * b + j)] = v[static_cast<size_t>(j * a + i)];
  return t;
}

double scalar(const Dump& d, const SafetensorsFile& f, int64_t step, const std::string& name) {
  return read(d, f, step, name, {})[0];
}

// The steps of two dumps folded into the rows of `parity run`'s verdict (verdict_run.cpp's
// Runner with world 1: each element counted once, no replicas), from the same per-family sums
// (verdict_detail.h LocalSums, verdict_wire.h UpdateSums, verdict_flow.h TensorSums, family_sums.h).
class Comparer {
 public:
  Comparer(const Dump& ref, const Dump& got, NameMap map)
      : ref_(ref), got_(got), map_(std::move(map)), c_(ref.scenario->model), specs_(param_specs(c_)) {
    vd::VerdictLayout v = vd::verdict_layout(specs_, c_);
    fams_ = std::move(v.families), elements_ = std::move(v.elements), group_of_ = std::move(v.group_of);
    groups_ = std::move(v.groups), rows_ = std::move(v.rows);
    n_ = fams_.size();
    inputs_row_ = rows_.size();
    rows_.push_back(vd::make_row("inputs", "inputs, targets"));
    replicas_row_ = rows_.size();
    if (got_.records_replicas()) rows_.push_back(vd::make_row("replicas", "every rank's copies", 0));
    shards_row_ = rows_.size();
    if (plan_.any()) rows_.push_back(vd::make_row("shards", "", 0));
    env_.emplace(c_.precision(), fams_, elements_);
    grad_bound_.assign(n_, 0.0);
    const SafetensorsFile R = ref_.file(-1), G = got_.file(-1, &ref_);
    for (size_t p = 0; p < specs_.size(); ++p) {
      ref_before_.push_back(read(ref_, R, -1, specs_[p].name, specs_[p].shape));
      got_before_.push_back(candidate(G, -1, "", p, ref_before_.back()));
    }
    init_problems_ = std::move(shard_problems_);
  }

  StepLine step(int64_t t);
  // The candidate's tensor of parameter p (prefix "grads.", "params.", "" for the initial
  // parameters) in parity's layout: read whole, or its shards assembled (dump_shards.h), their
  // findings kept for the shards row; `ref`: the reference's, for the findings.
  std::vector<double> candidate(const SafetensorsFile& G, int64_t t, const std::string& prefix, size_t p,
                                const std::vector<double>& ref);
  // The shards row at step t (a sharded gradient's worst shard goes on its failing row's flow_tensor).
  void shards_row(int64_t t);
  // Whether the step's replicas record (dump_split.h) finds a rank's whole parameters apart.
  bool replica_params_differ(int64_t t) const;
  std::vector<Row>& rows() { return rows_; }
  const std::vector<double>& param_bounds() const { return param_bound_; }  // per step, the largest
  // What the candidate recorded of its split, for the signatures (verdict_signature.h).
  void split_into(LayoutDegrees& d) const {
    d.batch = c_.batch, d.rank_sequences = rank_sequences_, d.own_mean_ratio = own_mean_;
  }

 private:
  // Step t's bounds (the reference's twin noise), set on the groups; the param rows' largest kept.
  const StepBounds& bounds(int64_t t);
  void inputs(int64_t t, const SafetensorsFile& R, const SafetensorsFile& G);
  // Tokens per expert and the expert bias per MoE layer (into sums), and every token's routing (its rows).
  void routes(int64_t t, const SafetensorsFile& R, const SafetensorsFile& G, const StepBounds& sb,
              std::vector<vd::LocalSums>& sums, StepLine& line);
  // Every group's sums into its row: a grad row's first wrong tensor, a param row's update.
  void fold_groups(int64_t t, const StepBounds& sb, const std::vector<Bound>& grad,
                   const std::vector<vd::LocalSums>& sums, const std::vector<verdict_wire::UpdateSums>& upd,
                   const std::vector<double>& tensor_sums, const std::vector<std::string>& names);
  double own_mean_ratio(const SafetensorsFile& G, int64_t t, double loss_ref) const;
  // grad: this step's grad bounds (sb.grad, widened for a family far below the model's gradient scale)
  void scalars(int64_t t, const SafetensorsFile& R, const SafetensorsFile& G, const StepBounds& sb,
               const std::vector<Bound>& grad, StepLine& line, const std::vector<double>& ref_sq,
               const std::vector<double>& got_sq);

  const Dump &ref_, &got_;
  NameMap map_;
  ModelConfig c_;
  std::vector<ParamSpec> specs_;
  std::vector<Family> fams_;
  std::vector<double> elements_;
  std::vector<size_t> group_of_;  // per parameter: its family group
  double model_sq_peak_ = 0, far_model_sq_peak_ = 0;  // the reference's largest squared gradient norm so far
  size_t n_ = 0;                  // grad groups [0, n), param groups [n, 2n), then tokens_per_expert, expert_bias
  std::vector<vd::GroupSpec> groups_;
  std::vector<Row> rows_;         // loss, grad_norm, clip_coef, groups..., routing per layer, inputs
  std::optional<BoundEnvelope> env_;
  std::vector<std::vector<double>> ref_before_, got_before_;  // parameters before the step
  size_t inputs_row_ = 0;
  std::vector<std::vector<int64_t>> taken_;  // this step's [dp rank][micro-batch] sequences (dump_split.h)
  std::vector<int64_t> rank_sequences_;      // step 0's per dp rank
  std::vector<double> own_mean_;             // per step: LayoutDegrees::own_mean_ratio
  std::vector<bool> micro_comparable_;  // per micro-batch: the candidate's holds the reference's sequences
  ShardPlan plan_ = ShardPlan::read(got_);  // the candidate's placements (dump_shards.h)
  size_t replicas_row_ = 0, shards_row_ = 0;
  std::vector<double> grad_bound_;  // per grad group, this step's (the twin's, before widening): copies summed
  std::vector<std::string> shard_problems_, init_problems_;  // this step's, the initial parameters'
  struct Copies {  // a Replicate tensor whose copies differ: the first named, their sum's error
    std::string first;
    std::string summed;  // the Replicate dims over which the copies' sum is the reference's
    size_t param = 0;
  };
  std::map<std::string, Copies> copies_;             // by key, this step
  std::map<size_t, std::string> worst_shard_;        // a sharded gradient's worst shard, this step
  int64_t shards_seen_ = 0;
  std::vector<double> param_bound_;  // per step: its largest param row bound (trace_compare.h)
};

std::vector<double> Comparer::candidate(const SafetensorsFile& G, int64_t t, const std::string& prefix, size_t p,
                                        const std::vector<double>& ref) {
  const auto& [cand, tr] = map_.at(specs_[p].name);
  const std::string key = (prefix.empty() ? "params." : prefix) + cand, name = prefix + cand;
  if (!plan_.sharded(key)) return read(got_, G, t, name, specs_[p].shape, tr);
  const std::string where =
      got_.dir + (t < 0 ? " initial parameters" : " step " + std::to_string(t)) + " (" + G.path() + ")";
  if (tr) throw ConfigError("candidate", where + ": \"" + key + "\" is sharded and mapped with \"transpose\": give "
                                                 "its placement \"transposed\": true instead");
  const ShardedTensor st = plan_.load(got_, G, where, key, name, specs_[p].shape);
  std::vector<std::string> gaps;
  std::vector<double> v = assemble(st, gaps);
  for (const std::string& g : gaps) shard_problems_.push_back(key + ": " + g);
  shards_seen_ += static_cast<int64_t>(st.shards.size());
  const std::vector<double> rs = to_stored(st, ref);
  if (t < 0)  // the initial parameters are the reference's bit for bit: a shard elsewhere is misplaced
    for (const Shard& s : st.shards)
      if (std::string m = s.copy_of < 0 ? misplaced(s, st.stored, rs) : ""; !m.empty())
        shard_problems_.push_back(key + ": " + m);
  std::string summed;  // a gradient's copies summed against its row's bound (set by step() before the reads)
  const std::vector<std::string> differ = copies_differ(st, rs, grad_bound_[group_of_[p]], summed);
  if (!differ.empty())
    copies_[key] = {differ.front() + (differ.size() > 1 ? " (and " + std::to_string(differ.size() - 1) + " more)" : ""),
                    summed, p};
  if (prefix == "grads.") {
    const std::string w = worst_shard(st, rs, to_stored(st, v), 0.0);
    if (!w.empty()) worst_shard_[p] = w;
  }
  return v;
}

bool Comparer::replica_params_differ(int64_t t) const {
  const auto [rec, where] = got_.step_record(t, "replicas");
  if (!rec.is_object() || !rec.contains("differ") || !rec["differ"].is_array()) return false;
  for (const json& d : rec["differ"])
    if (d.is_object() && d.value("what", std::string()) == "params") return true;
  return false;
}

void Comparer::shards_row(int64_t t) {
  if (!plan_.any()) return;
  std::vector<std::string> bad = t == 0 ? init_problems_ : std::vector<std::string>{};
  bad.insert(bad.end(), shard_problems_.begin(), shard_problems_.end());
  for (const auto& [key, c] : copies_) {
    std::string d = key + ": " + c.first;
    const bool grads = key.rfind("grads.", 0) == 0;
    if (grads && !c.summed.empty()) {  // each copy its own part: a sum not taken, or not yet
      const std::string pkey = "params." + key.substr(6);  // held whole: rank 0's, its copies the replicas row's
      const bool params_too = plan_.sharded(pkey) ? copies_.count(pkey) > 0 : replica_params_differ(t);
      d += "; summed over " + c.summed + ", the copies are the reference's gradient: each holds its own part, " +
           std::string(plan_.sharded(pkey) ? "" : "the parameters held whole (the replicas row), ") +
           std::string(params_too ? "and the parameters' copies differ too: the step took it unsummed (a gradient "
                                    "not reduced over the Replicate dims)"
                                  : "and the parameters' copies agree: the step was right, the gradient was recorded "
                                    "before its reduction (a Partial tensor recorded as Replicate: record it Partial)");
    }
    bad.push_back(d);
  }
  vd::Outcome o;
  o.scale_ratio = std::numeric_limits<double>::quiet_NaN();
  o.compared = shards_seen_, o.norm_rel = static_cast<double>(bad.size());
  if (!bad.empty()) {
    o.verdict = RowVerdict::fail;
    for (size_t i = 0; i < bad.size() && i < 3; ++i) o.detail += (i ? "; " : "") + bad[i];
    if (bad.size() > 3) o.detail += "; and " + std::to_string(bad.size() - 3) + " more";
  }
  vd::update_row(rows_[shards_row_], t, o);
  shard_problems_.clear(), copies_.clear(), shards_seen_ = 0;
}

void Comparer::inputs(int64_t t, const SafetensorsFile& R, const SafetensorsFile& G) {
  vd::Outcome o;
  o.scale_ratio = std::numeric_limits<double>::quiet_NaN();
  int64_t diff = 0, n = 0;
  for (const char* name : {"inputs", "targets"}) {
    const auto a = read(ref_, R, t, name, {c_.batch, c_.seq}), b = read(got_, G, t, name, {c_.batch, c_.seq});
    for (size_t i = 0; i < a.size(); ++i, ++n) {
      if (a[i] == b[i]) continue;
      if (diff++ == 0)
        o.worst = {name, unravel(static_cast<int64_t>(i), {c_.batch, c_.seq}), 0, b[i], a[i], std::abs(b[i] - a[i])};
    }
  }
  o.compared = n, o.norm_rel = n > 0 ? static_cast<double>(diff) / static_cast<double>(n) : 0.0;
  // The candidate's split, when it records one: any split, each sequence taken once (dump_split.h)
  micro_comparable_.assign(static_cast<size_t>(c_.microbatches), true);
  taken_.clear();
  std::string split;
  if (G.contains("sequences")) {
    const std::string where = got_.dir + " step " + std::to_string(t) + " (" + G.path() + ")";
    if (G.shape("sequences").size() != 2 || G.shape("sequences")[1] != 3)
      throw ConfigError("candidate", where + ": \"sequences\" has shape " + shape_str(G.shape("sequences")) +
                                         ", expected (N, 3): (global index, dp rank, micro-batch) per row");
    SplitCheck sc = check_split(stored_doubles(got_, G, where, "sequences", Stored::integer), c_.batch,
                                c_.microbatches);
    micro_comparable_ = std::move(sc.micro_comparable), split = std::move(sc.problem), taken_ = std::move(sc.taken);
    if (rank_sequences_.empty())
      for (const auto& per_mb : taken_) rank_sequences_.push_back(std::accumulate(per_mb.begin(), per_mb.end(), 0L));
  }
  if (!split.empty()) o.verdict = RowVerdict::fail, o.detail = split;
  if (diff > 0)
    o.verdict = RowVerdict::fail,
    o.detail += (split.empty() ? "" : "; ") + std::to_string(diff) + " of " + std::to_string(n) +
                " tokens differ" +
                (split.empty() ? ": the candidate trained on other data (another data seed, or sequences "
                                 "recorded at other indices than the ones trained on)"
                               : "");
  vd::update_row(rows_[inputs_row_], t, o);
}

// Each (dp rank, micro-batch)'s loss part weighted by its sequences, over the batch and the
// reference's loss: 1 / pieces when every part was its rank's own mean (NaN: not recorded).
double Comparer::own_mean_ratio(const SafetensorsFile& G, int64_t t, double loss_ref) const {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (!G.contains("rank_losses") || taken_.empty() || loss_ref == 0) return nan;
  const Shape sh = G.shape("rank_losses");
  if (sh.size() != 2 || sh[1] != c_.microbatches || sh[0] < static_cast<int64_t>(taken_.size())) return nan;
  const std::string where = got_.dir + " step " + std::to_string(t) + " (" + G.path() + ")";
  const std::vector<double> p = stored_doubles(got_, G, where, "rank_losses", Stored::real);
  double sum = 0;
  for (size_t r = 0; r < taken_.size(); ++r)
    for (size_t m = 0; m < taken_[r].size(); ++m)
      sum += p[r * static_cast<size_t>(sh[1]) + m] * static_cast<double>(taken_[r][m]);
  return sum / (static_cast<double>(c_.batch) * loss_ref);
}

void Comparer::scalars(int64_t t, const SafetensorsFile& R, const SafetensorsFile& G, const StepBounds& sb,
                       const std::vector<Bound>& grad, StepLine& line, const std::vector<double>& ref_sq,
                       const std::vector<double>& got_sq) {
  vd::Outcome loss, norm, clip;
  loss.norm_rel = norm.norm_rel = clip.norm_rel = -1;
  const double lr = scalar(ref_, R, t, "loss"), lg = scalar(got_, G, t, "loss");
  vd::consider_scalar(loss, lg, lr, 0, "loss", sb.loss.value);
  const auto mr = read(ref_, R, t, "micro_losses", {c_.microbatches});
  const auto mg = read(got_, G, t, "micro_losses", {c_.microbatches});
  for (size_t m = 0; m < mr.size(); ++m) {
    if (!micro_comparable_[m]) continue;  // another split's micro-batch: another part of the loss
    const double err = std::abs(mg[m] - mr[m]) / (mr[m] != 0 ? std::abs(mr[m]) : 1.0);
    line.micro_rel = std::max(line.micro_rel, std::isnan(err) ? std::numeric_limits<double>::infinity() : err);
    vd::consider_scalar(loss, mg[m], mr[m], 0, "micro-batch " + std::to_string(m), sb.loss.value, lr);
  }
  own_mean_.push_back(own_mean_ratio(G, t, lr));
  const double nr = scalar(ref_, R, t, "grad_norm"), ng = scalar(got_, G, t, "grad_norm");
  const double cr = scalar(ref_, R, t, "clip_coef"), cg = scalar(got_, G, t, "clip_coef");
  const Bound nb = with_explained(sb.grad_norm, vd::norm_explained_by_families(ref_sq, got_sq.data(), fams_, grad));
  vd::consider_scalar(norm, ng, nr, 0, "grad_norm", nb.value);
  vd::consider_scalar(clip, cg, cr, 0, "clip_coef", nb.value);
  if (clip.verdict == RowVerdict::fail) {  // each rank's own coefficient, where recorded (dump_split.h)
    const auto [rec, where] = got_.step_record(t, "clip_coefs");
    clip.detail = clip_by_rank(rec, where, cr, nb.value);
  }
  line.loss = lg, line.loss_ref = lr, line.loss_diff = lg - lr, line.grad_norm_rel = norm.norm_rel;
  line.clip_coef = cg, line.clip_ref = cr;
  if (norm.verdict == RowVerdict::ok && vd::family_norm_off(ref_sq, got_sq.data(), fams_, grad))
    norm.verdict = RowVerdict::fail;
  loss.bound = sb.loss, norm.bound = clip.bound = nb;
  vd::update_row(rows_[0], t, loss);
  vd::update_row(rows_[1], t, norm);
  if (rows_[1].verdict == RowVerdict::fail && rows_[1].step == t && rows_[1].detail.empty())
    rows_[1].detail = vd::norm_by_family(ref_sq, got_sq.data(), fams_, grad, sb.grad_norm.value);
  vd::update_row(rows_[2], t, clip);
}

const StepBounds& Comparer::bounds(int64_t t) {
  const StepBounds& sb = env_->step(ref_.noise(t, c_.precision()));
  for (size_t g = 0; g < n_; ++g) {
    groups_[g].far_bound = sb.grad_far[g];  // the grad rows' bounds: below, widened for the model
    groups_[n_ + g].tol.norm_rel = sb.param[g].value;
    grad_bound_[g] = sb.grad[g].value;
  }
  if (groups_.size() > 2 * n_) groups_[2 * n_ + 1].tol.norm_rel = sb.expert_bias.value;  // tokens_per_expert: exact
  param_bound_.push_back(0);
  for (size_t g = 0; g < n_; ++g) param_bound_.back() = std::max(param_bound_.back(), sb.param[g].value);
  return sb;
}

void Comparer::routes(int64_t t, const SafetensorsFile& R, const SafetensorsFile& G, const StepBounds& sb,
                      std::vector<vd::LocalSums>& sums, StepLine& line) {
  // tokens per expert and the expert bias, per MoE layer; the routing of every token
  const auto n_tok = c_.batch * c_.seq;
  for (int64_t l = 0; l < c_.moe_layers(); ++l) {
    const std::string pre = "layers." + std::to_string(c_.dense_layers + l) + ".moe.";
    const auto rt = read(ref_, R, t, pre + "tokens_per_expert", {c_.experts});
    const auto gt = read(got_, G, t, pre + "tokens_per_expert", {c_.experts});
    const auto rb = read(ref_, R, t, pre + "expert_bias", {c_.experts});
    const auto gb = read(got_, G, t, pre + "expert_bias", {c_.experts});
    for (int64_t e = 0; e < c_.experts; ++e) {
      const auto i = static_cast<size_t>(e);
      sums[2 * n_].add(l, e, gt[i], rt[i], true), sums[2 * n_ + 1].add(l, e, gb[i], rb[i], true);
    }
    const auto rc = read(ref_, R, t, pre + "chosen", {n_tok, c_.top_k});
    const auto gc = read(got_, G, t, pre + "chosen", {n_tok, c_.top_k});
    const std::vector<double> scores =  // a reference without them: no near-tie arbitration
        R.contains(pre + "select_scores")
            ? read(ref_, R, t, pre + "select_scores", {n_tok, c_.experts})
            : std::vector<double>(static_cast<size_t>(n_tok * c_.experts), std::numeric_limits<double>::quiet_NaN());
    std::vector<int64_t> ids(static_cast<size_t>(n_tok)), base(rc.begin(), rc.end()), mine(gc.begin(), gc.end());
    for (int64_t i = 0; i < n_tok; ++i) ids[static_cast<size_t>(i)] = i;
    const double tie = tolerance_for(c_.dtype, Quantity::routing_score).elem_rel;
    const vd::RouteLocal rl = vd::compare_routes(ids, mine, base, scores, c_.top_k, c_.experts, tie, sb.route_tie);
    Row& row = rows_[3 + groups_.size() + static_cast<size_t>(l)];
    vd::update_row(row, t, vd::routing_outcome({rl}, std::vector<int64_t>(static_cast<size_t>(n_tok), 1), row.subject));
    line.route_diff += static_cast<int64_t>(rl.mismatch), line.near_ties += static_cast<int64_t>(rl.near_tie);
  }
}

void Comparer::fold_groups(int64_t t, const StepBounds& sb, const std::vector<Bound>& grad,
                           const std::vector<vd::LocalSums>& sums, const std::vector<verdict_wire::UpdateSums>& upd,
                           const std::vector<double>& tensor_sums, const std::vector<std::string>& names) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    vd::Outcome o = vd::group_outcome(groups_[g], vd::combine({sums[g]}));
    o.bound = g < n_ ? grad[g] : g < 2 * n_ ? sb.param[g - n_] : g == 2 * n_ ? Bound{} : sb.expert_bias;
    if (g < n_ && o.verdict == RowVerdict::fail) {  // grad rows: the first wrong tensor, backward
      std::vector<size_t> members;
      for (size_t q = 0; q < specs_.size(); ++q)
        if (group_of_[q] == g) members.push_back(q);
      const auto fw = verdict_flow::first_wrong(tensor_sums, tensor_sums.size(), 0, 1, members, names, c_.layers,
                                                o.bound.value);
      o.flow = fw.pos, o.flow_tensor = fw.tensor;
      for (size_t q : members)  // a sharded first wrong tensor: its worst shard, by rank and placement
        if (specs_[q].name == fw.tensor && worst_shard_.count(q)) o.flow_tensor += ", " + worst_shard_.at(q);
    }
    if (g >= n_ && g < 2 * n_) {  // param rows: scale and far elements read on the update
      const verdict_wire::UpdateSums& u = upd[g - n_];
      if (u.update.ref2 > 0) o.scale_ratio = u.update.scale_ratio();
      vd::check_far(o, u.far, u.count, sb.update_far[g - n_], "of the update");
    }
    vd::update_row(rows_[3 + g], t, o);
  }
}

StepLine Comparer::step(int64_t t) {
  const SafetensorsFile R = ref_.file(t), G = got_.file(t, &ref_);
  const StepBounds& sb = bounds(t);
  StepLine line;
  line.step = t;
  inputs(t, R, G);
  // gradients and parameters, tensor by tensor, into their family's sums
  std::vector<vd::LocalSums> sums(groups_.size());
  std::vector<double> tensor_sums;
  std::vector<std::vector<double>> rg(specs_.size()), gg(specs_.size()), rp(specs_.size()), gp(specs_.size());
  // the per-family sums of a rank's verdict (family_sums.h): the squared gradient norm per family,
  // the reference's; is_far's magnitude floors: its gradients, parameters after the step, update
  std::vector<double> ref_t(specs_.size()), got_t(specs_.size());
  family_sums::GroupSquares grad_sq(n_), par_sq(n_), upd_sq(n_);
  for (size_t p = 0; p < specs_.size(); ++p) {
    rg[p] = read(ref_, R, t, "grads." + specs_[p].name, specs_[p].shape);
    gg[p] = candidate(G, t, "grads.", p, rg[p]);
    rp[p] = read(ref_, R, t, "params." + specs_[p].name, specs_[p].shape);
    gp[p] = candidate(G, t, "params.", p, rp[p]);
    const size_t g = group_of_[p];
    const auto n = static_cast<int64_t>(rg[p].size());
    ref_t[p] = sum_of_squares(rg[p].data(), n), got_t[p] = sum_of_squares(gg[p].data(), n);
    grad_sq.add_tensor(g, ref_t[p], static_cast<double>(n));
    par_sq.add_tensor(g, sum_of_squares(rp[p].data(), n), static_cast<double>(n));
    for (size_t i = 0; i < rp[p].size(); ++i) upd_sq.add_element(g, rp[p][i] - ref_before_[p][i]);
  }
  const std::vector<double> ref_sq = family_sums::per_family(specs_, ref_t);
  const std::vector<double> got_sq = family_sums::per_family(specs_, got_t);
  double model_sq = 0, model_n = 0;  // a grad row's floor for its model (tolerance.h gradient_row_bound)
  for (size_t g = 0; g < n_; ++g) model_sq += grad_sq.sq(g), model_n += elements_[g];
  // the model's gradient scale is its largest so far, for the rows' floors and a dead family's far
  // elements alike, as `parity run`'s verdict takes it (verdict_run.cpp fold, verdict_part.cpp)
  model_sq_peak_ = std::max(model_sq_peak_, model_sq);
  grad_sq.hold_model_peak(far_model_sq_peak_);
  std::vector<Bound> grad = sb.grad;
  const auto tokens = static_cast<double>(c_.batch * c_.seq);
  for (size_t g = 0; g < n_; ++g) {
    grad[g] =
        gradient_row_bound(c_.precision(), grad[g], {grad_sq.sq(g), elements_[g], model_sq_peak_, model_n, tokens});
    groups_[g].tol.norm_rel = grad[g].value;
  }
  std::vector<int64_t> tensor_id(n_, 0);
  std::vector<verdict_wire::UpdateSums> upd(n_);
  std::vector<std::string> names;
  for (size_t p = 0; p < specs_.size(); ++p) {
    const size_t g = group_of_[p];
    const int64_t id = tensor_id[g]++;
    const double rms = grad_sq.floor(g, true), prms = par_sq.floor(g, false), urms = upd_sq.rms(g);
    verdict_flow::TensorSums ts;
    for (size_t i = 0; i < rg[p].size(); ++i) {
      sums[g].add(id, static_cast<int64_t>(i), gg[p][i], rg[p][i], true, rms);
      ts.add(gg[p][i], rg[p][i]);
    }
    tensor_sums.insert(tensor_sums.end(), {ts.d2, ts.r2});
    names.push_back(specs_[p].name);
    for (size_t i = 0; i < rp[p].size(); ++i) {
      sums[n_ + g].add(id, static_cast<int64_t>(i), gp[p][i], rp[p][i], true, prms);
      upd[g].add(gp[p][i] - got_before_[p][i], rp[p][i] - ref_before_[p][i], urms);
    }
  }
  scalars(t, R, G, sb, grad, line, ref_sq, got_sq);
  routes(t, R, G, sb, sums, line);
  fold_groups(t, sb, grad, sums, upd, tensor_sums, names);
  shards_row(t);
  worst_shard_.clear();
  if (got_.records_replicas()) {  // every rank's copies against rank 0's, bit for bit (dump_split.h)
    int64_t pairs = 0;
    const auto [rec, where] = got_.step_record(t, "replicas");
    const std::vector<std::string> bad = rec.is_null() ? std::vector<std::string>{}
                                                       : replica_differences(rec, where, pairs);
    vd::update_row(rows_[replicas_row_], t, vd::replicas_outcome(bad, pairs));
  }
  ref_before_ = std::move(rp), got_before_ = std::move(gp);
  return line;
}

// The candidate's layout, as its producer recorded it (parity_torch's Collector: world, dp;
// any of tp, ep, etp, cp, pp): the degrees a wrong factor is named by, each a factor word of
// the degree table (mesh/layout_config.h), read in the table's order.
LayoutDegrees producer_degrees(const Dump& got, const ModelConfig& c, std::string& desc) {
  const json p = got.manifest.value("producer", json::object());
  desc = p.is_object() ? p.value("name", std::string("an unnamed producer")) : "an unnamed producer";
  std::map<std::string, int64_t, std::less<>> values;
  for (const Degree& d : layout_degrees()) {
    const std::string k(d.factor);
    if (!p.is_object() || k.empty() || values.count(k)) continue;
    if (p.contains(k) && p[k].is_number_integer() && p[k].get<int64_t>() > 1)
      values[k] = p[k].get<int64_t>(), desc += ", " + k + " " + std::to_string(values[k]);
  }
  return named_factors(values, c.microbatches);
}

VerdictReport compare_dumps_impl(const DumpCompareOptions& o, const Dump& ref, const Dump& got) {
  const Scenario& s = *ref.scenario;
  int64_t steps = 0;
  while (ref.files.count(steps)) ++steps;
  if (o.steps >= 0) {
    if (o.steps > steps)
      throw ConfigError("--steps", "the reference " + o.ref_dir + " holds steps 0.." + std::to_string(steps - 1) +
                                       ", not " + std::to_string(o.steps));
    steps = o.steps;
  }
  if (steps == 0) throw ConfigError("reference", o.ref_dir + " holds no step to compare");
  for (int64_t t = 0; t < steps; ++t)
    if (!got.files.count(t)) (void)got.file(t);  // throws, naming the missing step and those there are
  VerdictReport rep;
  rep.command = "compare";
  rep.scenario = s.name, rep.dtype = std::string(dtype_name(s.model.dtype));
  rep.precision = precision_name(s.model.precision()), rep.backend = "dumps";
  std::string producer;
  rep.degrees = producer_degrees(got, s.model, producer);
  rep.world = static_cast<int>(rep.degrees.of("world")), rep.steps = steps, rep.optim = vd::optim_desc(s.optim);
  const bool twin = !ref.noise(0, s.model.precision()).empty();
  rep.layout =
      "candidate " + o.got_dir + " (" + producer + ") against reference " + o.ref_dir +
      (twin ? " (bounds: its rounding twin)" : " (bounds: floors only, the reference records no rounding twin)");
  Comparer cmp(ref, got, read_map(o.map_file, param_specs(s.model)));
  for (int64_t t = 0; t < steps; ++t) rep.step_lines.push_back(cmp.step(t));
  cmp.split_into(rep.degrees);
  rep.rows = cmp.rows();
  std::stable_sort(rep.rows.begin(), rep.rows.end(), [](const Row& a, const Row& b) {
    return static_cast<int>(a.verdict) < static_cast<int>(b.verdict);
  });
  compare_traces(rep, ref, got, cmp.param_bounds());  // issue 45: both dumps traced (trace_compare.h)
  return rep;
}

}  // namespace

VerdictReport compare_dumps(const DumpCompareOptions& o) {
  Dump ref = Dump::open(o.ref_dir, "reference"), got = Dump::open(o.got_dir, "candidate");
  if (!ref.scenario)
    throw ConfigError("reference", o.ref_dir + "/manifest.json records no scenario ($.scenario): the reference "
                                                 "must be a `parity dump`, whose scenario fixes the model");
  if (got.scenario) {  // the same model, the same precision, or nothing to compare
    const Precision pa = ref.scenario->model.precision(), pb = got.scenario->model.precision();
    if (precision_name(pa) != precision_name(pb))
      throw ConfigError("candidate", o.got_dir + " ran in " + precision_name(pb) + ", the reference in " +
                                         precision_name(pa) + ": dump the reference with --precision " +
                                         precision_name(pb) + " (the bounds are the reference's precision's)");
    const json a = scenario_to_json(*ref.scenario)["model"], b = scenario_to_json(*got.scenario)["model"];
    for (const auto& [k, v] : a.items())
      if (!b.contains(k) || b[k] != v)
        throw ConfigError("candidate", o.got_dir + " ran another model: $.model." + k + " is " +
                                           (b.contains(k) ? b[k].dump() : "absent") + ", the reference's " + v.dump() +
                                           " (dump the reference from the candidate's scenario)");
  }
  ref.bound_files(ref.scenario->model), got.bound_files(ref.scenario->model);  // no read without bound
  return compare_dumps_impl(o, ref, got);
}

}  // namespace parity
