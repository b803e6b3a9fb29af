// safetensors: bitwise round trip of every dtype (empty tensors and scalars included), an
// independent check of the byte layout, and refusal of truncated or corrupted files.
#include "core/safetensors.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "thrown.h"

namespace parity {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

class TempDir {
 public:
  TempDir() : dir_(fs::temp_directory_path() / ("parity_safetensors_test_" + std::to_string(getpid()))) {
    fs::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& file) const { return (dir_ / file).string(); }

 private:
  fs::path dir_;
};

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A file from a header text and data bytes, with the length prefix computed (or forced).
Bytes raw_file(const std::string& header, const Bytes& data, int64_t forced_len = -1) {
  const uint64_t n = forced_len >= 0 ? static_cast<uint64_t>(forced_len) : header.size();
  Bytes out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<unsigned char>(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

template <class V> Bytes bytes_of(const V& v) {
  using T = typename V::value_type;
  Bytes out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

using parity::testing::io_error;

// The tensors of the round-trip file: values chosen so that only a bitwise copy survives.
struct Sample {
  Tensor<float> f32{{2, 3}, {1.5f, -0.0f, std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::denorm_min(), 3.25e-20f, -7.0f}};
  Tensor<double> f64{{5}, {0.1, -0.0, std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::denorm_min(), -1e300}};
  Tensor<int64_t> i64{{3, 1, 2}, {0, -1, std::numeric_limits<int64_t>::min(),
                                  std::numeric_limits<int64_t>::max(), 42, 7}};
  Tensor<float> f32_scalar{{}, {2.5f}};
  Tensor<double> f64_scalar{{}, {-3.0}};
  Tensor<int64_t> i64_scalar{{}, {-9}};
  Tensor<float> f32_empty{{0}, {}};
  Tensor<double> f64_empty{{2, 0, 3}, {}};
  Tensor<int64_t> i64_empty{{0, 4}, {}};
  Tensor<float> f32_odd{{3}, {1.f, 2.f, 3.f}};  // 12 bytes: would misalign what follows

  void add_to(SafetensorsWriter& w) const {
    w.add("b.f32", f32);
    w.add("a.f64", f64);
    w.add("c.i64", i64);
    w.add("scalar.f32", f32_scalar);
    w.add("scalar.f64", f64_scalar);
    w.add("scalar.i64", i64_scalar);
    w.add("empty.f32", f32_empty);
    w.add("empty.f64", f64_empty);
    w.add("empty.i64", i64_empty);
    w.add("odd.f32", f32_odd);
  }
};

template <class T> void expect_same(const Tensor<T>& got, const Tensor<T>& want, const std::string& name) {
  SCOPED_TRACE(name);
  EXPECT_EQ(got.shape, want.shape);
  ASSERT_EQ(got.data.size(), want.data.size());
  EXPECT_EQ(bytes_of(got.data), bytes_of(want.data));
}

std::string write_sample(const TempDir& dir, const std::string& file = "sample.safetensors") {
  SafetensorsWriter w;
  Sample().add_to(w);
  w.set_metadata("format", "parity");
  w.set_metadata("step", "12");
  const std::string path = dir.path(file);
  w.write(path);
  return path;
}

TEST(Safetensors, RoundTripOfEveryDtypeIsBitwise) {
  TempDir dir;
  const std::string path = write_sample(dir);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const SafetensorsFile f = SafetensorsFile::read(path);
  const Sample s;
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a.f64", "b.f32", "c.i64", "empty.f32", "empty.f64",
                                                 "empty.i64", "odd.f32", "scalar.f32", "scalar.f64",
                                                 "scalar.i64"}));
  expect_same(f.get<float>("b.f32"), s.f32, "b.f32");
  expect_same(f.get<double>("a.f64"), s.f64, "a.f64");
  expect_same(f.get<int64_t>("c.i64"), s.i64, "c.i64");
  expect_same(f.get<float>("scalar.f32"), s.f32_scalar, "scalar.f32");
  expect_same(f.get<double>("scalar.f64"), s.f64_scalar, "scalar.f64");
  expect_same(f.get<int64_t>("scalar.i64"), s.i64_scalar, "scalar.i64");
  expect_same(f.get<float>("empty.f32"), s.f32_empty, "empty.f32");
  expect_same(f.get<double>("empty.f64"), s.f64_empty, "empty.f64");
  expect_same(f.get<int64_t>("empty.i64"), s.i64_empty, "empty.i64");
  expect_same(f.get<float>("odd.f32"), s.f32_odd, "odd.f32");
  EXPECT_EQ(f.dtype("c.i64"), DType::i64);
  EXPECT_EQ(f.shape("scalar.f64"), Shape{});
  EXPECT_EQ(f.shape("empty.f64"), (Shape{2, 0, 3}));
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "parity"}, {"step", "12"}}));
  EXPECT_TRUE(f.contains("a.f64"));
  EXPECT_FALSE(f.contains("nope"));
}

