#include "core/json_object.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/text.h"

namespace parity {

using nlohmann::json;

// dump escapes C0 controls; printable() the rest (DEL and C1, which dump keeps)
std::string json_shown(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + printable(text);
}

std::string json_num(double x) {
  if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string(static_cast<long long>(x));
  return json(x).dump();
}

std::string json_parse_message(const nlohmann::json::exception& e) {
  std::string what = e.what();
  const size_t close = what.find("] ");
  return close == std::string::npos ? what : what.substr(close + 2);
}

std::string join_names(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

ObjectReader::ObjectReader(const json& j, std::string path, std::vector<std::string> allowed)
    : j_(j), path_(std::move(path)) {
  if (!j_.is_object()) throw ConfigError(path_, "expected an object, got " + json_shown(j_));
  for (const auto& [key, value] : j_.items())
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
      throw ConfigError(at(key), "unknown key; allowed keys are: " + join_names(allowed));
}

std::string ObjectReader::at(const std::string& key) const { return path_ + "." + printable(key, 64); }

const json* ObjectReader::find(const std::string& key) const {
  auto it = j_.find(key);
  return it == j_.end() ? nullptr : &*it;
}

void ObjectReader::require_keys(const std::vector<std::string>& keys) const {
  for (const std::string& k : keys)
    if (find(k) == nullptr) throw ConfigError(at(k), "required key is missing");
}

void ObjectReader::read(const std::string& key, int64_t& out) const {
  const json* v = find(key);
  if (!v) return;
  if (!v->is_number_integer()) throw ConfigError(at(key), "expected an integer, got " + json_shown(*v));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw ConfigError(at(key), "integer too large, got " + v->dump());
  out = v->get<int64_t>();
}

void ObjectReader::read(const std::string& key, std::vector<int64_t>& out) const {
  const json* v = find(key);
  if (!v) return;
  if (!v->is_array()) throw ConfigError(at(key), "expected an array of integers, got " + json_shown(*v));
  std::vector<int64_t> got;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    const std::string here = at(key) + "[" + std::to_string(i) + "]";
    if (!e.is_number_integer()) throw ConfigError(here, "expected an integer, got " + json_shown(e));
    if (e.is_number_unsigned() && e.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw ConfigError(here, "integer too large, got " + e.dump());
    got.push_back(e.get<int64_t>());
  }
  out = std::move(got);
}

void ObjectReader::read(const std::string& key, uint64_t& out) const {
  const json* v = find(key);
  if (!v) return;
  if (!v->is_number_integer()) throw ConfigError(at(key), "expected a non-negative integer, got " + json_shown(*v));
  if (!v->is_number_unsigned() && v->get<int64_t>() < 0)
    throw ConfigError(at(key), "must be a non-negative integer, got " + v->dump());
  out = v->get<uint64_t>();
}

void ObjectReader::read(const std::string& key, double& out) const {
  const json* v = find(key);
  if (!v) return;
  if (!v->is_number()) throw ConfigError(at(key), "expected a number, got " + json_shown(*v));
  out = v->get<double>();
}

void ObjectReader::read(const std::string& key, bool& out) const {
  const json* v = find(key);
  if (!v) return;
  if (!v->is_boolean()) throw ConfigError(at(key), "expected a boolean (true or false), got " + json_shown(*v));
  out = v->get<bool>();
}

void ObjectReader::read(const std::string& key, std::string& out) const {
  const json* v = find(key);
  if (!v) return;
  if (!v->is_string()) throw ConfigError(at(key), "expected a string, got " + json_shown(*v));
  out = v->get<std::string>();
}

}  // namespace parity
