// `parity rank REQUEST`: one rank of a launch (harness/runner/launch_run.h). A launcher writes
// its RunRequest as REQUEST and starts every rank with this command; `parity launch -n W --
// parity rank DIR/request.json` replays a run kept with --log-dir DIR by hand.
#include <memory>
#include <string>

#include "cli/commands.h"
#include "harness/runner/rank_main.h"
#include "harness/runner/run_request.h"

namespace parity::cli {

Command add_rank_command(CLI::App& app) {
  auto file = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand(
      "rank", "Run as one rank of a launch: REQUEST is the JSON file a parity launcher wrote (the resolved\n"
              "scenario and the rank's job: verdict, golden curves or comm bench). `parity launch -n W -- parity rank\n"
              "DIR/request.json` replays a run kept with --log-dir DIR");
  sub->add_option("request", *file, "The run request (DIR/request.json of a run with --log-dir DIR)")->required();
  return {sub, [file]() { return run_rank([file] { return read_request(*file); }, *file); }};
}

}  // namespace parity::cli
