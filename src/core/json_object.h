// Strict reading of one JSON object (scenario files, a checkpoint's layout record): every key
// must be one of the allowed ones and every value of the expected type, and each refusal is
// one ConfigError naming the JSON path ("$.layout.tp") and the rule. A missing key leaves
// the field as it was (the default).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace parity {

// A value as a user wrote it, for messages: its JSON type and a short, printable rendering
// ("string \"x\"", "number 1.5"; at most 40 characters of text).
std::string json_shown(const nlohmann::json& v);

// A double for messages: integral values as integers, others as the shortest decimal that
// reads back to the same double.
std::string json_num(double x);

// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string json_parse_message(const nlohmann::json::exception& e);

// "a, b, c"
std::string join_names(const std::vector<std::string>& items);

class ObjectReader {
 public:
  // Throws ConfigError(path, ...) unless `j` is an object whose keys are all in `allowed`.
  ObjectReader(const nlohmann::json& j, std::string path, std::vector<std::string> allowed);

  std::string at(const std::string& key) const;  // "<path>.<key>"
  const nlohmann::json* find(const std::string& key) const;
  // ConfigError "required key is missing" at the first of `keys` the object lacks.
  void require_keys(const std::vector<std::string>& keys) const;

  void read(const std::string& key, int64_t& out) const;
  void read(const std::string& key, uint64_t& out) const;
  void read(const std::string& key, double& out) const;
  void read(const std::string& key, bool& out) const;
  void read(const std::string& key, std::string& out) const;
  // An array of integers ("<path>.<key>[i]" names a bad element).
  void read(const std::string& key, std::vector<int64_t>& out) const;

  // A string that must be one of `names`; `values[i]` is what names[i] means.
  template <class E>
  void read_enum(const std::string& key, E& out, const std::vector<std::string>& names,
                 const std::vector<E>& values) const {
    const nlohmann::json* v = find(key);
    if (!v) return;
    if (v->is_string()) {
      for (size_t i = 0; i < names.size(); ++i) {
        if (v->get<std::string>() == names[i]) {
          out = values[i];
          return;
        }
      }
    }
    std::string quoted;
    for (const auto& n : names) quoted += (quoted.empty() ? "\"" : ", \"") + n + "\"";
    throw ConfigError(at(key), "expected one of " + quoted + ", got " + json_shown(*v));
  }

 private:
  const nlohmann::json& j_;
  std::string path_;
};

}  // namespace parity
