#include "mesh/layout_config.h"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/json_object.h"
#include "mesh/fsdp_dim_json.h"
#include "mesh/param_layout.h"
#include "model/batch_split.h"

namespace parity {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// Each enum's names, written once: its *_name and read_layout's read_enum both read the table.
template <class E> struct Named {
  std::string_view name;
  E value;
};
template <class E, size_t N> using Names = std::array<Named<E>, N>;
constexpr Names<RankOrder, 2> kOrders = {{{"megatron", RankOrder::megatron}, {"deepspeed", RankOrder::deepspeed}}};
constexpr Names<DpSharding, 4> kShardings = {{{"fsdp", DpSharding::fsdp},
                                              {"ddp", DpSharding::ddp},
                                              {"zero1", DpSharding::zero1},
                                              {"zero2", DpSharding::zero2}}};
constexpr Names<Recompute, 4> kRecomputes = {{{"none", Recompute::none},
                                              {"full", Recompute::full},
                                              {"attention", Recompute::attention},
                                              {"mlp", Recompute::mlp}}};
constexpr Names<CpOrder, 2> kCpOrders = {{{"contiguous", CpOrder::contiguous}, {"balanced", CpOrder::balanced}}};
constexpr Names<PpSchedule, 3> kSchedules = {
    {{"gpipe", PpSchedule::gpipe}, {"1f1b", PpSchedule::one_f_one_b}, {"interleaved", PpSchedule::interleaved}}};

template <class E, size_t N> std::string_view name_in(const Names<E, N>& names, E v) {
  for (const Named<E>& n : names)
    if (n.value == v) return n.name;
  return "?";
}

// read_enum's two lists, from the one table
template <class E, size_t N> void read_named(const ObjectReader& r, const std::string& key, E& out,
                                             const Names<E, N>& names) {
  std::vector<std::string> words;
  std::vector<E> values;
  for (const Named<E>& n : names) words.emplace_back(n.name), values.push_back(n.value);
  r.read_enum(key, out, words, values);
}

}  // namespace

std::string_view order_name(RankOrder o) { return name_in(kOrders, o); }
std::string_view dp_sharding_name(DpSharding s) { return name_in(kShardings, s); }
std::string_view recompute_name(Recompute r) { return name_in(kRecomputes, r); }
std::string_view pp_schedule_name(PpSchedule s) { return name_in(kSchedules, s); }
std::string_view cp_order_name(CpOrder o) { return name_in(kCpOrders, o); }

const std::vector<Degree>& layout_degrees() {
  static const std::vector<Degree> table = {
      {"world", &LayoutConfig::world, false, "", "world", 5},
      {"dp_replicate", &LayoutConfig::dp_replicate, false, "dpr", "dp", 3},
      {"dp_shard", &LayoutConfig::dp_shard, false, "dps", "dp", 3},
      {"tp", &LayoutConfig::tp, false, "tp", "tp", 0},
      {"ep", &LayoutConfig::ep, false, "", "ep", 1},
      {"etp", &LayoutConfig::etp, false, "", "etp", 2},
      {"cp", &LayoutConfig::cp, true, "cp", "cp", 4},  // cp and the pipeline keys came later: older files have none
      {"pp", &LayoutConfig::pp, true, "pp", "pp", 7},
      {"pp_virtual", &LayoutConfig::pp_virtual, true, "", "", -1},
  };
  return table;
}

const std::vector<std::string_view>& factor_words() {
  static const std::vector<std::string_view> words = [] {
    std::vector<const Degree*> rows;
    for (const Degree& d : layout_degrees())
      if (!d.factor.empty()) rows.push_back(&d);
    std::stable_sort(rows.begin(), rows.end(),
                     [](const Degree* a, const Degree* b) { return a->factor_order < b->factor_order; });
    std::vector<std::string_view> out;
    for (const Degree* d : rows)
      if (std::find(out.begin(), out.end(), d->factor) == out.end()) out.push_back(d->factor);
    return out;
  }();
  return words;
}

int64_t factor_value(const LayoutConfig& l, std::string_view word) {
  int64_t v = 1;
  for (const Degree& d : layout_degrees())
    if (d.factor == word) v *= l.*d.field;
  return v;
}

const std::vector<Degree>& world_factors() {
  static const std::vector<Degree> factors = [] {
    std::vector<Degree> out;
    for (std::string_view key : {"pp", "dp_replicate", "dp_shard", "cp", "tp"})
      for (const Degree& d : layout_degrees())
        if (d.key == key) out.push_back(d);
    return out;
  }();
  return factors;
}

