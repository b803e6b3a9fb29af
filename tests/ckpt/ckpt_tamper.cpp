// ckpt_tamper: damages a saved checkpoint in one named way, for the fault tests that run the
// real `parity` on it (tests/ckpt/tamper_tests.cmake). Test-only; prints what it changed.
//
//   ckpt_tamper swap DIR [--two-tensors] [--keys] [--fix-checksum]
//       exchanges where two chunk records of metadata.json point (rank, file, offset, bytes,
//       block_rows, block checksums; with --keys the keys too), each record keeping its
//       rectangle: two chunks of one tensor in different rank files, or (--two-tensors) of two
//       tensors of the same shape. Every pointer still names real, intact bytes.
//   ckpt_tamper step DIR STEP DATA_POSITION [--fix-checksum]
//       edits step and data_position (consistently, if the caller passes step * batch).
//   ckpt_tamper flip DIR FILE OFFSET
//       XORs one byte of DIR/FILE with 0x01; a negative OFFSET counts from the end.
//   ckpt_tamper version1 DIR
//       makes metadata.json look like a version-1 checkpoint (version 1, no checksum fields).
// --fix-checksum recomputes metadata.json's own checksum after the edit, as a tool that
// rewrites metadata.json consistently would: only the rank files' headers can then tell.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checksum.h"
#include "ckpt/format.h"

namespace {

using nlohmann::json;
using parity::ckpt::checksum_str;
using parity::ckpt::metadata_checksum;

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  return json::parse(in);
}

void write_json(const std::string& path, const json& j) {
  std::ofstream out(path, std::ios::trunc);
  out << j.dump(1) << "\n";
  if (!out) throw std::runtime_error(path + ": cannot write");
}

bool has_flag(int argc, char** argv, const std::string& flag) {
  for (int i = 1; i < argc; ++i)
    if (argv[i] == flag) return true;
  return false;
}

json rect_shape(const json& c) {
  json s = json::array();
  for (const auto& r : c.at("rect")) s.push_back(r.at(1).get<int64_t>() - r.at(0).get<int64_t>());
  return s;
}

// Two chunk records (tensor index, chunk index) whose bytes are interchangeable.
struct Pair {
  size_t t1 = 0, c1 = 0, t2 = 0, c2 = 0;
};

Pair pick(const json& tensors, bool two_tensors) {
  for (size_t a = 0; a < tensors.size(); ++a)
    for (size_t b = two_tensors ? a + 1 : a; b < (two_tensors ? tensors.size() : a + 1); ++b) {
      const json &ta = tensors[a], &tb = tensors[b];
      if (ta.at("dtype") != tb.at("dtype") || ta.at("shape") != tb.at("shape")) continue;
      const json &ca = ta.at("chunks"), &cb = tb.at("chunks");
      for (size_t i = 0; i < ca.size(); ++i)
        for (size_t k = (a == b ? i + 1 : 0); k < cb.size(); ++k)
          if (rect_shape(ca[i]) == rect_shape(cb[k]) && (a != b || ca[i].at("rank") != cb[k].at("rank")))
            return {a, i, b, k};
    }
  throw std::runtime_error(two_tensors ? "no two tensors with interchangeable chunks"
                                       : "no tensor with two interchangeable chunks in different files");
}

void swap(json& md, bool two_tensors, bool keys) {
  json& tensors = md.at("tensors");
  const Pair p = pick(tensors, two_tensors);
  json& x = tensors[p.t1]["chunks"][p.c1];
  json& y = tensors[p.t2]["chunks"][p.c2];
  std::printf("ckpt_tamper: swapped %s %s (rank %d, rect %s) and %s %s (rank %d, rect %s)%s\n",
              tensors[p.t1]["name"].get<std::string>().c_str(), x["key"].get<std::string>().c_str(),
              x["rank"].get<int>(), x["rect"].dump().c_str(), tensors[p.t2]["name"].get<std::string>().c_str(),
              y["key"].get<std::string>().c_str(), y["rank"].get<int>(), y["rect"].dump().c_str(),
              keys ? ", keys too" : "");
  std::vector<std::string> fields{"rank", "file", "offset", "bytes", "block_rows", "checksums"};
  if (keys) fields.push_back("key");
  for (const auto& f : fields) std::swap(x[f], y[f]);
}

int run(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: ckpt_tamper swap|step|flip|version1 DIR ... (see the source)\n");
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2], mpath = dir + "/metadata.json";
  if (mode == "flip") {
    if (argc != 5) throw std::runtime_error("usage: ckpt_tamper flip DIR FILE OFFSET");
    std::fstream f(dir + "/" + argv[3], std::ios::in | std::ios::out | std::ios::binary);
    if (!f) throw std::runtime_error(dir + "/" + argv[3] + ": cannot open");
    f.seekg(0, std::ios::end);
    const long long size = f.tellg(), arg = std::atoll(argv[4]), at = arg < 0 ? size + arg : arg;
    f.seekg(at);
    const char b = static_cast<char>(f.get());
    f.seekp(at);
    f.put(static_cast<char>(b ^ 0x01));
    std::printf("ckpt_tamper: flipped bit 0 of byte %lld of %s (%lld bytes)\n", at, argv[3], size);
    return f ? 0 : 1;
  }
  json md = read_json(mpath);
  if (mode == "swap") {
    swap(md, has_flag(argc, argv, "--two-tensors"), has_flag(argc, argv, "--keys"));
  } else if (mode == "step") {
    if (argc < 5) throw std::runtime_error("usage: ckpt_tamper step DIR STEP DATA_POSITION");
    std::printf("ckpt_tamper: step %s -> %s, data_position %s -> %s\n", md["step"].dump().c_str(), argv[3],
                md["data_position"].dump().c_str(), argv[4]);
    md["step"] = std::atoll(argv[3]);
    md["data_position"] = std::atoll(argv[4]);
  } else if (mode == "version1") {
    md["version"] = 1;
    md.erase("checksum");
    for (auto& f : md.at("files")) f.erase("header_checksum");
    std::printf("ckpt_tamper: metadata.json made version 1\n");
  } else {
    throw std::runtime_error("unknown mode '" + mode + "'");
  }
  if (has_flag(argc, argv, "--fix-checksum")) {
    md["checksum"] = checksum_str(metadata_checksum(md));
    std::printf("ckpt_tamper: metadata.json's checksum recomputed\n");
  }
  write_json(mpath, md);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt_tamper: %s\n", e.what());
    return 1;
  }
}
