// What `parity matrix` does once its command line is read (cli/matrix_cmd.cpp): every scenario
// parsed and validated, its `parity run` and `parity golden check` as jobs (cli/jobs.h), a
// progress line each, the table and the matrix verdict, then --junit, --summary and --plots
// (cli/matrix_report.h writes their text).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace parity::cli {

struct MatrixOptions {
  std::vector<std::string> paths{"scenarios"};
  int jobs = 0;  // 0: the number of CPUs (cpu), 2 (cuda: every rank holds a CUDA context on the GPU)
  std::string device;
  std::string out, backend, dtype;
  int64_t steps = -1;
  bool golden = false;
  bool trajectory = false;  // every run's verdict free-running (`parity run --trajectory`)
  std::string golden_backend = "mpi";
  std::string junit, summary, summary_title, plots, inject;
  std::string summary_links = "relative";  // or "none": no links or images (a CI step summary)
};

// The exit code: 0 every layout (and golden check) passed, 1 one failed; bad input throws.
int run_matrix(MatrixOptions o);

}  // namespace parity::cli
