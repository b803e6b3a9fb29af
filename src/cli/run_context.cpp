#include "cli/run_context.h"

#include <unistd.h>

#include <cstdlib>
#include <ctime>

#include "cli/commands.h"

namespace parity::cli {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

std::string utc(const std::tm& tm, const char* format) {
  char buf[40];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

}  // namespace

std::string RunContext::on_purpose() const {
  std::string s;
  if (!injected.empty()) s = "bugs injected on purpose: " + injected;
  if (!faults.empty()) s += (s.empty() ? "" : "; ") + std::string("fault injected on purpose: ") + faults;
  return s;
}

RunContext run_context() {
  RunContext c;
  for (const char* var : {"PARITY_COMMIT", "GITHUB_SHA"})
    if (c.commit.empty()) c.commit = env(var);
  if (c.commit.empty()) {
    const std::string built = build_commit();
    c.commit = built == "unknown" ? "" : built;
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) c.hostname = host;
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  c.timestamp = utc(tm, "%Y-%m-%dT%H:%M:%S");
  c.date = utc(tm, "%Y-%m-%d %H:%M UTC");
  c.injected = env("PARITY_INJECT");
  c.faults = env("PARITY_FAULT");
  return c;
}

JunitSuite junit_suite(const std::string& name, const RunContext& ctx,
                       std::vector<std::pair<std::string, std::string>> extra) {
  JunitSuite s{name, ctx.timestamp, ctx.hostname, {}};
  if (!ctx.commit.empty()) s.properties.emplace_back("commit", ctx.commit);
  if (!ctx.injected.empty()) s.properties.emplace_back("injected", ctx.injected);
  if (!ctx.faults.empty()) s.properties.emplace_back("fault", ctx.faults);
  for (auto& p : extra) s.properties.push_back(std::move(p));
  return s;
}

}  // namespace parity::cli