namespace {

std::string s(int64_t v) { return std::to_string(v); }

// The checkpoint record's keys after the degrees, each with its value in words: the one list
// that read_layout's checkpoint keys and mesh_differences both read.
std::vector<std::pair<std::string, std::string>> checkpoint_words(const LayoutConfig& l) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Degree& d : layout_degrees()) out.emplace_back(d.key, s(l.*d.field));
  out.emplace_back("pp_layers", l.pp_layers.empty() ? "even" : json(l.pp_layers).dump());
  out.emplace_back("order", order_name(l.order));
  return out;
}

std::vector<std::string> record_keys(std::vector<std::string> after_degrees) {
  std::vector<std::string> keys;
  for (const Degree& d : layout_degrees()) keys.emplace_back(d.key);
  keys.insert(keys.end(), after_degrees.begin(), after_degrees.end());
  return keys;
}

const std::vector<std::string> kScenarioKeys =
    record_keys({"pp_layers", "pp_schedule", "sp", "order", "recompute", "backend", "device", "fsdp_dim",
                 "dp_sharding", "expert_dp_sharding", "cp_order"});
// pp's split decides where every layer's elements live; its schedule does not
const std::vector<std::string> kCheckpointKeys = [] {
  std::vector<std::string> keys;
  for (const auto& [key, word] : checkpoint_words(LayoutConfig{})) keys.push_back(key);
  return keys;
}();

// a*b, or -1 on overflow (callers multiply positive degrees only).
int64_t mul(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? -1 : out;
}

}  // namespace

LayoutConfig read_layout(const json& j, const std::string& path, LayoutRecord record) {
  const bool scenario = record == LayoutRecord::scenario;
  const ObjectReader r(j, path, scenario ? kScenarioKeys : kCheckpointKeys);
  if (!scenario) {  // a checkpoint records every degree its first files had
    std::vector<std::string> required;
    for (const Degree& d : layout_degrees())
      if (!d.omitted_when_one) required.emplace_back(d.key);
    r.require_keys(required);
  }
  LayoutConfig l;
  for (const Degree& d : layout_degrees()) r.read(std::string(d.key), l.*d.field);
  r.read("pp_layers", l.pp_layers);
  if (const json* f = r.find("pp_layers"); f != nullptr && l.pp_layers.empty())  // [] is no split, not "even"
    throw ConfigError(r.at("pp_layers"), "must not be empty: one layer count per virtual stage (pp*pp_virtual), "
                                         "or leave the key out for an even split");
  read_named(r, "order", l.order, kOrders);
  if (!scenario) return l;
  read_named(r, "pp_schedule", l.pp_schedule, kSchedules);
  r.read("sp", l.sp);
  read_named(r, "cp_order", l.cp_order, kCpOrders);
  read_named(r, "recompute", l.recompute, kRecomputes);
  if (const json* f = r.find("fsdp_dim")) l.fsdp_dim = parse_fsdp_dim(*f, r.at("fsdp_dim"));
  r.read_enum("backend", l.backend, {"gloo", "mpi", "nccl", "sim"},
              {comm::Backend::gloo, comm::Backend::mpi, comm::Backend::nccl, comm::Backend::sim});
  r.read_enum("device", l.device, {"cpu", "cuda"}, {Device::cpu, Device::cuda});
  read_named(r, "dp_sharding", l.dp_sharding, kShardings);
  l.expert_dp_sharding = l.dp_sharding;  // the experts follow the dense families unless told
  read_named(r, "expert_dp_sharding", l.expert_dp_sharding, kShardings);
  return l;
}

ordered_json layout_json(const LayoutConfig& l, LayoutRecord record) {
  ordered_json j = ordered_json::object();
  for (const Degree& d : layout_degrees())
    if (!d.omitted_when_one || l.*d.field != 1) j[std::string(d.key)] = l.*d.field;
  if (!l.pp_layers.empty()) j["pp_layers"] = l.pp_layers;
  if (l.pp != 1 && record == LayoutRecord::scenario) j["pp_schedule"] = std::string(pp_schedule_name(l.pp_schedule));
  if (l.order != RankOrder::megatron) j["order"] = std::string(order_name(l.order));
  if (record == LayoutRecord::checkpoint) return j;
  j["sp"] = l.sp;
  if (l.cp_order != CpOrder::contiguous) j["cp_order"] = std::string(cp_order_name(l.cp_order));  // older files: none
  if (l.recompute != Recompute::none) j["recompute"] = std::string(recompute_name(l.recompute));
  j["backend"] = std::string(comm::backend_name(l.backend));
  if (l.device != Device::cpu) j["device"] = std::string(device_name(l.device));
  if (auto f = fsdp_dim_json(l.fsdp_dim)) j["fsdp_dim"] = *f;
  if (l.dp_sharding != DpSharding::fsdp) j["dp_sharding"] = std::string(dp_sharding_name(l.dp_sharding));
  if (l.expert_dp_sharding != l.dp_sharding)
    j["expert_dp_sharding"] = std::string(dp_sharding_name(l.expert_dp_sharding));
  return j;
}

