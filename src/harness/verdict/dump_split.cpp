// A candidate's batch split checked as a set (dump_split.h).
#include "harness/verdict/dump_split.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "core/error.h"
#include "model/batch_split.h"

namespace parity {

namespace {

std::string where(int64_t rank, int64_t mb) {
  return "dp rank " + std::to_string(rank) + " micro-batch " + std::to_string(mb);
}

// "3, 7 and 9" (at most 8 named, then "and N more")
std::string listed(const std::vector<std::string>& items) {
  std::string out;
  const size_t shown = std::min<size_t>(items.size(), 8);
  for (size_t i = 0; i < shown; ++i)
    out += (i == 0 ? "" : i + 1 == shown && shown == items.size() ? " and " : ", ") + items[i];
  if (shown < items.size()) out += " and " + std::to_string(items.size() - shown) + " more";
  return out;
}

}  // namespace

SplitCheck check_split(const std::vector<double>& rows, int64_t batch, int64_t microbatches) {
  SplitCheck out;
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> takers;  // sequence -> (rank, micro-batch)
  std::vector<std::set<int64_t>> micro(static_cast<size_t>(microbatches));
  std::vector<std::string> outside, twice, missing;
  for (size_t i = 0; i + 2 < rows.size(); i += 3) {
    const auto g = static_cast<int64_t>(rows[i]), r = static_cast<int64_t>(rows[i + 1]);
    const auto mb = static_cast<int64_t>(rows[i + 2]);
    if (g < 0 || g >= batch) {
      outside.push_back(std::to_string(g) + " (" + where(r, mb) + ")");
      continue;
    }
    takers[g].emplace_back(r, mb);
    if (mb < 0 || mb >= microbatches || r < 0 || r >= batch) continue;
    micro[static_cast<size_t>(mb)].insert(g);
    if (out.taken.size() <= static_cast<size_t>(r))
      out.taken.resize(static_cast<size_t>(r) + 1, std::vector<int64_t>(static_cast<size_t>(microbatches), 0));
    ++out.taken[static_cast<size_t>(r)][static_cast<size_t>(mb)];
  }
  for (int64_t g = 0; g < batch; ++g) {
    const auto it = takers.find(g);
    if (it == takers.end()) {
      missing.push_back(std::to_string(g));
    } else if (it->second.size() > 1) {
      std::string by;
      for (const auto& [r, mb] : it->second) by += (by.empty() ? "" : ", ") + where(r, mb);
      twice.push_back(std::to_string(g) + " (" + std::to_string(it->second.size()) + " times: " + by + ")");
    }
  }
  auto add = [&](const std::vector<std::string>& v, const std::string& one, const std::string& many) {
    if (v.empty()) return;
    out.problem += (out.problem.empty() ? "" : "; ") + (v.size() == 1 ? one : many) + " " + listed(v);
  };
  add(missing, "sequence missing (no rank took it):", "sequences missing (no rank took them):");
  add(twice, "sequence taken more than once:", "sequences taken more than once:");
  add(outside, "a sequence outside the batch of " + std::to_string(batch) + ":",
      "sequences outside the batch of " + std::to_string(batch) + ":");
  for (int64_t m = 0; m < microbatches; ++m) {
    const SeqRange want = micro_batch_sequences(batch, microbatches, m);
    const auto& have = micro[static_cast<size_t>(m)];
    bool same = static_cast<int64_t>(have.size()) == want.size();
    for (int64_t g = want.begin; same && g < want.end; ++g) same = have.count(g) != 0;
    out.micro_comparable.push_back(same);
  }
  return out;
}

std::vector<std::string> replica_differences(const nlohmann::json& rec, const std::string& where, int64_t& pairs) {
  auto count = [&](const nlohmann::json& j, const char* key) {
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 0)
      throw ConfigError(where + "." + key, "expected a count >= 0");
    return j[key].get<int64_t>();
  };
  if (!rec.is_object()) throw ConfigError(where, "expected {\"ranks\", \"tensors\", \"differ\"}");
  const int64_t ranks = count(rec, "ranks"), tensors = count(rec, "tensors");
  pairs = ranks > 1 ? (ranks - 1) * tensors : 0;
  if (!rec.contains("differ") || !rec["differ"].is_array()) throw ConfigError(where + ".differ", "expected an array");
  std::vector<std::string> out;
  for (size_t k = 0; k < rec["differ"].size(); ++k) {
    const nlohmann::json& d = rec["differ"][k];
    const std::string at = where + ".differ[" + std::to_string(k) + "]";
    if (!d.is_object() || !d.contains("what") || !d["what"].is_string() || !d.contains("first") ||
        !d["first"].is_string())
      throw ConfigError(at, "expected {\"rank\", \"what\", \"tensors\", \"first\"}");
    const int64_t n = count(d, "tensors");
    out.push_back("rank " + std::to_string(count(d, "rank")) + "'s " + d["what"].get<std::string>() + " (" +
                  std::to_string(n) + (n == 1 ? " tensor" : " tensors") + ", first " + d["first"].get<std::string>() +
                  ")");
  }
  return out;
}

std::string clip_by_rank(const nlohmann::json& rec, const std::string& where, double ref_clip, double bound) {
  if (rec.is_null()) return "";
  if (!rec.is_array()) throw ConfigError(where, "expected an array: each rank's clip coefficient (or null)");
  std::vector<std::pair<size_t, double>> c;
  for (size_t r = 0; r < rec.size(); ++r) {
    if (rec[r].is_null()) continue;
    if (!rec[r].is_number() || !std::isfinite(rec[r].get<double>()))
      throw ConfigError(where + "[" + std::to_string(r) + "]", "expected a finite number or null");
    c.emplace_back(r, rec[r].get<double>());
  }
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& [r, v] : c) lo = std::min(lo, v), hi = std::max(hi, v);
  if (c.size() < 2 || hi - lo <= bound * std::max(std::abs(hi), std::abs(lo))) return "";
  std::string s;
  char buf[48];
  for (size_t k = 0; k < c.size() && k < 4; ++k) {
    std::snprintf(buf, sizeof buf, "%.4g", c[k].second);
    s += (k ? ", rank " : "rank ") + std::to_string(c[k].first) + (k ? " by " : " clipped by ") + buf;
  }
  if (c.size() > 4) s += ", ...";
  std::snprintf(buf, sizeof buf, "%.4g", ref_clip);
  return s + " (the reference by " + buf + "): the ranks clipped by different coefficients, each by its own norm " +
         "(the local shards' or replica's, not the global norm: sum the squared norms over the ranks that hold " +
         "different shards before clipping)";
}

}  // namespace parity
