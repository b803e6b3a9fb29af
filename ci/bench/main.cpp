// The one main() of parity_bench: every ci/bench/*.cpp is linked into that binary
// (CMakeLists.txt), so benchmark files register with BENCHMARK(...) and define no main.
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
