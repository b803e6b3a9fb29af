#include "harness/runner/verdict_carry.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"

namespace parity::verdict_carry {

namespace {

constexpr char kMagic[8] = {'p', 'c', 'a', 'r', 'r', 'y', '0', '1'};
constexpr size_t kArrays = 6;  // m_after, v_after, m_tol, v_tol, shadow_m, shadow_v

std::array<std::vector<std::vector<double>>*, kArrays> arrays(verdict_taken::Moments& mo) {
  return {&mo.m_after, &mo.v_after, &mo.m_tol, &mo.v_tol, &mo.shadow_m, &mo.shadow_v};
}
std::array<const std::vector<std::vector<double>>*, kArrays> arrays(const verdict_taken::Moments& mo) {
  return {&mo.m_after, &mo.v_after, &mo.m_tol, &mo.v_tol, &mo.shadow_m, &mo.shadow_v};
}

// Whether parameter p of mo holds every array for every element of its index list.
bool complete(const verdict_taken::Moments& mo, size_t p) {
  if (p >= mo.idx.size() || p >= mo.counted.size() || !mo.counted[p] || mo.idx[p].empty()) return false;
  for (auto* a : arrays(mo))
    if (p >= a->size() || (*a)[p].size() != mo.idx[p].size()) return false;
  return true;
}

template <class V> void put(std::ofstream& out, const V& v) { out.write(reinterpret_cast<const char*>(&v), sizeof v); }
template <class V> void get(std::ifstream& in, V& v, const std::string& file) {
  if (!in.read(reinterpret_cast<char*>(&v), sizeof v))
    throw IoError(file + ": a resume check's carry file is cut short");
}

// One element of phase 1: its global index and the six values.
struct Element {
  int64_t idx = 0;
  std::array<double, kArrays> v{};
  bool operator<(const Element& o) const { return idx < o.idx; }
};

void read_file(const std::string& file, std::map<std::string, std::vector<Element>>& by_name) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError(file + ": cannot open a resume check's carry file");
  char magic[sizeof kMagic];
  if (!in.read(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    throw IoError(file + ": not a resume check's carry file");
  uint64_t params = 0;
  get(in, params, file);
  for (uint64_t q = 0; q < params; ++q) {
    uint64_t len = 0, n = 0;
    get(in, len, file);
    if (len > 4096) throw IoError(file + ": a parameter name of " + std::to_string(len) + " bytes");
    std::string name(len, '\0');
    if (!in.read(name.data(), static_cast<std::streamsize>(len))) throw IoError(file + ": cut short");
    get(in, n, file);
    std::vector<Element>& els = by_name[name];
    const size_t at = els.size();
    els.resize(at + n);
    for (uint64_t i = 0; i < n; ++i) get(in, els[at + i].idx, file);
    for (size_t a = 0; a < kArrays; ++a)
      for (uint64_t i = 0; i < n; ++i) get(in, els[at + i].v[a], file);
  }
}

}  // namespace

void save(const verdict_taken::Moments& mo, const std::vector<ParamSpec>& specs, const std::string& dir, int rank) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string file = dir + "/rank" + std::to_string(rank) + ".carry", tmp = file + ".part";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) throw IoError(tmp + ": cannot write a resume check's carry file");
  out.write(kMagic, sizeof kMagic);
  std::vector<size_t> ps;
  for (size_t p = 0; p < specs.size(); ++p)
    if (complete(mo, p)) ps.push_back(p);
  put(out, static_cast<uint64_t>(ps.size()));
  for (size_t p : ps) {
    put(out, static_cast<uint64_t>(specs[p].name.size()));
    out.write(specs[p].name.data(), static_cast<std::streamsize>(specs[p].name.size()));
    put(out, static_cast<uint64_t>(mo.idx[p].size()));
    out.write(reinterpret_cast<const char*>(mo.idx[p].data()),
              static_cast<std::streamsize>(mo.idx[p].size() * sizeof(int64_t)));
    for (auto* a : arrays(mo))
      out.write(reinterpret_cast<const char*>((*a)[p].data()),
                static_cast<std::streamsize>((*a)[p].size() * sizeof(double)));
  }
  out.close();
  if (!out) throw IoError(tmp + ": the write of a resume check's carry file failed");
  std::filesystem::rename(tmp, file, ec);
  if (ec) throw IoError(file + ": " + ec.message());
}

size_t load(verdict_taken::Moments& mo, const std::vector<ParamSpec>& specs, const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return 0;
  std::map<std::string, std::vector<Element>> by_name;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".carry") read_file(e.path().string(), by_name);
  for (auto& [name, els] : by_name) std::sort(els.begin(), els.end());
  for (auto* a : arrays(mo)) a->resize(specs.size());
  size_t carried = 0;
  for (size_t p = 0; p < specs.size() && p < mo.idx.size(); ++p) {
    if (p >= mo.counted.size() || !mo.counted[p] || mo.idx[p].empty()) continue;
    const auto it = by_name.find(specs[p].name);
    if (it == by_name.end()) continue;
    const std::vector<Element>& els = it->second;
    const size_t n = mo.idx[p].size();
    std::array<std::vector<double>, kArrays> got;
    for (auto& g : got) g.resize(n);
    bool all = true;
    for (size_t i = 0; i < n && all; ++i) {
      const auto f = std::lower_bound(els.begin(), els.end(), Element{mo.idx[p][i], {}});
      all = f != els.end() && f->idx == mo.idx[p][i];
      for (size_t a = 0; all && a < kArrays; ++a) got[a][i] = f->v[a];
    }
    if (!all) continue;
    auto dst = arrays(mo);
    for (size_t a = 0; a < kArrays; ++a) (*dst[a])[p] = std::move(got[a]);
    ++carried;
  }
  return carried;
}

}  // namespace parity::verdict_carry
