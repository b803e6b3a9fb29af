// `parity rank REQUEST`: one rank of a launch (harness/runner/launch_run.h). A launcher writes
// its RunRequest as REQUEST and starts every rank with this command; `parity launch -n W --
// parity rank DIR/request.json` replays a run kept with --log-dir DIR by hand.
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/self.h"
#include "harness/runner/rank_main.h"
#include "harness/runner/run_request.h"

namespace parity::cli {

RankStart rank_start() {
  RankStart how;
  how.self = {self_exe()};
  // A fork-started rank: its argv through the whole command line, as an exec'd one would run.
  how.in_process = [](const std::vector<std::string>& argv) {
    std::vector<std::string> copy(argv);
    std::vector<char*> ptrs;
    for (std::string& a : copy) ptrs.push_back(a.data());
    ptrs.push_back(nullptr);
    return run_cli(static_cast<int>(copy.size()), ptrs.data());
  };
  return how;
}

Command add_rank_command(CLI::App& app) {
  auto file = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand(
      "rank", "Run as one rank of a launch: REQUEST is the JSON file a parity launcher wrote (the resolved\n"
              "scenario and the rank's job: verdict, golden curves or comm bench). `parity launch -n W -- parity rank\n"
              "DIR/request.json` replays a run kept with --log-dir DIR");
  sub->add_option("request", *file, "The run request (DIR/request.json of a run with --log-dir DIR)")->required();
  return {sub, [file]() {
            return run_rank(
                [file] {
                  const RunRequest* inherited = inherited_request(*file);  // a fork-started rank's
                  return inherited != nullptr ? *inherited : read_request(*file);
                },
                *file);
          }};
}

}  // namespace parity::cli
