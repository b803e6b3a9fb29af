// Reading a dump without trusting it (dump_read.h).
#include "harness/verdict/dump_read.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "harness/scenario/scenario.h"
#include "harness/verdict/bounds.h"
#include "harness/verdict/tolerance.h"
#include "model/params.h"

namespace parity {

using nlohmann::json;

namespace {

constexpr int64_t kMaxManifestBytes = int64_t{256} << 20;  // what a reader may hold; a dump of more is refused

std::string num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}

std::string step_words(int64_t step) {
  return step < 0 ? std::string("the initial parameters") : "step " + std::to_string(step);
}

// Why `name` (a manifest's file entry) is not a plain file name inside the directory, or "".
std::string name_problem(const std::string& name) {
  if (name.empty()) return "is empty";
  if (name.find('\0') != std::string::npos) return "holds a NUL byte";
  if (name[0] == '/') return "is an absolute path";
  if (name.find('/') != std::string::npos || name.find('\\') != std::string::npos)
    return name.find("..") != std::string::npos ? "climbs out of the dump directory (\"..\")"
                                                : "names a subdirectory (a \"/\")";
  if (name == "." || name == "..") return "names a directory, not a file";
  return "";
}

}  // namespace

std::string dump_file_name_problem(const std::string& name) { return name_problem(name); }

double noise_ceiling(const Precision& p, size_t i) {
  if (i >= kNoiseFarGrad) return 1.0;  // a fraction of far elements (a bf16 twin reaches 1 on a few elements)
  const Quantity q = i == kNoiseLoss       ? Quantity::loss
                     : i == kNoiseGradNorm ? Quantity::grad_norm
                     : i == kNoiseRoute    ? Quantity::routing_score
                     : i >= kNoiseGrad && i < kNoiseParam ? Quantity::gradient
                                                          : Quantity::parameter;
  return std::min(0.05, 1000 * noise_floor(p, q));
}

Dump Dump::open(const std::string& dir, const std::string& role) {
  Dump d{dir, role, {}, {}, {}};
  const std::string path = dir + "/manifest.json";
  // The bounded, regular-file reader (core/files.h): a FIFO or /dev/zero is refused at once.
  const auto text = read_regular_if_exists(path, kMaxManifestBytes, Blame::user_input, "dump manifest");
  if (!text)
    throw ConfigError(role, dir + " is not a dump: no manifest.json (write one with `parity dump SCENARIO DIR`, "
                                  "or parity_torch's Collector)");
  d.manifest = json::parse(*text, nullptr, false);
  if (d.manifest.is_discarded() || !d.manifest.is_object()) throw ConfigError(path, "not a JSON object");
  if (d.manifest.value("format", std::string()) != "parity-dump/1")
    throw ConfigError(path + ": $.format",
                      "expected \"parity-dump/1\", got " + d.manifest.value("format", json()).dump());
  if (!d.manifest.contains("files") || !d.manifest["files"].is_array())
    throw ConfigError(path + ": $.files", "expected an array of {file, step}");
  for (size_t k = 0; k < d.manifest["files"].size(); ++k) {
    const json& f = d.manifest["files"][k];
    const std::string at = role + " " + path + ": $.files[" + std::to_string(k) + "]";
    if (!f.is_object() || !f.contains("file") || !f["file"].is_string())
      throw ConfigError(at, "every entry needs a \"file\" name");
    const std::string name = f["file"].get<std::string>();
    if (const std::string why = name_problem(name); !why.empty())
      throw ConfigError(at + ".file", "\"" + printable(name, 200) + "\" " + why +
                                          ": a dump's files are plain names inside its directory");
    int64_t step = -1;
    if (f.contains("step") && !f["step"].is_null()) {
      if (!f["step"].is_number_integer() || f["step"].get<int64_t>() < 0)
        throw ConfigError(at + ".step", "expected a step number >= 0 (null: the initial parameters), got " +
                                            f["step"].dump());
      step = f["step"].get<int64_t>();
    }
    if (d.files.count(step))
      throw ConfigError(at + ".step", step_words(step) + " is listed twice (in " + d.files[step] + " and " + name +
                                          ")");
    d.files[step] = name;
  }
  if (d.manifest.contains("scenario") && d.manifest["scenario"].is_object()) {
    try {
      d.scenario = parse_scenario(d.manifest["scenario"], dir);
    } catch (const ConfigError& e) {
      throw ConfigError(path + ": $.scenario", e.what());
    }
  }
  return d;
}

void Dump::bound_files(const ModelConfig& c) {
  int64_t params = 0;
  for (const ParamSpec& p : param_specs(c)) params += numel(p.shape);
  const int64_t tokens = c.batch * c.seq;
  const int64_t values = 2 * tokens + 3 + c.microbatches + 2 * params +
                         c.moe_layers() * (2 * c.experts + tokens * c.top_k + tokens * c.experts);
  max_file_bytes = 2 * 8 * values + (int64_t{16} << 20);
}

std::string Dump::path_of(int64_t step) const {
  const auto it = files.find(step);
  return it == files.end() ? dir : dir + "/" + it->second;
}

