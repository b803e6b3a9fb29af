// What `parity zoo` does once its command line is read (cli/zoo_cmd.cpp): each named bug's
// `parity run` as a job (cli/jobs.h), N at a time; its report judged against the registry's
// expectation (core/inject.h); one row per bug in the registry's order, then --junit
// (cli/zoo_report.h) and the zoo verdict. Over a scenario set (--set DIR), one row per bug and
// scenario: run and judged, or "cannot act" with the reason (cli/zoo_shape.h).
#pragma once
#include <string>
#include <vector>

namespace parity::cli {

struct ZooOptions {
  std::vector<std::string> names;  // default: every injection
  std::string scenarios = "scenarios";
  std::string set;        // run every bug in every scenario of this directory (cli/zoo_shape.h); "" the registry's
  bool check_cannot = false;  // over a set, run the pairs where a bug cannot act too: each must pass
  std::string out;        // keep reports and logs here
  std::string junit;      // JUnit XML, one testcase per bug
  std::string precision;  // every bug's run in this precision policy ("": each scenario's own)
  std::string backend;    // every bug's run on this backend ("": each scenario's own; sim: threads)
  int jobs = 0;           // runs at once; 0: the number of CPUs
  bool trajectory = false;  // every bug's run with `parity run --trajectory`
};

// The exit code: 0 every bug caught and named, 1 one escaped or was misnamed; bad input throws.
int run_zoo(ZooOptions o);

}  // namespace parity::cli
