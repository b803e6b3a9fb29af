// The synthetic Markov-chain data of MODEL.md. Token v has up to kSuccessors distinct
// successors (drawn from data_seed) with the fixed probabilities kSuccessorWeights.
// Sequence g of step t (S+1 tokens) is a pure function of (data_seed, t, g): any rank
// reads exactly its own sequences.
#pragma once
#include <cstdint>
#include <vector>

namespace parity {

class MarkovData {
 public:
  static constexpr int kSuccessors = 4;

  MarkovData(int64_t vocab, uint64_t data_seed);

  // tokens (S+1): the first is uniform over the vocabulary, each next one from the chain.
  void sequence(int64_t step, int64_t g, int64_t S, int64_t* tokens) const;
  // inputs, targets (count, S) for global sequences g0 .. g0+count-1 of `step`.
  void batch(int64_t step, int64_t g0, int64_t count, int64_t S, int64_t* inputs, int64_t* targets) const;

  // The chain's entropy rate in nats: the lowest expected loss any model can reach.
  // Every token has the same successor probabilities (distinct successors), so
  // H(next | current) is the same for every token and this is exact at every position.
  double entropy_floor() const;

  int64_t vocab() const { return vocab_; }
  // successors (V, m) and their probabilities (m), m = min(kSuccessors, V).
  const std::vector<int64_t>& successors() const { return next_; }
  const std::vector<double>& probabilities() const { return prob_; }

 private:
  int64_t vocab_;
  uint64_t seed_;
  int m_;
  std::vector<int64_t> next_;  // (V, m)
  std::vector<double> prob_;   // (m)
  std::vector<double> cdf_;    // (m)
};

}  // namespace parity