std::vector<FieldDifference> mesh_differences(const LayoutConfig& a, const LayoutConfig& b) {
  const auto wa = checkpoint_words(a), wb = checkpoint_words(b);
  std::vector<FieldDifference> out;
  for (size_t i = 0; i < wa.size(); ++i)
    if (wa[i].second != wb[i].second) out.push_back({wa[i].first, wa[i].second, wb[i].second});
  return out;
}

namespace {

// ", zero1" / ", zero1, experts fsdp": the data-parallel sharding where it is not the default
// (the default adds nothing, so files that record a layout's words keep them).
std::string sharding_words(const LayoutConfig& l) {
  if (l.dp_sharding == DpSharding::fsdp && l.expert_dp_sharding == DpSharding::fsdp) return "";
  std::string out = ", " + std::string(dp_sharding_name(l.dp_sharding));
  if (l.expert_dp_sharding != l.dp_sharding) out += ", experts " + std::string(dp_sharding_name(l.expert_dp_sharding));
  return out;
}

// ", pp schedule 1f1b" (+ " x 2 virtual", ", layers 3/1"): the pipeline beyond its degree, or
// nothing when pp is 1.
std::string pipeline_words(const LayoutConfig& l) {
  if (l.pp == 1) return "";
  std::string out = ", " + std::string(pp_schedule_name(l.pp_schedule));
  if (l.pp_virtual > 1) out += " x " + s(l.pp_virtual) + " virtual";
  for (size_t i = 0; i < l.pp_layers.size(); ++i) out += (i == 0 ? ", layers " : "/") + s(l.pp_layers[i]);
  return out;
}

}  // namespace

std::string describe_layout(const LayoutConfig& l, LayoutText form) {
  const std::string pipeline = pipeline_words(l);
  const std::string order = l.order == RankOrder::megatron ? "" : ", " + std::string(order_name(l.order)) + " order";
  const std::string sharding = sharding_words(l) + (l.cp_order == CpOrder::balanced ? ", cp balanced" : "");
  const std::string recompute =
      l.recompute == Recompute::none ? "" : ", recompute " + std::string(recompute_name(l.recompute));
  if (form == LayoutText::full || form == LayoutText::report) {
    std::string out = "world " + s(l.world) + " =";  // the factors of world; cp and pp only where used
    for (const Degree& d : world_factors())
      if (!d.omitted_when_one || l.*d.field != 1)
        out += std::string(out.back() == '=' ? " " : " x ") + std::string(d.key) + " " + s(l.*d.field);
    out += form == LayoutText::full ? ", ep " + s(l.ep) + ", etp " + s(l.etp)
                                    : " (ep " + s(l.ep) + ", etp " + s(l.etp) + ")";
    return out + (l.sp ? ", sp" : "") + order + sharding + recompute + pipeline;
  }
  if (form == LayoutText::brief) {
    std::string out;
    auto add = [&](const char* k, int64_t v) {
      if (v > 1) out += std::string(out.empty() ? "" : " x ") + k + " " + s(v);
    };
    for (const Degree& d : world_factors()) {
      add(std::string(d.brief).c_str(), l.*d.field);
      if (d.field == &LayoutConfig::pp && l.pp > 1) out += " (" + pipeline.substr(2) + ")";
    }
    if (l.sp) out += " (sp)";
    if (l.ep > 1) out += std::string(out.empty() ? "" : ", ") + "ep " + s(l.ep) + (l.etp > 1 ? " etp " + s(l.etp) : "");
    if (l.order != RankOrder::megatron) out += (out.empty() ? std::string(order_name(l.order)) + " order" : order);
    if (!sharding.empty()) out += out.empty() ? sharding.substr(2) : sharding;
    return out.empty() ? "one device" : out + recompute;
  }
  std::vector<std::string> parts;  // stem
  if (l.pp > 1)
    parts.push_back("pp" + s(l.pp) + "_" + std::string(pp_schedule_name(l.pp_schedule)) +
                    (l.pp_virtual > 1 ? s(l.pp_virtual) : "") + (l.pp_layers.empty() ? "" : "_uneven"));
  const std::string mode(dp_sharding_name(l.dp_sharding));  // fsdp4, ddp4, zero1_dp4; hsdp2x2_zero1
  if (l.dp_replicate > 1)
    parts.push_back("hsdp" + s(l.dp_replicate) + "x" + s(l.dp_shard) + (mode == "fsdp" ? "" : "_" + mode));
  else if (l.dp_shard > 1)
    parts.push_back(mode == "fsdp" || mode == "ddp" ? mode + s(l.dp_shard) : mode + "_dp" + s(l.dp_shard));
  if (l.cp > 1) parts.push_back("cp" + s(l.cp) + (l.cp_order == CpOrder::balanced ? "_balanced" : ""));
  if (l.tp > 1) parts.push_back("tp" + s(l.tp));
  if (l.sp) parts.push_back("sp");
  if (l.ep > 1) parts.push_back("ep" + s(l.ep));
  // shipped names leave out etp where it is the usual one: tp without EP, 1 with EP
  if (l.etp != (l.ep > 1 ? 1 : l.tp)) parts.push_back("etp" + s(l.etp));
  if (l.expert_dp_sharding != l.dp_sharding) parts.push_back("e" + std::string(dp_sharding_name(l.expert_dp_sharding)));
  if (l.recompute != Recompute::none) parts.push_back("recompute_" + std::string(recompute_name(l.recompute)));
  std::string out = l.order == RankOrder::deepspeed ? "ds" : "";  // as the shipped ds_* files
  for (const std::string& p : parts) out += (out.empty() ? "" : "_") + p;
  return out;
}