SafetensorsFile Dump::file(int64_t step, const Dump* other) const {
  const auto it = files.find(step);
  if (it == files.end()) {
    std::string have;
    for (const auto& [t, f] : files)
      if (t >= 0) have += (have.empty() ? "" : ", ") + std::to_string(t);
    throw ConfigError(role, dir + " has no " + (step < 0 ? "initial parameters" : "step " + std::to_string(step)) +
                                " (its manifest lists steps " + (have.empty() ? "none" : have) +
                                "); compare fewer with --steps N");
  }
  const std::string path = path_of(step);
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0)
    throw ConfigError(role, dir + "/manifest.json lists " + step_words(step) + " in " + it->second +
                                ", which is missing");
  if (S_ISLNK(st.st_mode))
    throw ConfigError(role, path + " (" + step_words(step) + ") is a symbolic link: a dump's files are its own, "
                                   "not links to files elsewhere");
  if (S_ISREG(st.st_mode) && static_cast<int64_t>(st.st_size) > max_file_bytes)
    throw ConfigError(role, path + " (" + step_words(step) + ") is " + std::to_string(st.st_size) +
                                " bytes, more than any file of a dump of this model holds (at most " +
                                std::to_string(max_file_bytes) + "): refused before a byte is read");
  if (other != nullptr && other->files.count(step)) {
    struct stat os{};
    if (::stat(other->path_of(step).c_str(), &os) == 0 && os.st_dev == st.st_dev && os.st_ino == st.st_ino)
      throw ConfigError(role, path + " (" + step_words(step) + ") is the " + other->role + "'s own file " +
                                  other->path_of(step) + " (the same inode): nothing would be compared");
  }
  const std::string bytes = read_regular(path, max_file_bytes, Blame::user_input, "safetensors file");
  try {
    return SafetensorsFile::parse(std::vector<unsigned char>(bytes.begin(), bytes.end()), path);
  } catch (const IoError& e) {  // a damaged file given to compare: bad input, named
    throw ConfigError(role, std::string(e.what()) + " (" + step_words(step) + " of " + dir + ")");
  }
}

std::vector<double> Dump::noise(int64_t step, const Precision& p) const {
  if (!manifest.contains("steps") || !manifest["steps"].is_array()) return {};
  const json& steps = manifest["steps"];
  for (size_t k = 0; k < steps.size(); ++k) {
    const json& s = steps[k];
    if (!s.is_object() || s.value("step", int64_t{-1}) != step || !s.contains("noise")) continue;
    const std::string at = dir + "/manifest.json: $.steps[" + std::to_string(k) + "].noise";
    if (!s["noise"].is_object()) throw ConfigError(at, "expected an object of the rows' noise");
    std::vector<double> out(kNoiseWidth, std::numeric_limits<double>::quiet_NaN());
    for (size_t i = 0; i < kNoiseWidth; ++i) {
      const auto v = s["noise"].find(noise_name(i));
      if (v == s["noise"].end() || v->is_null()) continue;  // not measured: the floor decides
      const std::string here = at + "." + noise_name(i);
      if (!v->is_number()) throw ConfigError(here, "expected a number or null, got " + v->dump());
      const double x = v->get<double>(), cap = noise_ceiling(p, i);
      if (!std::isfinite(x) || x < 0) throw ConfigError(here, "expected a finite noise >= 0, got " + v->dump());
      // Above what a bound may be made of, held at the ceiling: a forged 1e300 cannot let a doubled
      // gradient pass, and a genuine reference is not refused where its twin measured a family that
      // is all cancellation (a dim-2 model's router moved 3.2 in bf16; its grad row's bound is
      // widened from the reference's own gradients instead, tolerance.h gradient_row_bound).
      out[i] = std::min(x, cap);
    }
    return out;
  }
  return {};
}

std::pair<json, std::string> Dump::step_record(int64_t step, const std::string& key) const {
  if (!manifest.contains("steps") || !manifest["steps"].is_array()) return {json(), ""};
  const json& steps = manifest["steps"];
  for (size_t k = 0; k < steps.size(); ++k)
    if (steps[k].is_object() && steps[k].value("step", int64_t{-1}) == step && steps[k].contains(key))
      return {steps[k][key], dir + "/manifest.json: $.steps[" + std::to_string(k) + "]." + key};
  return {json(), ""};
}

bool Dump::records_replicas() const {
  if (!manifest.contains("steps") || !manifest["steps"].is_array()) return false;
  for (const json& s : manifest["steps"])
    if (s.is_object() && s.contains("replicas")) return true;
  return false;
}

std::vector<double> stored_doubles(const Dump& d, const SafetensorsFile& f, const std::string& where,
                                   const std::string& name, Stored kind) {
  const DType t = f.dtype(name);
  const bool real = t == DType::f64 || t == DType::f32;
  if (real != (kind == Stored::real))
    throw ConfigError(d.role, where + ": \"" + name + "\" is stored as " +
                                  std::string(safetensors_dtype_name(t)) + ", expected " +
                                  (kind == Stored::real ? "a float (F32 or F64)" : "I64") +
                                  ": a same-size dtype is not reinterpreted");
  auto as = [&](auto x) {
    const auto v = f.get<decltype(x)>(name);
    return std::vector<double>(v.data.begin(), v.data.end());
  };
  switch (t) {
    case DType::f64: return as(double{});
    case DType::f32: return as(float{});
    case DType::i64: return as(int64_t{});
  }
  return {};
}

void require_finite_reference(const Dump& ref, int64_t step, const std::string& name, const std::vector<double>& v) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      throw DivergedError("the reference " + ref.dir + " is not finite at " + step_words(step) + ": \"" + name +
                          "\" element " + std::to_string(i) + " is " + num(v[i]) +
                          " (the one-device run itself diverged; nothing was compared: dump a reference that "
                          "trains, e.g. a smaller learning rate)");
}

}  // namespace parity
