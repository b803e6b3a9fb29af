// `parity compare REF GOT`: the option table; the job is harness/verdict/dump_compare.h.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/numbers.h"
#include "core/files.h"
#include "harness/verdict/dump_compare.h"

namespace parity::cli {

namespace {
struct CompareCli {
  DumpCompareOptions o;
  std::string report;
};
}  // namespace

Command add_compare_command(CLI::App& app) {
  auto c = std::make_shared<CompareCli>();
  CLI::App* sub = app.add_subcommand(
      "compare",
      "Hold a candidate dump (parity_torch's Collector, another framework's writer, another parity dump) to the\n"
      "verdict of `parity run`: the same rows, bounds (the reference's rounding twin), near-tie arbitration\n"
      "and root naming. Exit 0 when every row is within its bound, 1 when one is not, 2 on bad input\n"
      "(a missing step or tensor is named). docs/framework.md");
  sub->add_option("reference", c->o.ref_dir, "The reference: a `parity dump` (or `parity export`) directory")
      ->required();
  sub->add_option("candidate", c->o.got_dir, "The candidate: a directory in the same dump format")->required();
  sub->add_option("--map", c->o.map_file,
                  "JSON {\"candidate name\": \"parity name\"} (or {\"name\": ..., \"transpose\": true} for a\n"
                  "weight stored (out, in)) for a candidate whose parameter names differ");
  sub->add_option("--steps", c->o.steps, "Compare the first N steps (default: every step of the reference)")
      ->check(non_negative_integer());
  sub->add_option("--report", c->report, "Also write the verdict as JSON (the format of `parity run --report`)");
  return {sub, [c]() {
            if (!c->report.empty()) check_output_file("--report", c->report, kVerdictReportSignature);
            const VerdictReport rep = compare_dumps(c->o);
            std::fputs(format_verdict(rep).c_str(), stdout);
            std::fflush(stdout);
            if (!c->report.empty())
              write_json_file(c->report, verdict_json(rep), 2, "report file", Replace{kVerdictReportSignature});
            return rep.exit_code();
          }};
}

}  // namespace parity::cli
