#include "model/data.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/philox.h"

namespace parity {

namespace {
constexpr double kSuccessorWeights[MarkovData::kSuccessors] = {8, 4, 2, 1};
constexpr uint64_t kChainStream = 0x636861696eull;  // "chain"
constexpr uint64_t kSeqStream = 0x736571ull;        // "seq"
}  // namespace

MarkovData::MarkovData(int64_t vocab, uint64_t data_seed) : vocab_(vocab), seed_(data_seed) {
  if (vocab < 2) throw Error("MarkovData: vocab must be at least 2");
  m_ = static_cast<int>(std::min<int64_t>(kSuccessors, vocab));
  double total = 0;
  for (int k = 0; k < m_; ++k) total += kSuccessorWeights[k];
  for (int k = 0; k < m_; ++k) {
    prob_.push_back(kSuccessorWeights[k] / total);
    cdf_.push_back((k ? cdf_.back() : 0.0) + prob_.back());
  }
  cdf_.back() = 1.0;
  next_.resize(static_cast<size_t>(vocab * m_));
  for (int64_t v = 0; v < vocab; ++v) {
    int64_t* row = &next_[static_cast<size_t>(v * m_)];
    uint64_t draw = 0;
    for (int k = 0; k < m_; ++k) {  // distinct successors by rejection
      for (;;) {
        PhiloxWords w = philox(seed_, kChainStream, static_cast<uint64_t>(v) * 1024 + draw++);
        auto cand = static_cast<int64_t>(uniform_open(w[0], w[1]) * static_cast<double>(vocab));
        if (std::find(row, row + k, cand) == row + k) {
          row[k] = cand;
          break;
        }
      }
    }
  }
}

void MarkovData::sequence(int64_t step, int64_t g, int64_t S, int64_t* tokens) const {
  for (int64_t i = 0; i <= S; ++i) {
    PhiloxWords w = philox(seed_ ^ kSeqStream, static_cast<uint64_t>(step), (static_cast<uint64_t>(g) << 24) | i);
    double u = uniform_open(w[0], w[1]);
    if (i == 0) {
      tokens[0] = std::min(vocab_ - 1, static_cast<int64_t>(u * static_cast<double>(vocab_)));
      continue;
    }
    int k = 0;
    while (k + 1 < m_ && u >= cdf_[static_cast<size_t>(k)]) ++k;
    tokens[i] = next_[static_cast<size_t>(tokens[i - 1] * m_ + k)];
  }
}

void MarkovData::batch(int64_t step, int64_t g0, int64_t count, int64_t S, int64_t* inputs, int64_t* targets) const {
  std::vector<int64_t> seq(static_cast<size_t>(S + 1));
  for (int64_t b = 0; b < count; ++b) {
    sequence(step, g0 + b, S, seq.data());
    std::copy(seq.begin(), seq.end() - 1, inputs + b * S);
    std::copy(seq.begin() + 1, seq.end(), targets + b * S);
  }
}

double MarkovData::entropy_floor() const {
  double h_next = 0;
  for (double p : prob_) h_next -= p * std::log(p);
  return h_next;
}

}  // namespace parity
