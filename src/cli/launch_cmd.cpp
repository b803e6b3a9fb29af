// `parity launch -n N [options] -- COMMAND ARGS`: starts N rank processes, torchrun-style.
// COMMAND is a parity subcommand (run with this binary) or any executable.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/numbers.h"
#include "cli/numbers.h"
#include "cli/self.h"
#include "proc/launch.h"

namespace parity::cli {

namespace {

struct LaunchCli {
  proc::LaunchOptions opts;
  std::string backend = "gloo";
  double timeout_s = 60, grace_s = -1, deadline_s = 0;
  bool no_prefix = false;
  std::vector<std::string> command;
};

}  // namespace

Command add_launch_command(CLI::App& app) {
  auto o = std::make_shared<LaunchCli>();
  CLI::App* sub = app.add_subcommand(
      "launch",
      "Start N rank processes of COMMAND (a parity subcommand, or any executable) with RANK, WORLD_SIZE,\n"
      "LOCAL_RANK and a rendezvous directory in their environment. Each rank's lines are printed as\n"
      "\"[r] line\". When a rank fails, the others get --grace to report, then are stopped; the exit code\n"
      "is the failing rank's, or 3 (infrastructure failed) when a rank died by a signal or --deadline passed.\n"
      "Example: parity launch -n 4 -- run scenarios/tiny.json\n"
      "Across hosts, on host I of 2: parity launch --nnodes 2 --node-rank I --master HOST0:29500 -n 4 -- \\\n"
      "  run scenarios/fsdp8.json --as-rank");
  add_launch_options(*sub, o->opts, o->backend, o->timeout_s);
  add_node_options(*sub, o->opts.nnodes, o->opts.node_rank, o->opts.master);
  sub->add_option("--grace", o->grace_s, "Seconds the other ranks get to report after the first failure "
                                         "(default: 1)")
      ->check(non_negative_real(365.0 * 24 * 3600));
  sub->add_option("--deadline", o->deadline_s,
                  "Wall-clock limit in seconds for the whole launch: when it passes every rank is stopped\n"
                  "(SIGTERM, then SIGKILL) and the exit code is 3 (infrastructure failed). Default: none")
      ->check(positive_seconds());
  sub->add_flag("--no-prefix", o->no_prefix, "Print the ranks' lines without the \"[r] \" prefix");
  sub->add_option("command", o->command, "COMMAND ARGS after --")->required();
  return {sub, [o]() {
            finish_launch_options(o->opts, o->backend, o->timeout_s);
            o->opts.deadline = std::chrono::milliseconds(static_cast<int64_t>(o->deadline_s * 1000));
            if (o->grace_s >= 0) o->opts.grace = std::chrono::milliseconds(static_cast<int64_t>(o->grace_s * 1000));
            o->opts.prefix_output = !o->no_prefix;
            const std::string& first = o->command.front();
            const bool subcommand = first.find('/') == std::string::npos && is_parity_subcommand(first);
            return proc::launch_main(o->opts, subcommand ? self_command(o->command) : o->command);
          }};
}

}  // namespace parity::cli
