// Measurements behind `parity bench`: the baseline's time per step and the reference
// matmul's throughput on a scenario's shapes, beside this core's measured fp64 peak.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mesh/run_config.h"

namespace parity {

struct MatmulTiming {
  std::string what;  // "attn.wq forward (n, D) x (D, D)"
  int64_t n, k, m;
  double seconds;    // best of the repetitions, one call
  double gflops;
};

struct StepTiming {
  int64_t steps;
  double best_seconds, median_seconds;
  double tokens_per_second;
};

// One core's fp64 multiply-add peak in GFLOP/s, measured with independent FMA chains
// (AVX2+FMA when the CPU has them, scalar otherwise). Only a yardstick: the reference ops
// never use FMA.
double measure_fp64_peak_gflops();

// The floating-point operations of one training step's matmuls and attention products
// (forward 2 per multiply-add, backward 4), the yardstick for achieved FLOP/s.
double step_matmul_flops(const ModelConfig& c);

template <class T> StepTiming time_baseline_steps(const Scenario& s, int64_t steps);
template <class T> std::vector<MatmulTiming> time_matmuls(const ModelConfig& c, int reps);

}  // namespace parity
