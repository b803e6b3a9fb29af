// safetensors writer and validating reader (format summary in safetensors.h).
#include "core/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/output.h"
#include "core/json_object.h"
#include "core/text.h"

namespace parity {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this build assumes a little-endian host");

namespace {

using nlohmann::json;

constexpr const char* kMetadataKey = "__metadata__";

// ---- writing -------------------------------------------------------------------------------

// ---- reading -------------------------------------------------------------------------------

[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  throw IoError(path + ": " + what);
}

[[noreturn]] void bad_tensor(const std::string& path, const std::string& name,
                             const std::string& what) {
  throw IoError(path + ": tensor '" + printable(name, 100) + "': " + what);
}

bool parse_dtype_name(const std::string& s, DType& out) {
  for (DType d : {DType::f32, DType::f64, DType::i64}) {
    if (s == safetensors_dtype_name(d)) {
      out = d;
      return true;
    }
  }
  return false;
}

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) bad_file(path, "cannot open safetensors file: it is a directory");
  // A FIFO, a device (a link to /dev/zero): refused before a byte is read (core/files.h).
  const auto text = read_regular_if_exists(path, int64_t{1} << 40, Blame::damaged_data, "safetensors file");
  if (!text) bad_file(path, std::string("cannot open safetensors file: ") + std::strerror(ENOENT));
  return std::vector<unsigned char>(text->begin(), text->end());
}

}  // namespace

std::string_view safetensors_dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::i64: return "I64";
  }
  return "?";
}

// ---- SafetensorsWriter -------------------------------------------------------------------

void SafetensorsWriter::check_shape(const std::string& name, const Shape& shape) {
  for (int64_t d : shape)
    if (d < 0) throw Error("safetensors: tensor '" + name + "' has negative shape " + shape_str(shape));
}

void SafetensorsWriter::check_tensor_size(const std::string& name, const Shape& shape,
                                          int64_t count) {
  check_shape(name, shape);
  if (numel(shape) != count)
    throw Error("safetensors: tensor '" + name + "' has shape " + shape_str(shape) + " but " +
                std::to_string(count) + " elements");
}

void SafetensorsWriter::add(const std::string& name, DType dtype, const Shape& shape,
                            const void* data) {
  if (name.empty()) throw Error("safetensors: empty tensor name");
  if (name == kMetadataKey) throw Error("safetensors: '__metadata__' is reserved, not a tensor name");
  if (tensors_.count(name)) throw Error("safetensors: tensor '" + name + "' added twice");
  check_shape(name, shape);
  const auto n = static_cast<size_t>(numel(shape) * dtype_size(dtype));
  Entry e{dtype, shape, std::vector<unsigned char>(n)};
  if (n > 0) std::memcpy(e.bytes.data(), data, n);
  tensors_.emplace(name, std::move(e));
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

// Element size descending, then name: every tensor starts aligned to its element size.
std::vector<std::pair<std::string, const SafetensorsWriter::Entry*>> SafetensorsWriter::data_order()
    const {
  std::vector<std::pair<std::string, const Entry*>> order;
  for (const auto& [name, e] : tensors_) order.emplace_back(name, &e);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return dtype_size(a.second->dtype) > dtype_size(b.second->dtype);
  });
  return order;
}

