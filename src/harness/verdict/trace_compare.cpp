// `parity compare`'s trace (trace_compare.h).
#include "harness/verdict/trace_compare.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "core/error.h"
#include "harness/verdict/bounds.h"
#include "harness/verdict/tolerance.h"
#include "harness/verdict/trace_verdict.h"

namespace parity {

using nlohmann::json;

namespace {

// The dump's trace files by step, as a Dump of their own (its reads checked as the step files' are:
// plain names inside the directory, no link, within a bound from the model's traced tensors).
Dump trace_view(const Dump& d, const ModelConfig& c) {
  Dump v = d;
  v.files.clear();
  const json& list = d.manifest["trace_files"];
  for (size_t k = 0; k < list.size(); ++k) {
    const std::string at = d.role + " " + d.dir + "/manifest.json: $.trace_files[" + std::to_string(k) + "]";
    const json& f = list[k];
    if (!f.is_object() || !f.contains("file") || !f["file"].is_string() || !f.contains("step") ||
        !f["step"].is_number_integer() || f["step"].get<int64_t>() < 0)
      throw ConfigError(at, "expected {\"file\": NAME, \"step\": N >= 0}");
    const std::string name = f["file"].get<std::string>();
    if (const std::string why = dump_file_name_problem(name); !why.empty())
      throw ConfigError(at + ".file", "\"" + name + "\" " + why + ": a dump's files are plain names inside it");
    if (!v.files.emplace(f["step"].get<int64_t>(), name).second)
      throw ConfigError(at + ".step", "step " + f["step"].dump() + " is listed twice");
  }
  const trace_verdict::StepShape sh = trace_verdict::step_shape(c);
  const int64_t cols = std::max({sh.dim * std::max<int64_t>(sh.top_k, 1), sh.vocab, sh.experts});
  v.max_file_bytes = 2 * 8 * static_cast<int64_t>(trace_verdict::trace_keys(c).size()) * sh.batch * sh.seq * cols +
                     (int64_t{16} << 20);
  return v;
}

// The data-parallel rank that computed each sequence of step t (the candidate's `sequences`: (g, dp
// rank, micro-batch) rows); all 0 where it records none.
std::vector<int> rank_of_sequence(const Dump& got, const Dump& ref, int64_t t, int64_t batch, int& world) {
  std::vector<int> out(static_cast<size_t>(batch), 0);
  world = 1;
  const SafetensorsFile f = got.file(t, &ref);
  if (!f.contains("sequences")) return out;
  const std::string where = got.dir + " step " + std::to_string(t) + " (" + f.path() + ")";
  const std::vector<double> rows = stored_doubles(got, f, where, "sequences", Stored::integer);
  for (size_t i = 0; i + 2 < rows.size(); i += 3) {
    const auto g = static_cast<int64_t>(rows[i]), r = static_cast<int64_t>(rows[i + 1]);
    if (g < 0 || g >= batch || r < 0 || r > 4096) continue;  // the inputs row names a bad split
    out[static_cast<size_t>(g)] = static_cast<int>(r), world = std::max(world, static_cast<int>(r) + 1);
  }
  return out;
}

// Under tp (parity_torch's trace.py): each (sequence, position) row's world rank, "trace_owner.fwd.NAME"
// (B, S) int64, and every rank's coordinates, the manifest's "trace_ranks"; empty where not recorded.
std::vector<int> owners(const Dump& got, const SafetensorsFile& G, const std::string& name, const std::string& where,
                        const ModelConfig& c, int world) {
  const std::string own = "trace_owner" + name.substr(5);
  if (world == 0 || !G.contains(own)) return {};
  if (G.shape(own) != Shape{c.batch, c.seq})
    throw ConfigError("candidate", got.dir + where + ": \"" + own + "\" has shape " + shape_str(G.shape(own)) +
                                       ", expected (B, S)");
  std::vector<int> out;
  for (double r : stored_doubles(got, G, got.dir + where, own, Stored::integer))
    out.push_back(r >= 0 && r < world ? static_cast<int>(r) : 0);
  return out;
}

double noise_of(const Dump& ref, int64_t t, const std::string& name, const Precision& p) {
  const auto [rec, where] = ref.step_record(t, "trace_noise");
  if (!rec.is_object() || !rec.contains(name)) return NAN;  // not measured: the floor decides
  const json& v = rec[name];
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
    throw ConfigError(where + "." + name, "expected a finite noise >= 0, got " + v.dump());
  return std::min(v.get<double>(), noise_ceiling(p, kNoiseGrad));  // held as a gradient row's is
}

// The step `parity run` would trace: the earliest failing row's, else 0.
int64_t step_to_trace(const VerdictReport& rep) {
  int64_t t = -1;
  for (const Row& r : rep.rows)
    if (r.verdict == RowVerdict::fail && r.step >= 0 && (t < 0 || r.step < t)) t = r.step;
  return std::max<int64_t>(t, 0);
}

}  // namespace

bool holds_traces(const Dump& d) { return d.manifest.contains("trace_files") && d.manifest["trace_files"].is_array(); }

namespace {

// The traces of step t compared (both dumps hold them): the first diverging key and the trace's lines.
trace_verdict::Result trace_step(const VerdictReport& rep, const Dump& ref, const Dump& got, const Dump& rt,
                                 const Dump& gt, int64_t t, const std::vector<double>& param_bound) {
  const ModelConfig& c = ref.scenario->model;
  const SafetensorsFile R = rt.file(t), G = gt.file(t, &rt);
  int world = 1;
  const std::vector<int> rank_of = rank_of_sequence(got, ref, t, c.batch, world);
  std::vector<std::string> coords;  // under tp, cp or pp: every rank's coordinates (trace.py's trace_ranks)
  if (const json r = got.manifest.value("trace_ranks", json()); r.is_array() && !r.empty() && r.size() <= 65536)
    for (const json& x : r) coords.push_back(x.is_string() ? x.get<std::string>() : x.dump());
  if (!coords.empty()) world = static_cast<int>(coords.size());
  const std::vector<trace::Key> all_keys = trace_verdict::trace_keys(c);
  const trace_verdict::StepShape shape = trace_verdict::step_shape(c);
  const double pb = t > 0 && static_cast<size_t>(t) <= param_bound.size() ? param_bound[t - 1] : 0.0;
  std::vector<trace::Key> keys;
  std::vector<std::vector<trace_verdict::Sums>> sums;  // [key][rank]
  std::vector<double> bounds;
  std::vector<std::string> untraced;
  for (const trace::Key& k : all_keys) {
    const std::string name = trace_verdict::tensor_name(k, c.layers);
    if (!R.contains(name)) continue;  // a key this model does not record
    if (!G.contains(name)) {
      untraced.push_back(trace::key_name(k, c.layers));
      continue;
    }
    const std::string where = " step " + std::to_string(t) + " (" + G.path() + ")";
    if (G.shape(name) != R.shape(name))
      throw ConfigError("candidate", got.dir + where + ": \"" + name + "\" has shape " + shape_str(G.shape(name)) +
                                         ", the reference's " + shape_str(R.shape(name)) + " (B, S, columns)");
    const std::vector<double> r = stored_doubles(rt, R, ref.dir + " step " + std::to_string(t), name, Stored::real);
    require_finite_reference(rt, t, name, r);
    const std::vector<double> x = stored_doubles(gt, G, got.dir + where, name, Stored::real);
    const int64_t per_seq = static_cast<int64_t>(r.size()) / std::max<int64_t>(c.batch, 1);
    const std::vector<int> own = owners(got, G, name, where, c, coords.empty() ? 0 : world);
    const int64_t per_row = per_seq / std::max<int64_t>(c.seq, 1);
    std::vector<trace_verdict::Sums> s(static_cast<size_t>(world));
    for (size_t i = 0; i < r.size(); ++i) {
      const auto j = static_cast<int64_t>(i);
      const int rank = own.empty() ? rank_of[static_cast<size_t>(j / per_seq)] : own[static_cast<size_t>(j / per_row)];
      s[static_cast<size_t>(rank)].add(x[i], r[i], j);
    }
    keys.push_back(k), sums.push_back(std::move(s));
    bounds.push_back(trace_bound(c.precision(), static_cast<double>(r.size()), noise_of(ref, t, name, c.precision()),
                                 pb, t == 0)
                         .value);
  }
  std::vector<double> packed;  // per rank, per key (trace_verdict.h)
  for (int w = 0; w < world; ++w)
    for (const auto& s : sums) s[static_cast<size_t>(w)].pack(packed);
  for (auto w = static_cast<int>(coords.size()); w < world; ++w)
    coords.push_back(world > 1 ? "dp " + std::to_string(w) : "");
  trace_verdict::Result res = trace_verdict::first_diverging(keys, packed, world, bounds, coords, shape, rep.degrees);
  res.lines.insert(res.lines.begin() + 1, "  traced step " + std::to_string(t) +
                                              (pb > 0 ? " (bounds at least the parameters' drift before it)" : ""));
  if (!untraced.empty()) {
    std::string u;
    for (size_t i = 0; i < untraced.size() && i < 4; ++i) u += (i ? "; " : "") + untraced[i];
    res.lines.push_back("  not traced by the candidate: " + std::to_string(untraced.size()) + " of " +
                        std::to_string(untraced.size() + keys.size()) + " (" + u +
                        (untraced.size() > 4 ? "; ..." : "") + ")");
  }
  return res;
}

// Whether the replicas row fails first at step t: the ranks' copies came apart during it.
bool replicas_part_at(const VerdictReport& rep, int64_t t) {
  for (const Row& r : rep.rows)
    if (r.quantity == "replicas" && r.verdict == RowVerdict::fail && r.step == t) return true;
  return false;
}

}  // namespace

void compare_traces(VerdictReport& rep, const Dump& ref, const Dump& got, const std::vector<double>& param_bound) {
  if (!holds_traces(ref) || !holds_traces(got)) return;
  const ModelConfig& c = ref.scenario->model;
  const Dump rt = trace_view(ref, c), gt = trace_view(got, c);
  const int64_t t = step_to_trace(rep);
  if (!rt.files.count(t) || !gt.files.count(t)) {
    rep.trace_lines = {"trace: step " + std::to_string(t) + " is not traced in both dumps: nothing compared"};
    return;
  }
  trace_verdict::Result res = trace_step(rep, ref, got, rt, gt, t, param_bound);
  // A replica that came apart after step t's forward (its update, a rank's own change) is clean in step t's
  // trace; step t + 1's forward is the first to read the copies, and every rank's trace of it names the rank
  // whose copy is off the reference (the replicas row names only the ranks that differ from rank 0's).
  if (!res.found && replicas_part_at(rep, t) && rt.files.count(t + 1) && gt.files.count(t + 1)) {
    trace_verdict::Result next = trace_step(rep, ref, got, rt, gt, t + 1, param_bound);
    const std::string at = "step " + std::to_string(t + 1) + ", the first forward to read the copies";
    res.lines.push_back("  the replicas came apart at step " + std::to_string(t) + ": " + at + " (" +
                        (next.lines.empty() ? std::string("-") : next.lines[0]) + ")");
    for (size_t i = 2; i < next.lines.size(); ++i) res.lines.push_back("  " + next.lines[i]);
    if (next.found) res.found = true, res.root = at + ": " + next.root;
  }
  rep.trace_root = res.found ? res.root : "", rep.trace_lines = std::move(res.lines);
  rep.trace_reduced = trace_verdict::reduced_after(c);  // the ops only: a dump holds no parameter plan
}

}  // namespace parity
