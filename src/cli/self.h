// Helpers for subcommands that start this binary again as rank processes.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "proc/launch.h"
#include "harness/runner/launch_run.h"

namespace parity::cli {

std::string self_exe();  // /proc/self/exe, resolved
bool is_parity_subcommand(const std::string& name);
// How a launch (harness/runner/launch_run.h) starts this binary as a rank: by its path, or
// by fork alone through run_cli (commands.h). Defined in rank_cmd.cpp, beside `parity rank`.
RankStart rank_start();
// [self_exe(), args...]
std::vector<std::string> self_command(const std::vector<std::string>& args);
// The environment `env` (null-terminated) for a job of spawn_self: as it is, plus glibc's heap
// settings (GLIBC_TUNABLES, unless env sets it) that make a job's page faults fewer (self.cpp).
std::vector<char*> job_environment(char** env);
// Starts this binary with `args`, stdout and stderr to the file `log`, environment
// job_environment(environ); returns its pid.
// Throws IoError naming `what` when it cannot start.
pid_t spawn_self(const std::vector<std::string>& args, const std::string& log, const std::string& what);
// -n, --backend, --timeout, --log-dir on `sub`; finish_launch_options converts after parsing.
void add_launch_options(CLI::App& sub, proc::LaunchOptions& opts, std::string& backend, double& timeout_s);
void finish_launch_options(proc::LaunchOptions& opts, const std::string& backend, double timeout_s);
// The names --backend and --device take, checked when the command line is parsed (exit 2, the
// option named): the layout's enums (mesh/layout_config.h) are parsed from them at the edge.
CLI::Validator backend_choice();  // gloo, mpi, nccl, sim (threads of this process: comm/sim/sim_world.h)
CLI::Validator process_backend_choice();  // gloo, mpi, nccl: a rank per process (`parity launch`)
CLI::Validator device_choice();     // cpu, cuda (gpu: cuda's other name)
CLI::Validator precision_choice();  // fp64, fp32, bf16, bf16-reduce-bf16 (an empty name refused)
CLI::Validator steps_choice();      // [1, kMaxSteps] (harness/scenario/scenario.h)
// --nnodes, --node-rank, --master: one launcher per host (proc/launch.h, docs/multihost.md).
void add_node_options(CLI::App& sub, int& nnodes, int& node_rank, std::string& master);

}  // namespace parity::cli