void check_structure(const LayoutConfig& l, const std::string& p) {
  for (const Degree& d : layout_degrees())
    require_config(l.*d.field >= 1, p + std::string(d.key), "must be >= 1, got " + s(l.*d.field));
  require_config(l.world <= kMaxWorld, p + "world", "must be <= " + s(kMaxWorld) + ", got " + s(l.world));
  // the rule names cp and pp only where they are used: messages without them stay as they were
  int64_t dense = 1;
  std::string names, values;
  for (const Degree& d : world_factors()) {
    dense = mul(dense, l.*d.field);
    if (d.omitted_when_one && l.*d.field == 1) continue;
    names += (names.empty() ? "" : "*") + std::string(d.key);
    values += (values.empty() ? "" : "*") + s(l.*d.field);
  }
  require_config(dense == l.world, p + "world",
                 "must equal " + names + " (" + values + "), got " + s(l.world));
  const bool pp = l.pp != 1;
  const int64_t expert = mul(mul(l.dp_replicate, l.ep), l.etp), stage = l.world / l.pp;
  require_config(expert > 0 && stage % expert == 0, p + "ep",
          "dp_replicate*ep*etp (" + s(l.dp_replicate) + "*" + s(l.ep) + "*" + s(l.etp) + ") must divide layout.world" +
              (pp ? "/pp (" + s(stage) + ")" : " (" + s(l.world) + ")") + " so that edp_shard is whole");
}

void validate_layout(const LayoutConfig& l, const ModelConfig& m, const std::string& p) {
  check_structure(l, p);  // structural rules first
  require_config(m.experts % l.ep == 0, p + "ep",
          "must divide model.experts (" + s(m.experts) + ") so that each EP rank holds whole experts, got " + s(l.ep));
  require_config(m.heads % l.tp == 0, p + "tp",
          "must divide model.heads (" + s(m.heads) + ") so that each TP rank holds whole heads, got " + s(l.tp));
  // key / value heads: split over the lanes (kv_heads a multiple of tp) or each replicated over
  // tp / kv_heads lanes (tp a multiple of kv_heads; param_plan.cpp sums their gradient there)
  require_config(m.kv() % l.tp == 0 || l.tp % m.kv() == 0, p + "tp",
          "must divide model.kv_heads (" + s(m.kv()) + ": KV heads split over the lanes) or be a multiple of it "
          "(each KV head replicated over tp / kv_heads lanes), got " + s(l.tp));
  if (l.sp) {
    require_config(l.tp > 1, p + "sp", "sequence parallel requires layout.tp > 1");
    require_config(m.seq % l.tp == 0, p + "sp",
            "sequence parallel requires layout.tp (" + s(l.tp) + ") to divide model.seq (" + s(m.seq) + ")");
  }
  validate_cp(l, m, p);
  validate_pp(l, m, p);
  mesh::check_fsdp_dim(l, m, p);
  // the one-device baseline never recomputes: on world 1 the option would check nothing
  require_config(l.recompute == Recompute::none || l.world > 1, p + "recompute",
          "activation recompute is a layout option and needs layout.world > 1 (the one-device baseline never "
          "recomputes), got world 1 with recompute " +
              std::string(recompute_name(l.recompute)));
}

