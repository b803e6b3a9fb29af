// `parity ckpt inspect DIR`: tensors, shapes, dtypes, the layout each was saved under, chunks
// per rank, sizes and checksums, every byte verified; exit 0 when whole, 3 (a damaged
// checkpoint, core/exit_codes.h) when corrupt.
// `parity ckpt export DIR OUT`: the unsharded state (every tensor whole) as one safetensors file.
// `parity ckpt diff A B`: whether two checkpoints hold bitwise the same unsharded state,
// whatever layouts they were saved under; exit 0 equal, 1 different, with every difference.
// `parity ckpt bench`: save and load throughput of a synthetic training state of a scenario's
// model at W = 8, beside the disk's raw write (fsync) and read speed (docs/ckpt.md).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/inspect.h"
#include "ckpt/unsharded.h"
#include "cli/commands.h"
#include "core/exit_codes.h"
#include "core/files.h"
#include "harness/runner/ckpt_bench.h"

namespace parity::cli {
namespace {

int run_export(const std::string& dir, const std::string& out, bool force) {
  // Before the checkpoint is read: a user's file, a FIFO or a device at OUT is refused at once.
  check_output_file("out", out, ckpt::kExportSignature, force);
  const ckpt::UnshardedState st = ckpt::read_unsharded(dir);
  ckpt::write_unsharded(st, out, force, "out");
  int64_t bytes = 0;
  for (const auto& t : st.tensors) bytes += t.bytes();
  std::printf("%s: %zu tensors, %lld bytes, step %lld, saved under W%lld -> %s\n", dir.c_str(), st.tensors.size(),
              static_cast<long long>(bytes), static_cast<long long>(st.md.step),
              static_cast<long long>(st.md.mesh.world), out.c_str());
  return 0;
}

int run_diff(const std::string& a, const std::string& b) {
  const ckpt::UnshardedState sa = ckpt::read_unsharded(a), sb = ckpt::read_unsharded(b);
  const std::vector<std::string> d = ckpt::diff_unsharded(sa, sb);
  for (const std::string& line : d) std::printf("DIFF %s\n", line.c_str());
  std::printf("%s: %zu tensors of %s (W%lld) and %s (W%lld)\n", d.empty() ? "bitwise equal" : "DIFFERENT",
              sa.tensors.size(), a.c_str(), static_cast<long long>(sa.md.mesh.world), b.c_str(),
              static_cast<long long>(sb.md.mesh.world));
  return d.empty() ? 0 : 1;
}

}  // namespace

Command add_ckpt_command(CLI::App& app) {
  struct Opts {
    std::string dir, scenario = "scenarios/small.json", bench_dir, out, other;
    bool verbose = false, force = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub =
      app.add_subcommand("ckpt", "Inspect, export, compare and benchmark sharded checkpoints (docs/ckpt.md)");
  sub->require_subcommand(1);
  CLI::App* ins = sub->add_subcommand(
      "inspect", "Print a checkpoint's tensors, shapes, dtypes, layouts, chunks per rank, sizes and checksums, "
                 "verify every byte; exit 3 when it is corrupt");
  ins->add_option("dir", o->dir, "Checkpoint directory")->required();
  ins->add_flag("-v,--verbose", o->verbose, "List every chunk with its rectangle, offset and checksums");
  CLI::App* exp = sub->add_subcommand(
      "export", "Write a checkpoint's unsharded state (every tensor whole, as one device holds it) to one "
                "safetensors file; equal states give equal bytes whatever layout saved them");
  exp->add_option("dir", o->dir, "Checkpoint directory")->required();
  exp->add_option("out", o->out,
                  "Output .safetensors file: new, or an export parity wrote (anything else is refused, exit 2)")
      ->required();
  exp->add_flag("--force", o->force, "Replace OUT even when it is a regular file parity did not write");
  CLI::App* diff = sub->add_subcommand(
      "diff", "Compare two checkpoints' unsharded states bitwise (any saving layouts); exit 0 equal, 1 different, "
              "each differing tensor named with its count and first differing element");
  diff->add_option("a", o->dir, "First checkpoint directory")->required();
  diff->add_option("b", o->other, "Second checkpoint directory")->required();
  CLI::App* bench = sub->add_subcommand("bench", "Save/load throughput at W = 8 beside raw disk write/read");
  bench->add_option("--scenario", o->scenario, "Scenario whose model is used (default scenarios/small.json)");
  bench->add_option("--dir", o->bench_dir, "Where to write (default $TMPDIR/parity-ckpt-bench)");
  return {sub, [o, ins, exp, diff]() {
            if (exp->parsed()) return run_export(o->dir, o->out, o->force);
            if (diff->parsed()) return run_diff(o->dir, o->other);
            if (ins->parsed()) {
              const ckpt::InspectReport r = ckpt::inspect(o->dir);
              std::fputs(ckpt::format_report(r, o->verbose).c_str(), stdout);
              return r.ok() ? exit_code::ok : exit_code::infrastructure;
            }
            return ckpt_bench(o->scenario, o->bench_dir);
          }};
}

}  // namespace parity::cli
