#include "harness/runner/run_request.h"

#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/inject.h"
#include "core/json_object.h"
#include "core/precision.h"
#include "core/text.h"
#include "harness/scenario/scenario.h"
#include "harness/verdict/verdict.h"

namespace parity {

Scenario resolve_scenario(const std::string& path, const Overrides& o, std::optional<ValidLayout>* proof) {
  Scenario s = load_scenario(path, Rules::defer);  // validated once, below, with the overrides
  if (o.steps >= 0) s.steps = o.steps;
  if (!o.precision.empty()) s.model.set_precision(parse_precision(o.precision, "--precision"));
  if (!o.backend.empty()) s.layout.backend = comm::parse_backend(o.backend);
  if (!o.backend.empty() && s.resume) s.resume->layout.backend = s.layout.backend;
  if (!o.device.empty()) {
    s.layout.device = parse_device(o.device);  // ConfigError on an unknown name
    if (s.resume) s.resume->layout.device = s.layout.device;
  }
  // nccl moves device buffers: a layout on nccl computes on the GPU.
  if (s.layout.backend == comm::Backend::nccl) s.layout.device = Device::cuda;
  if (s.resume && s.resume->layout.backend == comm::Backend::nccl) s.resume->layout.device = Device::cuda;
  if (!o.optim.empty()) {
    if (o.optim == "sgd") s.optim.kind = OptimKind::sgd;
    else if (o.optim == "adam") s.optim.kind = OptimKind::adam;
    else if (o.optim == "adamw") s.optim.kind = OptimKind::adamw;
    else throw ConfigError("--optim", "must be sgd, adam or adamw, got " + o.optim);
  }
  if (o.lr >= 0) s.optim.lr = o.lr;
  if (o.trajectory) s.trajectory = true;
  try {
    ValidLayout v = validate_scenario(s);  // the schema and the runner's rules (validate), both layouts
    if (proof) proof->emplace(std::move(v));
  } catch (const ConfigError& e) {
    throw ConfigError(printable(path, 4096) + ": " + e.path(), e.rule());
  }
  return s;
}

std::string_view rank_job_name(RankJob j) {
  switch (j) {
    case RankJob::verdict: return "verdict";
    case RankJob::curves: return "curves";
    case RankJob::comm_bench: return "comm_bench";
  }
  return "?";
}

int64_t RunRequest::world() const { return scenario ? scenario->layout.world : bench_world; }

comm::Backend RunRequest::backend() const {
  return scenario ? scenario->layout.backend : comm::parse_backend(bench_backend);
}

nlohmann::json request_json(const RunRequest& r) {
  nlohmann::json j{{"job", rank_job_name(r.job)}};
  if (r.scenario) j["scenario"] = scenario_to_json(*r.scenario);
  if (!r.report.empty()) j["report"] = r.report;
  if (r.save_at >= 0) j["save_at"] = r.save_at, j["ckpt"] = r.ckpt;
  if (!r.resume.empty()) j["resume"] = r.resume;
  if (r.trace) j["trace"] = true;
  if (!r.carry.empty()) j["carry"] = r.carry;
  if (!r.out.empty()) j["out"] = r.out;
  if (r.rank_timeout_s > 0) j["timeout_s"] = r.rank_timeout_s;
  if (!r.inject.empty()) j["inject"] = r.inject;
  if (!r.fault.empty()) j["fault"] = r.fault;
  if (r.launch_t0_ns > 0) j["launch_t0_ns"] = r.launch_t0_ns;
  if (!r.baseline_file.empty()) j["baseline_file"] = r.baseline_file;
  if (r.job == RankJob::comm_bench)
    j["bench"] = {{"world", r.bench_world},         {"backend", r.bench_backend},
                  {"dtype", r.bench_dtype},         {"min_bytes", r.bench.min_bytes},
                  {"max_bytes", r.bench.max_bytes}, {"factor", static_cast<int64_t>(r.bench.factor)},
                  {"json", r.bench.json},           {"ops", r.bench.ops}};
  return j;
}

namespace {

// A request of 64 MiB is no request parity wrote: refused before it is read.
constexpr int64_t kMaxRequestBytes = int64_t{1} << 22;

void read_bench(const nlohmann::json& b, const std::string& path, RunRequest& r) {
  const ObjectReader rb(b, path, {"world", "backend", "dtype", "min_bytes", "max_bytes", "factor", "json", "ops"});
  rb.require_keys({"world", "backend", "dtype"});
  rb.read("world", r.bench_world);
  rb.read("backend", r.bench_backend);
  rb.read("dtype", r.bench_dtype);
  rb.read("min_bytes", r.bench.min_bytes);
  rb.read("max_bytes", r.bench.max_bytes);
  int64_t factor = r.bench.factor;
  rb.read("factor", factor);
  r.bench.factor = static_cast<int>(factor);
  rb.read("json", r.bench.json);
  if (const nlohmann::json* ops = rb.find("ops")) {
    if (!ops->is_array()) throw ConfigError(rb.at("ops"), "expected an array of names, got " + json_shown(*ops));
    r.bench.ops.clear();
    for (const auto& op : *ops) {
      if (!op.is_string()) throw ConfigError(rb.at("ops"), "expected names, got " + json_shown(op));
      r.bench.ops.push_back(op.get<std::string>());
    }
  }
  (void)comm::parse_backend(r.bench_backend);  // ConfigError on an unknown name
  r.bench.dtype = parse_dtype(r.bench_dtype);
}

RunRequest parse_request(const nlohmann::json& j) {
  RunRequest r;
  const ObjectReader rd(j, "$",
                        {"job", "scenario", "report", "save_at", "ckpt", "resume", "out", "timeout_s", "bench",
                         "inject", "fault", "launch_t0_ns", "baseline_file", "trace", "carry"});
  rd.require_keys({"job"});
  rd.read_enum("job", r.job, {"verdict", "curves", "comm_bench"},
               {RankJob::verdict, RankJob::curves, RankJob::comm_bench});
  rd.read("report", r.report);
  rd.read("save_at", r.save_at);
  rd.read("ckpt", r.ckpt);
  rd.read("resume", r.resume);
  rd.read("trace", r.trace);
  rd.read("carry", r.carry);
  rd.read("out", r.out);
  rd.read("timeout_s", r.rank_timeout_s);
  rd.read("inject", r.inject);
  rd.read("fault", r.fault);
  rd.read("launch_t0_ns", r.launch_t0_ns);
  rd.read("baseline_file", r.baseline_file);
  // refused here, naming the key, rather than on a rank's first use
  std::stringstream names(r.inject);
  for (std::string name; std::getline(names, name, ',');) {
    try {
      if (!name.empty()) (void)find_injection(name);
    } catch (const ConfigError& e) {
      throw ConfigError("$.inject", e.rule());
    }
  }
  try {
    if (!r.fault.empty()) (void)parse_fault(r.fault);
  } catch (const ConfigError& e) {
    throw ConfigError("$.fault", e.rule());
  }
  if (r.job == RankJob::comm_bench) {
    if (rd.find("bench") == nullptr) throw ConfigError("$.bench", "required key is missing (job comm_bench)");
    read_bench(*rd.find("bench"), rd.at("bench"), r);
    return r;
  }
  if (rd.find("scenario") == nullptr) throw ConfigError("$.scenario", "required key is missing");
  try {
    r.scenario = parse_scenario(*rd.find("scenario"), "", Rules::defer);
    r.valid = validate_scenario(*r.scenario);  // once in a rank: ParallelRun takes it (run_request.h)
  } catch (const ConfigError& e) {
    throw ConfigError("$.scenario" + e.path().substr(e.path().rfind('$', 0) == 0 ? 1 : 0), e.rule());
  }
  if (r.scenario->resume) throw ConfigError("$.scenario.resume", "a request runs one phase: no resume object");
  if (r.job == RankJob::curves && r.out.empty()) throw ConfigError("$.out", "required for job curves");
  if ((r.save_at >= 0) != !r.ckpt.empty()) throw ConfigError("$.save_at", "save_at and ckpt go together");
  return r;
}

}  // namespace

RunRequest read_request(const std::string& path) {
  const std::string shown = printable(path, 4096);
  const auto text = read_regular_if_exists(path, kMaxRequestBytes, Blame::user_input, "run request");
  if (!text) throw ConfigError(shown, "cannot open the run request (missing or unreadable)");
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) throw ConfigError(shown, "not JSON: a run request is what a parity launcher writes");
  try {
    return parse_request(j);
  } catch (const ConfigError& e) {
    throw ConfigError(shown + ": " + e.path(), e.rule());
  }
}

}  // namespace parity