ValidLayout validate(const LayoutConfig& l, const ModelConfig& m, const std::string& p) {
  validate_layout(l, m, p);
  check_batch_split(m.batch, m.microbatches);
  return ValidLayout(l);
}

void validate_pp(const LayoutConfig& l, const ModelConfig& m, const std::string& p) {
  const bool inter = l.pp_schedule == PpSchedule::interleaved;
  require_config(l.pp_virtual == 1 || inter, p + "pp_virtual",
          "virtual stages need layout.pp_schedule \"interleaved\", got pp_virtual " + s(l.pp_virtual));
  require_config(!inter || l.pp > 1, p + "pp_schedule",
          "the interleaved schedule needs layout.pp > 1 (stages to interleave), got pp " + s(l.pp));
  // every virtual stage holds at least one layer: pp*pp_virtual <= layers (divided: no overflow)
  require_config(l.pp_virtual == 1 || l.pp_virtual <= m.layers / l.pp, p + "pp_virtual",
          "must be at most model.layers / layout.pp (" + s(m.layers) + " / " + s(l.pp) + " = " + s(m.layers / l.pp) +
              ": each virtual stage holds at least one layer), got " + s(l.pp_virtual));
  if (inter && l.pp > 1) {
    require_config(l.pp_virtual > 1, p + "pp_virtual", "the interleaved schedule needs pp_virtual > 1, got 1");
    require_config(m.microbatches % l.pp == 0, p + "pp_schedule",
            "the interleaved schedule needs layout.pp (" + s(l.pp) + ") to divide model.microbatches (" +
                s(m.microbatches) + ")");
  }
  const int64_t v = l.pp * l.pp_virtual;
  if (l.pp_layers.empty()) return;
  require_config(l.pp > 1, p + "pp_layers", "a stage split needs layout.pp > 1");
  require_config(static_cast<int64_t>(l.pp_layers.size()) == v, p + "pp_layers",
          "must hold one layer count per virtual stage (pp*pp_virtual = " + s(v) + "), got " +
              s(static_cast<int64_t>(l.pp_layers.size())));
  int64_t sum = 0;
  for (size_t i = 0; i < l.pp_layers.size(); ++i) {
    require_config(l.pp_layers[i] >= 0, p + "pp_layers[" + s(static_cast<int64_t>(i)) + "]",
            "must be >= 0, got " + s(l.pp_layers[i]));
    sum += l.pp_layers[i];
  }
  require_config(sum == m.layers, p + "pp_layers", "must sum to model.layers (" + s(m.layers) + "), got " + s(sum));
}

std::vector<std::pair<int64_t, int64_t>> pp_stage_layers(const LayoutConfig& l, int64_t layers) {
  const int64_t v = l.pp * l.pp_virtual;
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t at = 0;
  for (int64_t i = 0; i < v; ++i) {
    const int64_t n = l.pp_layers.empty() ? layers / v + (i < layers % v ? 1 : 0) : l.pp_layers[static_cast<size_t>(i)];
    out.emplace_back(at, at + n);
    at += n;
  }
  return out;
}

// Context parallel splits every sequence into cp contiguous chunks (docs/parallel.md), and
// sequence parallel splits each chunk again over tp: both must divide.
void validate_cp(const LayoutConfig& l, const ModelConfig& m, const std::string& p) {
  require_config(m.seq % l.cp == 0, p + "cp",
          "must divide model.seq (" + s(m.seq) + ") so that each CP rank holds an equal chunk of every sequence, got " +
              s(l.cp));
  if (l.sp && l.cp > 1)
    require_config(m.seq % (l.cp * l.tp) == 0, p + "sp",
            "sequence parallel with context parallel requires layout.cp*layout.tp (" + s(l.cp) + "*" + s(l.tp) +
                ") to divide model.seq (" + s(m.seq) + ")");
  if (l.cp_order == CpOrder::balanced) {
    require_config(l.cp > 1, p + "cp_order", "balanced needs context parallel (layout.cp > 1), got cp " + s(l.cp));
    require_config(m.seq % (2 * l.cp) == 0, p + "cp_order",
                   "balanced cuts every sequence into 2*layout.cp (" + s(2 * l.cp) +
                       ") chunks: it must divide model.seq (" + s(m.seq) + ")");
  }
}

}  // namespace parity
