#include "mesh/fsdp_dim_json.h"

#include "core/error.h"
#include "core/json_object.h"
#include "core/text.h"
#include "model/params.h"

namespace parity {

namespace {

using nlohmann::json;

std::string family_list() {
  std::string out = "\"default\"";
  for (size_t f = 0; f < kFamilyCount; ++f) out += ", \"" + std::string(family_name(static_cast<Family>(f))) + "\"";
  return out;
}

FsdpDimRule parse_rule(const json& v, const std::string& path) {
  if (v.is_string() && v.get<std::string>() == "largest") return {FsdpDimRule::Kind::largest, 0};
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > 64)
      throw ConfigError(path, "a tensor dimension must be in [-64, 64), got " + v.dump());
    const auto d = v.get<int64_t>();
    if (d < -64 || d >= 64) throw ConfigError(path, "a tensor dimension must be in [-64, 64), got " + v.dump());
    return {FsdpDimRule::Kind::dim, d};
  }
  throw ConfigError(path, "expected a tensor dimension (an integer, negative counts from the last) or \"largest\", "
                          "got " + json_shown(v));
}

json rule_json(const FsdpDimRule& r) {
  return r.kind == FsdpDimRule::Kind::largest ? json("largest") : json(r.dim);
}

std::string rule_text(const FsdpDimRule& r) {
  return r.kind == FsdpDimRule::Kind::largest ? "largest" : std::to_string(r.dim);
}

// The most common rule of c (the first family's on a tie).
FsdpDimRule most_common(const FsdpDimConfig& c) {
  size_t best = 0, best_n = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    size_t n = 0;
    for (const auto& r : c) n += r == c[i] ? 1 : 0;
    if (n > best_n) best = i, best_n = n;
  }
  return c[best];
}

}  // namespace

FsdpDimConfig parse_fsdp_dim(const json& v, const std::string& path) {
  FsdpDimConfig out{};
  if (!v.is_object()) {
    out.fill(parse_rule(v, path));
    return out;
  }
  if (const auto it = v.find("default"); it != v.end()) out.fill(parse_rule(*it, path + ".default"));
  for (const auto& [key, value] : v.items()) {
    if (key == "default") continue;
    size_t f = 0;
    while (f < kFamilyCount && family_name(static_cast<Family>(f)) != key) ++f;
    if (f == kFamilyCount)
      throw ConfigError(path + "." + printable(key, 64), "unknown parameter family; expected one of " + family_list());
    out[f] = parse_rule(value, path + "." + key);
  }
  return out;
}

std::optional<json> fsdp_dim_json(const FsdpDimConfig& c) {
  if (c == FsdpDimConfig{}) return std::nullopt;
  const FsdpDimRule common = most_common(c);
  bool uniform = true;
  for (const auto& r : c) uniform = uniform && r == common;
  if (uniform) return rule_json(common);
  json out = json::object();
  out["default"] = rule_json(common);
  for (size_t f = 0; f < kFamilyCount; ++f)
    if (!(c[f] == common)) out[std::string(family_name(static_cast<Family>(f)))] = rule_json(c[f]);
  return out;
}

std::string fsdp_dim_str(const FsdpDimConfig& c) {
  const FsdpDimRule common = most_common(c);
  std::string out;
  for (size_t f = 0; f < kFamilyCount; ++f)
    if (!(c[f] == common)) out += ", " + std::string(family_name(static_cast<Family>(f))) + " " + rule_text(c[f]);
  return out.empty() ? rule_text(common) : "default " + rule_text(common) + out;
}

}  // namespace parity
