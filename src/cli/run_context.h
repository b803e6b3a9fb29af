// Where and how a command's runs happen, for the reports it writes (`parity matrix --junit
// --summary`, `parity zoo --junit`): the commit, the host, the time, and the bugs or faults
// injected on purpose, so that an injected FAIL never reads as a regression.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "cli/junit.h"

namespace parity::cli {

struct RunContext {
  std::string commit;     // PARITY_COMMIT, else GITHUB_SHA, else the commit built (`parity --version`), else ""
  std::string hostname;   // gethostname, "" when unknown
  std::string timestamp;  // UTC, xs:dateTime without a zone: "2026-11-27T03:10:00"
  std::string date;       // the same for people: "2026-11-27 03:10 UTC"
  std::string injected;   // PARITY_INJECT (--inject): the named bugs every run has on, "" none
  std::string faults;     // PARITY_FAULT: the fault every run has on, "" none
  // "bugs injected on purpose: NAME; fault: SPEC" or "" when neither.
  std::string on_purpose() const;
};

// The context of this process now (reads the environment and the clock).
RunContext run_context();

// A JUnit <testsuite> header for the context: its timestamp and hostname, and as properties
// the commit, the injected bugs and faults (each only when set), then `extra` in order.
JunitSuite junit_suite(const std::string& name, const RunContext& ctx,
                       std::vector<std::pair<std::string, std::string>> extra = {});

}  // namespace parity::cli
