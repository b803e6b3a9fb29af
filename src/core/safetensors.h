// safetensors files (https://github.com/huggingface/safetensors): the tensor file format of
// dumps and checkpoints. Layout: an 8-byte little-endian header length N, N bytes of JSON
// header {"name": {"dtype": "F64", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}, padded with spaces to a multiple of 8, then the data
// section; offsets are relative to the start of the data section.
//
// Writing is deterministic and atomic: tensors are laid out by (element size descending,
// name), so the same set of tensors gives the same bytes whatever the order of add() and
// every tensor starts aligned to its element size; the file is written to a temporary file of
// a unique name beside `path`, fsynced and renamed (core/output.h AtomicFile), so a failure
// never leaves a half-written file at `path` and no link or file of the user's is followed.
// Reading validates the whole header (dtypes, shapes, offsets inside the file, contiguous,
// sizes equal to element size * element count) and throws IoError naming the file and,
// where there is one, the tensor.
#pragma once
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/output.h"
#include "core/tensor.h"
#include "core/text.h"

namespace parity {

// What a header may be, checked before it is parsed (besides its length, which must fit in the
// file): nesting depth and string length (tensor names, metadata values).
inline constexpr JsonLimits kSafetensorsHeaderLimits{std::size_t{1} << 30, 64, std::size_t{64} << 10};

// "F32", "F64", "I64": the safetensors names of the element types.
std::string_view safetensors_dtype_name(DType d);

class SafetensorsWriter {
 public:
  // Copies numel(shape) * dtype_size(dtype) bytes from `data`. Throws Error on a duplicate
  // or empty name, the reserved name "__metadata__", or a negative dimension.
  void add(const std::string& name, DType dtype, const Shape& shape, const void* data);

  // Throws Error when t.data does not hold numel(t.shape) elements.
  template <class T> void add(const std::string& name, const Tensor<T>& t) {
    check_tensor_size(name, t.shape, t.numel());
    add(name, dtype_of<T>(), t.shape, t.ptr());
  }

  // A string entry of "__metadata__"; setting a key again replaces its value.
  void set_metadata(const std::string& key, const std::string& value);

  // Writes `path` through an AtomicFile: what may stand there is `r` (core/output.h; the
  // default: a regular file of parity's own directory), refused as ConfigError naming
  // `option`. Throws IoError naming the file when the write fails.
  void write(const std::string& path, const Replace& r = {}, const std::string& option = "") const;

  size_t size() const { return tensors_.size(); }

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    std::vector<unsigned char> bytes;
  };
  static void check_shape(const std::string& name, const Shape& shape);
  static void check_tensor_size(const std::string& name, const Shape& shape, int64_t count);
  std::string header() const;
  std::vector<std::pair<std::string, const Entry*>> data_order() const;

  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::string> metadata_;
};

class SafetensorsFile {
 public:
  // Reads and validates the whole file. Throws IoError naming the file (and the tensor).
  static SafetensorsFile read(const std::string& path);
  // The same from the file's bytes already in memory; `path` only names it in errors.
  static SafetensorsFile parse(const std::vector<unsigned char>& bytes, const std::string& path);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  DType dtype(const std::string& name) const { return entry(name).dtype; }
  Shape shape(const std::string& name) const { return entry(name).shape; }
  // The tensor's raw little-endian bytes inside the data section.
  std::span<const unsigned char> bytes(const std::string& name) const;

  // Throws IoError naming the file and tensor when it is absent or stored as another dtype.
  template <class T> Tensor<T> get(const std::string& name) const {
    const Entry& e = entry(name, dtype_of<T>());
    Tensor<T> t(e.shape);
    if (!t.data.empty()) std::memcpy(t.ptr(), data_.data() + e.begin, e.end - e.begin);
    return t;
  }

  std::map<std::string, std::string> metadata;  // the "__metadata__" entries

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    uint64_t begin = 0, end = 0;  // offsets in the data section
  };
  const Entry& entry(const std::string& name) const;
  const Entry& entry(const std::string& name, DType want) const;
  void parse_header(const std::string& header_text);
  void check_layout() const;

  std::string path_;
  std::map<std::string, Entry> entries_;
  std::vector<unsigned char> data_;  // the data section
};

}  // namespace parity