// The JSON header, padded with spaces so that 8 + its length is a multiple of 8.
std::string SafetensorsWriter::header() const {
  json h = json::object();
  uint64_t offset = 0;
  for (const auto& [name, e] : data_order()) {
    const uint64_t end = offset + e->bytes.size();
    h[name] = {{"dtype", std::string(safetensors_dtype_name(e->dtype))},
               {"shape", e->shape},
               {"data_offsets", {offset, end}}};
    offset = end;
  }
  if (!metadata_.empty()) h[kMetadataKey] = metadata_;
  std::string text;
  try {
    text = h.dump();
  } catch (const json::exception& e) {  // names or metadata that are not valid UTF-8
    throw Error(std::string("safetensors: cannot encode header: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void SafetensorsWriter::write(const std::string& path, const Replace& r, const std::string& option) const {
  const std::string text = header();
  unsigned char len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  AtomicFile out(path, "safetensors file", option);
  out.write(len, sizeof len);
  out.write(text.data(), text.size());
  for (const auto& [name, e] : data_order()) out.write(e->bytes.data(), e->bytes.size());
  out.commit(r);
}

// ---- SafetensorsFile ----------------------------------------------------------------------

SafetensorsFile SafetensorsFile::read(const std::string& path) { return parse(read_bytes(path), path); }

SafetensorsFile SafetensorsFile::parse(const std::vector<unsigned char>& bytes, const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  if (bytes.size() < 8)
    bad_file(path, "truncated: " + std::to_string(bytes.size()) +
                       " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<size_t>(i)];
  if (n > bytes.size() - 8)
    bad_file(path, "truncated or bad header: header length " + std::to_string(n) +
                       " exceeds the " + std::to_string(bytes.size() - 8) + " bytes after it");
  f.parse_header(std::string(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n)));
  f.data_.assign(bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n), bytes.end());
  f.check_layout();
  return f;
}

void SafetensorsFile::parse_header(const std::string& header_text) {
  // Before the parser: nesting deep enough to overflow a recursive walk, overlong names.
  if (const std::string problem = json_limits_problem(header_text, kSafetensorsHeaderLimits); !problem.empty())
    bad_file(path_, "bad header: refused before parsing: " + problem);
  json h;
  try {
    h = json::parse(header_text);
  } catch (const json::exception& e) {
    bad_file(path_, "bad header: invalid JSON: " + printable(json_parse_message(e)));
  }
  if (!h.is_object()) bad_file(path_, "bad header: expected a JSON object, got " + std::string(h.type_name()));
  for (const auto& [name, info] : h.items()) {
    if (name == kMetadataKey) {
      if (!info.is_object()) bad_file(path_, "bad header: __metadata__ must be an object");
      for (const auto& [k, v] : info.items()) {
        if (!v.is_string()) bad_file(path_, "bad header: __metadata__ '" + printable(k, 100) + "' is not a string");
        metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!info.is_object()) bad_tensor(path_, name, "header entry is not an object");
    for (const auto& [k, v] : info.items()) {
      if (k != "dtype" && k != "shape" && k != "data_offsets")
        bad_tensor(path_, name, "unknown header field '" + printable(k, 100) + "'");
    }
    Entry e;
    const auto dt = info.find("dtype");
    if (dt == info.end() || !dt->is_string()) bad_tensor(path_, name, "missing or non-string dtype");
    if (!parse_dtype_name(dt->get<std::string>(), e.dtype))
      bad_tensor(path_, name, "unsupported dtype '" + printable(dt->get<std::string>(), 100) +
                                  "' (expected F32, F64 or I64)");
    const auto sh = info.find("shape");
    if (sh == info.end() || !sh->is_array()) bad_tensor(path_, name, "missing or non-array shape");
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 62))
        bad_tensor(path_, name,
                   "shape entry " + printable(d.dump(-1, ' ', false, json::error_handler_t::replace), 100) +
                       " is not a non-negative integer");
      e.shape.push_back(d.get<int64_t>());
    }
    const auto off = info.find("data_offsets");
    if (off == info.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      bad_tensor(path_, name, "data_offsets must be two non-negative integers");
    e.begin = (*off)[0].get<uint64_t>();
    e.end = (*off)[1].get<uint64_t>();
    entries_.emplace(name, std::move(e));
  }
}

// Sizes match dtype * numel; offsets lie inside the data section and tile it exactly.
void SafetensorsFile::check_layout() const {
  std::vector<std::pair<std::string, const Entry*>> order;
  for (const auto& [name, e] : entries_) {
    if (e.begin > e.end)
      bad_tensor(path_, name, "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                                  "] are reversed");
    uint64_t need = static_cast<uint64_t>(dtype_size(e.dtype));
    for (int64_t d : e.shape) {
      if (d != 0 && need > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d))
        bad_tensor(path_, name, "shape " + shape_str(e.shape) + " is too large");
      need *= static_cast<uint64_t>(d);
    }
    if (e.end - e.begin != need)
      bad_tensor(path_, name, "data_offsets cover " + std::to_string(e.end - e.begin) +
                                  " bytes but " + std::string(safetensors_dtype_name(e.dtype)) + " " +
                                  shape_str(e.shape) + " needs " + std::to_string(need));
    if (e.end > data_.size())
      bad_tensor(path_, name, "data ends at " + std::to_string(e.end) + " but the data section has " +
                                  std::to_string(data_.size()) + " bytes (truncated file?)");
    order.emplace_back(name, &e);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  uint64_t expected = 0;
  for (const auto& [name, e] : order) {
    if (e->begin != expected)
      bad_tensor(path_, name, "data starts at " + std::to_string(e->begin) + ", expected " +
                                  std::to_string(expected) +
                                  (e->begin < expected ? " (overlaps the previous tensor)" : " (gap)"));
    expected = e->end;
  }
  if (expected != data_.size())
    bad_file(path_, "bad layout: " + std::to_string(data_.size() - expected) +
                        " bytes after the last tensor's data");
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

std::span<const unsigned char> SafetensorsFile::bytes(const std::string& name) const {
  const Entry& e = entry(name);
  return {data_.data() + e.begin, static_cast<size_t>(e.end - e.begin)};
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) bad_tensor(path_, name, "not in the file");
  return it->second;
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name, DType want) const {
  const Entry& e = entry(name);
  if (e.dtype != want)
    bad_tensor(path_, name, "stored as " + std::string(safetensors_dtype_name(e.dtype)) +
                                ", requested " + std::string(safetensors_dtype_name(want)));
  return e;
}

}  // namespace parity