TEST(Safetensors, ByteLayoutFollowsTheFormat) {
  TempDir dir;
  const std::string path = write_sample(dir);
  const Bytes file = read_file(path);
  ASSERT_GE(file.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file[static_cast<size_t>(i)];
  ASSERT_LE(8 + n, file.size());
  EXPECT_EQ(n % 8, 0u) << "header must be padded to a multiple of 8";
  const std::string text(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  const size_t json_end = text.find_last_of('}');
  ASSERT_NE(json_end, std::string::npos);
  EXPECT_EQ(text.find_first_not_of(' ', json_end + 1), std::string::npos) << "padding must be spaces";
  EXPECT_LT(text.size() - json_end - 1, 8u);
  const json h = json::parse(text);
  EXPECT_EQ(h.at("__metadata__"), (json{{"format", "parity"}, {"step", "12"}}));

  const Sample s;
  const std::map<std::string, std::tuple<std::string, Shape, Bytes>> want = {
      {"b.f32", {"F32", s.f32.shape, bytes_of(s.f32.data)}},
      {"a.f64", {"F64", s.f64.shape, bytes_of(s.f64.data)}},
      {"c.i64", {"I64", s.i64.shape, bytes_of(s.i64.data)}},
      {"scalar.f32", {"F32", {}, bytes_of(s.f32_scalar.data)}},
      {"scalar.f64", {"F64", {}, bytes_of(s.f64_scalar.data)}},
      {"scalar.i64", {"I64", {}, bytes_of(s.i64_scalar.data)}},
      {"empty.f32", {"F32", {0}, {}}},
      {"empty.f64", {"F64", {2, 0, 3}, {}}},
      {"empty.i64", {"I64", {0, 4}, {}}},
      {"odd.f32", {"F32", {3}, bytes_of(s.f32_odd.data)}}};
  EXPECT_EQ(h.size(), want.size() + 1);
  uint64_t covered = 0;
  for (const auto& [name, expected] : want) {
    SCOPED_TRACE(name);
    const json& info = h.at(name);
    const auto& [dtype, shape, data] = expected;
    EXPECT_EQ(info.at("dtype"), dtype);
    EXPECT_EQ(info.at("shape").get<Shape>(), shape);
    const uint64_t begin = info.at("data_offsets")[0], end = info.at("data_offsets")[1];
    ASSERT_EQ(end - begin, data.size());
    ASSERT_LE(8 + n + end, file.size());
    const auto at = file.begin() + static_cast<std::ptrdiff_t>(8 + n + begin);
    EXPECT_EQ(Bytes(at, at + static_cast<std::ptrdiff_t>(data.size())), data);
    // Every tensor starts aligned to its element size, measured from the file's start.
    EXPECT_EQ((8 + n + begin) % (dtype == "F32" ? 4 : 8), 0u);
    covered += data.size();
  }
  EXPECT_EQ(file.size(), 8 + n + covered) << "data section must hold exactly the tensors";
}

TEST(Safetensors, OutputDoesNotDependOnInsertionOrder) {
  TempDir dir;
  const Sample s;
  SafetensorsWriter a, b;
  a.add("x", s.f32_odd);
  a.add("y", s.f64);
  a.set_metadata("k", "v");
  b.set_metadata("k", "v");
  b.add("y", s.f64);
  b.add("x", s.f32_odd);
  a.write(dir.path("a"));
  b.write(dir.path("b"));
  EXPECT_EQ(read_file(dir.path("a")), read_file(dir.path("b")));
}

TEST(Safetensors, EmptyWriterGivesAValidFile) {
  TempDir dir;
  SafetensorsWriter().write(dir.path("empty"));
  const SafetensorsFile f = SafetensorsFile::read(dir.path("empty"));
  EXPECT_TRUE(f.names().empty());
  EXPECT_TRUE(f.metadata.empty());
  EXPECT_EQ(read_file(dir.path("empty")).size(), 16u);  // length + "{}" padded to 8
}

TEST(Safetensors, WrongDtypeOrNameIsRefusedNamingFileAndTensor) {
  TempDir dir;
  const std::string path = write_sample(dir);
  const SafetensorsFile f = SafetensorsFile::read(path);
  std::string msg = io_error([&] { f.get<float>("a.f64"); });
  EXPECT_NE(msg.find(path + ": tensor 'a.f64': stored as F64, requested F32"), std::string::npos) << msg;
  msg = io_error([&] { f.get<double>("c.i64"); });
  EXPECT_NE(msg.find("tensor 'c.i64': stored as I64"), std::string::npos) << msg;
  msg = io_error([&] { f.shape("missing"); });
  EXPECT_NE(msg.find(path + ": tensor 'missing': not in the file"), std::string::npos) << msg;
}

TEST(Safetensors, TruncatedFilesAreRefusedNamingTheFile) {
  TempDir dir;
  const Bytes whole = read_file(write_sample(dir));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | whole[static_cast<size_t>(i)];
  const std::string path = dir.path("cut.safetensors");
  for (size_t cut : {size_t{0}, size_t{5}, size_t{8}, size_t{8 + n / 2}, size_t{8 + n}, size_t{8 + n + 3},
                     whole.size() - 1}) {
    SCOPED_TRACE("cut at " + std::to_string(cut) + " of " + std::to_string(whole.size()));
    write_file(path, Bytes(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(cut)));
    const std::string msg = io_error([&] { SafetensorsFile::read(path); });
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    if (cut < 8) {
      EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
    } else if (cut < 8 + n) {
      EXPECT_NE(msg.find("header length"), std::string::npos) << msg;
    } else {
      EXPECT_NE(msg.find("tensor '"), std::string::npos) << msg;  // the data section is short
    }
  }
  const std::string msg = io_error([&] { SafetensorsFile::read(dir.path("absent")); });
  EXPECT_NE(msg.find(dir.path("absent") + ": cannot open"), std::string::npos) << msg;
}

TEST(Safetensors, CorruptedHeadersAreRefusedNamingFileAndTensor) {
  TempDir dir;
  const std::string path = dir.path("bad.safetensors");
  const auto refused = [&](const Bytes& file, const std::string& fragment) {
    SCOPED_TRACE(fragment);
    write_file(path, file);
    const std::string msg = io_error([&] { SafetensorsFile::read(path); });
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  };
  const Bytes d16(16, 0);  // two doubles
  const auto one = [](const std::string& fields) { return R"({"w": {)" + fields + "}}"; };
  // The valid file these are variations of.
  write_file(path, raw_file(one(R"("dtype": "F64", "shape": [2], "data_offsets": [0, 16])"), d16));
  EXPECT_EQ(SafetensorsFile::read(path).get<double>("w").shape, Shape{2});

  Bytes flipped = read_file(path);
  flipped[8] = 'x';  // the header's opening brace
  refused(flipped, "bad header: invalid JSON: parse error");
  refused(raw_file(one(R"("dtype": "F64", "shape": [2], "data_offsets": [0, 16])"), d16, 1 << 20),
          "header length 1048576 exceeds");
  refused(raw_file("[1, 2]", {}), "bad header: expected a JSON object");
  refused(raw_file(one(R"("dtype": "BF16", "shape": [2], "data_offsets": [0, 4])"), Bytes(4)),
          "tensor 'w': unsupported dtype 'BF16'");
  refused(raw_file(one(R"("shape": [2], "data_offsets": [0, 16])"), d16), "tensor 'w': missing or non-string dtype");
  refused(raw_file(one(R"("dtype": "F64", "shape": [-2], "data_offsets": [0, 16])"), d16),
          "tensor 'w': shape entry -2");
  refused(raw_file(one(R"("dtype": "F64", "shape": 2, "data_offsets": [0, 16])"), d16),
          "tensor 'w': missing or non-array shape");
  refused(raw_file(one(R"("dtype": "F64", "shape": [2], "data_offsets": [0])"), d16),
          "tensor 'w': data_offsets must be two");
  refused(raw_file(one(R"("dtype": "F64", "shape": [2], "data_offsets": [16, 0])"), d16),
          "tensor 'w': data_offsets [16, 0] are reversed");
  refused(raw_file(one(R"("dtype": "F64", "shape": [3], "data_offsets": [0, 16])"), d16),
          "tensor 'w': data_offsets cover 16 bytes but F64 (3,) needs 24");
  refused(raw_file(one(R"("dtype": "F64", "shape": [2], "data_offsets": [8, 24])"), d16),
          "tensor 'w': data ends at 24 but the data section has 16 bytes");
  refused(raw_file(one(R"("dtype": "F64", "shape": [1], "data_offsets": [8, 16])"), d16),
          "tensor 'w': data starts at 8, expected 0 (gap)");
  refused(raw_file(one(R"("dtype": "F64", "shape": [2], "data_offsets": [0, 16], "extra": 1)"), d16),
          "tensor 'w': unknown header field 'extra'");
  refused(raw_file(one(R"("dtype": "F64", "shape": [1], "data_offsets": [0, 8])"), d16),
          "8 bytes after the last tensor's data");
  refused(raw_file(R"({"a": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]},)"
                   R"( "b": {"dtype": "F64", "shape": [1], "data_offsets": [8, 16]}})",
                   d16),
          "tensor 'b': data starts at 8, expected 16 (overlaps the previous tensor)");
  refused(raw_file(R"({"__metadata__": {"k": 1}})", {}), "bad header: __metadata__ 'k' is not a string");
  refused(raw_file(R"({"w": 3})", {}), "tensor 'w': header entry is not an object");
}

TEST(Safetensors, FailedWriteLeavesNoFile) {
  TempDir dir;
  SafetensorsWriter w;
  w.add("x", Sample().f64);
  const std::string path = dir.path("no_such_dir/out.safetensors");
  const std::string msg = io_error([&] { w.write(path); });
  EXPECT_NE(msg.find(path + ": cannot write safetensors file"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // Overwriting an existing file replaces it whole.
  const std::string good = write_sample(dir, "over.safetensors");
  w.write(good);
  EXPECT_EQ(SafetensorsFile::read(good).names(), std::vector<std::string>{"x"});
}

TEST(Safetensors, WriterRefusesMisuse) {
  SafetensorsWriter w;
  w.add("x", Tensor<double>({2}));
  EXPECT_THROW(w.add("x", Tensor<double>({2})), Error);
  EXPECT_THROW(w.add("", Tensor<double>({2})), Error);
  EXPECT_THROW(w.add("__metadata__", Tensor<double>({2})), Error);
  EXPECT_THROW(w.add("bad_size", Tensor<float>({2, 2}, {1.f, 2.f})), Error);
  const double one = 1.0;
  EXPECT_THROW(w.add("negative", DType::f64, {-1}, &one), Error);
  EXPECT_EQ(w.size(), 1u);
}

}  // namespace
}  // namespace parity
