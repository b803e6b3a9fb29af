// `parity run SCENARIO`: world 1 trains the scenario and prints each step's loss beside the
// data's entropy floor. World > 1 starts layout.world rank processes of this binary (the
// --as-rank side, which mpirun, srun or a torchrun-like launcher may start instead:
// docs/multihost.md), each running the baseline and the layout side by side; rank 0
// prints the verdict table (harness/verdict/verdict.h) and every rank exits with the verdict:
// 0 within tolerance, 1 not, 2 bad input (refused before any rank starts).
//
// Checkpoints (docs/ckpt.md, "Training runs"): --save-at K --ckpt DIR saves the layout's
// state (world 1: the baseline's, a seed checkpoint) after K steps and goes on; --resume DIR
// loads it and continues from its step, the baseline replaying the steps before without
// comparing. A scenario with a "resume" object runs its save-and-resume-elsewhere check:
// phase 1 trains save_at steps under the scenario's layout and saves into a temporary
// directory, phase 2 resumes under resume.layout; exit 0 only if both phases pass.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/numbers.h"
#include "cli/resolved.h"
#include "cli/self.h"
#include "comm/launch.h"
#include "comm/world.h"
#include "core/device.h"
#include "core/error.h"
#include "core/exit_codes.h"
#include "core/files.h"
#include "core/inject.h"
#include "harness/runner/baseline.h"
#include "harness/scenario/scenario.h"
#include "harness/runner/shared_baseline.h"
#include "harness/verdict/verdict.h"
#include "ckpt/checkpoint.h"
#include "ckpt/format.h"
#include "ckpt/training_state.h"
#include "core/text.h"
#include "harness/scenario/memory.h"

namespace parity::cli {

namespace {

struct RunOptions {
  std::string scenario;
  int64_t steps = -1;
  int64_t every = 1;
  std::string report, dtype, backend, log_dir, optim, device, inject;
  double lr = -1;
  double timeout_s = 60;
  bool timeout_given = false;  // --timeout on the command line (a rank: overrides PARITY_COMM_TIMEOUT_MS)
  double deadline_s = 0;  // --deadline: wall clock of each launch (0: none)
  bool as_rank = false;
  int64_t save_at = -1;       // --save-at K (with --ckpt DIR)
  std::string ckpt, resume;   // --ckpt DIR, --resume DIR
  int nnodes = 1, node_rank = 0;  // --nnodes, --node-rank, --master: this host's share of the ranks
  std::string master;
};

void print_header(const Scenario& s, double floor) {
  const auto& m = s.model;
  std::printf("scenario %s: %s, %s, %lld steps, world %lld\n", s.name.c_str(), std::string(dtype_name(m.dtype)).c_str(),
              std::string(optim_name(s.optim.kind)).c_str(), static_cast<long long>(s.steps),
              static_cast<long long>(s.layout.world));
  std::printf("entropy floor %.6f nats/token (ln V = %.6f)\n", floor, std::log(static_cast<double>(m.vocab)));
  std::printf("%6s %14s %14s %12s %12s %8s %12s\n", "step", "loss", "cross_entropy", "aux", "grad_norm", "clip",
              "above_floor");
}

// A layout on cuda (or on nccl) needs a CUDA device: refused before any rank starts, exit 77.
void require_device(const LayoutConfig& layout) {
  parity::require_device(
      layout.device,
      "layout.device cuda" + std::string(layout.backend == comm::Backend::nccl ? " (backend nccl)" : ""));
}

// World 1: the baseline alone; --resume / --save-at on its state (the seed checkpoint).
template <class T> int run_baseline(const Scenario& s, const RunOptions& o) {
  require_device(s.layout);
  require_memory(s, s.layout, printable(o.scenario, 4096));
  use_device(s.layout.device);
  BaselineRun<T> run(s);
  const double floor = run.data().entropy_floor();
  const nlohmann::json model = scenario_to_json(s)["model"], identity = checkpoint_run(s);
  int64_t first = 0;
  if (!o.resume.empty()) {
    first = run.load(o.resume, model, identity).step;
    if (first > s.steps)
      throw ConfigError("--resume", o.resume + " was saved after step " + std::to_string(first) +
                                        ", beyond the run's last step (steps = " + std::to_string(s.steps) + ")");
    std::printf("resumed from %s at step %lld\n", o.resume.c_str(), static_cast<long long>(first));
  }
  if (o.save_at >= 0 && (o.save_at < first || o.save_at > s.steps))
    throw ConfigError("--save-at", "must be in [" + std::to_string(first) + ", steps = " + std::to_string(s.steps) +
                                       "], got " + std::to_string(o.save_at));
  print_header(s, floor);
  for (int64_t t = first;; ++t) {
    if (t == o.save_at) {
      run.save(o.ckpt, {t, data_position_after(s.model, t), model, identity});
      std::printf("saved %s after %lld steps\n", o.ckpt.c_str(), static_cast<long long>(t));
    }
    if (t >= s.steps) break;
    StepRecord<T> r = run.step(t);
    require_finite_baseline(r, run.model().params.specs, run.model().params.tensors);  // exit 4
    if (t % o.every == 0 || t + 1 == s.steps)
      std::printf("%6lld %14.8f %14.8f %12.4e %12.4e %8.4f %12.6f\n", static_cast<long long>(t), r.loss, r.ce, r.aux,
                  r.grad_norm, r.clip_coef, r.ce - floor);
    std::fflush(stdout);
  }
  return 0;
}

// What this run writes must be parity's to replace (docs/faults.md "Nothing lost"), checked
// before anything runs: --ckpt a new or empty directory or a parity checkpoint, --report a
// new file or a report of an earlier run (its "compared_steps" key), in existing directories.
// Every --report is verdict_json (harness/verdict/verdict_report.cpp) dumped with sorted keys: this
// key comes within its first lines.
constexpr const char* kReportSignature = "\"compared_steps\":";
std::string phase1_report(const std::string& report);

void check_outputs(const RunOptions& o, const Scenario& s) {
  if (!o.ckpt.empty()) check_output_dir("--ckpt", o.ckpt, DirKind::checkpoint);
  if (o.report.empty()) return;
  check_output_file("--report", o.report, kReportSignature);
  if (s.resume) check_output_file("--report", phase1_report(o.report), kReportSignature);
}

// The scenario with the command line's overrides, checked again as a whole (ConfigError,
// exit 2, names the field and the rule).
Scenario load_with_overrides(const RunOptions& o) {
  Scenario s = load_scenario(o.scenario);
  if (o.as_rank) s.resume.reset();  // a rank runs one phase; the launcher checked the whole file
  if (o.steps >= 0) s.steps = o.steps;
  if (!o.dtype.empty()) s.model.set_precision(parse_precision(o.dtype, "--precision"));
  if (!o.backend.empty()) s.layout.backend = comm::parse_backend(o.backend);
  if (!o.backend.empty() && s.resume) s.resume->layout.backend = s.layout.backend;
  if (!o.device.empty()) {
    s.layout.device = parse_device(o.device);  // ConfigError on an unknown name
    if (s.resume) s.resume->layout.device = s.layout.device;
  }
  // nccl moves device buffers: a layout on nccl computes on the GPU.
  if (s.layout.backend == comm::Backend::nccl) s.layout.device = Device::cuda;
  if (s.resume && s.resume->layout.backend == comm::Backend::nccl) s.resume->layout.device = Device::cuda;
  if (!o.optim.empty()) {
    if (o.optim == "sgd") s.optim.kind = OptimKind::sgd;
    else if (o.optim == "adam") s.optim.kind = OptimKind::adam;
    else if (o.optim == "adamw") s.optim.kind = OptimKind::adamw;
    else throw ConfigError("--optim", "must be sgd, adam or adamw, got " + o.optim);
  }
  if (o.lr >= 0) s.optim.lr = o.lr;
  try {
    validate_scenario(s);  // the schema and the runner's rules (check_supported), both layouts
  } catch (const ConfigError& e) {
    throw ConfigError(printable(o.scenario, 4096) + ": " + e.path(), e.rule());
  }
  if ((o.save_at >= 0) != !o.ckpt.empty())
    throw ConfigError(o.save_at >= 0 ? "--ckpt" : "--save-at", "--save-at K and --ckpt DIR go together");
  if (o.save_at > s.steps)
    throw ConfigError("--save-at", "must be <= steps (" + std::to_string(s.steps) + "), got " +
                                       std::to_string(o.save_at));
  check_outputs(o, s);
  return s;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The launcher side, before any process starts: every check whose failure a rank would
// otherwise report once per rank. The run must fit in this machine's memory (exit 77), and a
// checkpoint to resume from must suit the run: the same model, a step within the run, and a
// step to compare unless it is re-saved at once (exit 2).
void check_before_launch(const Scenario& s, const LayoutConfig& layout, const RunOptions& o) {
  require_memory(s, layout, printable(o.scenario, 4096));
  if (o.resume.empty() || layout.world < 2) return;
  const std::string dir = ckpt::resolve(o.resume);
  const ckpt::Metadata md = ckpt::read_metadata(dir);
  ckpt::check_model(md.model, scenario_to_json(s)["model"], dir + "/" + ckpt::kMetadataFile);  // the ranks' words
  ckpt::check_run(md.run, checkpoint_run(s), dir + "/" + ckpt::kMetadataFile);
  const std::string K = std::to_string(md.step), steps = std::to_string(s.steps);
  if (md.step > s.steps)  // the same words as the ranks' check (harness/verdict/verdict.cpp)
    throw ConfigError("--resume", o.resume + " was saved after step " + K + ", beyond the run's last step (steps = " +
                                      steps + ")");
  if (md.step == s.steps && o.save_at < 0)
    throw ConfigError("--resume", o.resume + " was saved after step " + K + ", the run's last step (steps = " + steps +
                                      "): nothing would be compared; give --steps above " + K +
                                      " (or --save-at " + K + " to save it again under this layout)");
  if (o.save_at >= 0 && o.save_at < md.step)
    throw ConfigError("--save-at", "must be in [" + K + ", steps = " + steps + "], got " + std::to_string(o.save_at));
}

// "R.json" -> "R.phase1.json" (any other name: "R.phase1"): phase 1's report in a resume check.
std::string phase1_report(const std::string& report) {
  const std::string ext = ".json";
  if (report.size() > ext.size() && report.compare(report.size() - ext.size(), ext.size(), ext) == 0)
    return report.substr(0, report.size() - ext.size()) + ".phase1" + ext;
  return report + ".phase1";
}

// `extra` goes to every rank after the common arguments (the checkpoint flags of a phase).
// A fresh path for this launcher's shared baseline; files of launchers that no longer run
// (killed -9 before they could remove theirs) are removed first.
std::string shared_baseline_path() {
  namespace fs = std::filesystem;
  static int seq = 0;
  std::error_code ec;
  const fs::path dir = fs::temp_directory_path(ec);
  sweep_stale_temp("parity-baseline-");
  return (dir / ("parity-baseline-" + std::to_string(::getpid()) + "-" + std::to_string(seq++) + ".bin")).string();
}

// Whether the ranks start by fork alone (comm/launch.h, LaunchOptions::in_process): every
// rank on this host, gloo, the CPU (mpirun starts mpi's ranks; a CUDA context does not
// survive a fork; across hosts each launcher's store client may hold a thread), and
// PARITY_RANK_START not "exec" (the old way: fork + exec of `parity run ... --as-rank`).
bool fork_started(const comm::LaunchOptions& lo, const LayoutConfig& layout) {
  const char* v = std::getenv("PARITY_RANK_START");
  const std::string how = v != nullptr ? v : "";
  if (!how.empty() && how != "fork" && how != "exec")
    throw ConfigError("PARITY_RANK_START", "must be fork or exec, got '" + printable(how, 64) + "'");
  return how != "exec" && lo.nnodes == 1 && lo.backend == comm::Backend::gloo &&
         layout.device == Device::cpu;
}

// A fork-started rank: its argv through the whole command line, as an exec'd one would run.
int run_rank_argv(const std::vector<std::string>& argv) {
  std::vector<std::string> copy(argv);
  std::vector<char*> ptrs;
  for (std::string& a : copy) ptrs.push_back(a.data());
  ptrs.push_back(nullptr);
  return run_cli(static_cast<int>(copy.size()), ptrs.data());
}

int launch_ranks(const Scenario& s, const LayoutConfig& layout, const RunOptions& o,
                 const std::vector<std::string>& extra, int64_t first_block = 0) {
  (void)fault_from_env();  // a malformed PARITY_FAULT is refused here, before any rank starts
  (void)injected_names();  // likewise an unknown PARITY_INJECT / --inject name
  comm::LaunchOptions lo;
  if (layout.world % o.nnodes != 0)
    throw ConfigError("--nnodes", "the layout's " + std::to_string(layout.world) + " ranks do not split evenly over " +
                                      std::to_string(o.nnodes) + " hosts");
  lo.nproc = static_cast<int>(layout.world / o.nnodes);
  lo.nnodes = o.nnodes, lo.node_rank = o.node_rank, lo.master = o.master;
  lo.backend = layout.backend;
  lo.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  lo.deadline = std::chrono::milliseconds(static_cast<int64_t>(o.deadline_s * 1000));
  lo.prefix_output = false;  // rank 0 alone prints; errors name their rank themselves
  lo.log_dir = o.log_dir;
  const int64_t t0 = now_ns();
  lo.extra_env.push_back("PARITY_LAUNCH_T0_NS=" + std::to_string(t0));
  require_device(layout);
  check_before_launch(s, layout, o);
  // The ranks run the resolved scenario (cli/resolved.h): this phase's layout, overrides applied.
  Scenario resolved = s;
  resolved.layout = layout;
  resolved.resume.reset();
  const ResolvedScenario file(resolved, o.log_dir);
  std::vector<std::string> args{"run", file.path(), "--as-rank"};
  args.insert(args.end(), extra.begin(), extra.end());
  if (!o.report.empty()) args.insert(args.end(), {"--report", o.report});
  // One baseline per host (harness/runner/shared_baseline.h): trained here while the ranks run,
  // read by every rank from a shared file; none trains its own copy.
  // PARITY_SHARED_BASELINE=0: every rank trains its own (the old way; for comparisons).
  std::optional<BaselineProducer> baseline;
  if (baseline_place() == BaselinePlace::once_per_host) {
    Scenario bs = s;
    bs.layout = layout;
    use_device(layout.device);
    baseline.emplace(bs, shared_baseline_path(), lo.nproc, first_block);  // this host's ranks
    lo.extra_env.push_back("PARITY_BASELINE_FILE=" + baseline->path());
  }
  if (baseline) lo.after_start = [&baseline] { baseline->start(); };
  const bool by_fork = fork_started(lo, layout);
  if (by_fork) lo.in_process = run_rank_argv;
  std::fflush(stdout);
  const int rc = comm::launch_main(lo, self_command(args));
  if (baseline) baseline->stop();
  const std::string ranks = lo.nnodes > 1 ? std::to_string(lo.nproc) + " of " + std::to_string(layout.world) +
                                                " ranks on this host"
                                          : std::to_string(lo.nproc) + " ranks";
  const std::string how = lo.backend == comm::Backend::mpi ? "started by mpirun"
                          : by_fork                        ? "started by fork"
                                                           : "started by exec";
  std::printf("time to verdict: %.3f s (launcher wall clock, %s %s, exit %d)\n",
              static_cast<double>(now_ns() - t0) * 1e-9, ranks.c_str(), how.c_str(), rc);
  return rc;
}

void write_report(const std::string& path, const VerdictReport& rep) {
  std::ofstream f(path);
  if (!f) throw IoError("cannot write report file " + path);
  f << verdict_json(rep).dump(2) << "\n";
  if (!f) throw IoError("cannot write report file " + path);
}

// The rank side: join the world, run the verdict, rank 0 prints and writes the report.
int run_rank_verdict(const RunOptions& o) {
  const char* t0 = std::getenv("PARITY_LAUNCH_T0_NS");
  const double startup = t0 != nullptr ? static_cast<double>(now_ns() - std::atoll(t0)) * 1e-9 : 0.0;
  Scenario s = load_with_overrides(o);
  // Who this rank is: `parity launch`, mpirun, srun or a torchrun-like launcher (comm/rank_env.h),
  // with the layout's backend (after --backend). A world of the wrong size is refused before
  // the rendezvous would wait for ranks that never come.
  comm::RankEnv env = comm::read_rank_env(s.layout.backend);
  if (o.timeout_given) env.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  if (env.world_size != s.layout.world) {
    const std::string var = env.source == "OMPI_COMM_WORLD_RANK" ? "OMPI_COMM_WORLD_SIZE"
                            : env.source == "SLURM_PROCID"       ? "SLURM_NTASKS"
                                                                 : "WORLD_SIZE";
    const std::string is = env.source == "none" ? "not set (a world of one)" : "is " + std::to_string(env.world_size);
    throw ConfigError(var, is + ", but the layout of " + o.scenario + " has " + std::to_string(s.layout.world) +
                               " ranks ($.layout.world)");
  }
  use_device(s.layout.device, env.local_rank);
  const auto r0 = std::chrono::steady_clock::now();
  auto world = comm::make_world_communicator(env);
  VerdictOptions vo;
  vo.rendezvous_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count();
  vo.startup_s = startup;
  vo.fault = fault_from_env();
  vo.save_at = o.save_at, vo.ckpt_dir = o.ckpt, vo.resume_dir = o.resume;
  if (world->size() != s.layout.world)
    throw ConfigError("$.layout.world", "the scenario asks for " + std::to_string(s.layout.world) +
                                            " ranks but this run has " + std::to_string(world->size()));
  VerdictReport rep =
      s.model.dtype == DType::f32 ? run_verdict<float>(s, *world, vo) : run_verdict<double>(s, *world, vo);
  if (world->rank() == 0) {
    std::fputs(format_verdict(rep).c_str(), stdout);
    std::fflush(stdout);
    if (!o.report.empty()) write_report(o.report, rep);
  }
  return rep.exit_code();
}


// A fresh directory for the check's checkpoint, removed when the check ends.
struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "parity-resume-XXXXXX").string();
    if (mkdtemp(t.data()) == nullptr) throw IoError(t + ": cannot create a temporary directory");
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// The scenario's save-and-resume-elsewhere check: phase 1 trains resume.save_at steps under
// the scenario's layout (world 1: the baseline) and saves; phase 2 loads that checkpoint
// under resume.layout and trains to the last step. Both phases are compared with the
// uninterrupted baseline; --report R.json, if given, is phase 2's, and phase 1's (a layout,
// not the baseline) goes to R.phase1.json.
int run_resume_check(const Scenario& s, const RunOptions& o) {
  const ResumeConfig& rc = *s.resume;
  require_memory(s, rc.layout, printable(o.scenario, 4096));  // phase 2's, before phase 1 runs
  const TempDir tmp;
  const std::string dir = tmp.path + "/ckpt", K = std::to_string(rc.save_at);
  std::printf("resume check, phase 1 of 2: steps 0..%lld under %s, saved after step %s to %s\n",
              static_cast<long long>(rc.save_at - 1), describe_layout(s.layout, LayoutText::full).c_str(), K.c_str(),
              dir.c_str());
  std::fflush(stdout);
  RunOptions o1 = o;
  o1.report = o.report.empty() ? "" : phase1_report(o.report);
  o1.save_at = rc.save_at, o1.ckpt = dir, o1.steps = rc.save_at;
  int rc1 = 0;
  if (s.layout.world > 1) {
    Scenario s1 = s;
    s1.steps = rc.save_at;
    rc1 = launch_ranks(s1, s.layout, o1, {"--save-at", K, "--ckpt", dir});
  } else {
    Scenario s1 = s;
    s1.steps = rc.save_at, s1.resume.reset();
    rc1 = s.model.dtype == DType::f32 ? run_baseline<float>(s1, o1) : run_baseline<double>(s1, o1);
  }
  std::error_code ec;
  if (!std::filesystem::exists(dir + "/metadata.json", ec)) {
    std::printf("resume check: phase 1 wrote no checkpoint (exit %d); phase 2 not run\nresume check verdict: FAIL\n",
                rc1);
    return rc1 != 0 ? rc1 : 1;
  }
  std::printf("resume check, phase 2 of 2: steps %s..%lld under %s, resumed from %s\n", K.c_str(),
              static_cast<long long>(s.steps - 1), describe_layout(rc.layout, LayoutText::full).c_str(), dir.c_str());
  std::fflush(stdout);
  const int rc2 = launch_ranks(s, rc.layout, o, {"--resume", dir}, std::max<int64_t>(rc.save_at - 1, 0));
  const int code = rc1 != 0 ? rc1 : rc2;
  std::printf("resume check verdict: %s (phase 1 exit %d, phase 2 exit %d)\n", code == 0 ? "PASS" : "FAIL", rc1, rc2);
  return code;
}

// `mpirun -np 8 parity run S` without --as-rank would start 8 launchers of 8 ranks each:
// refused when the environment already makes this process one rank of a larger world.
void refuse_nested_launch(const Scenario& s) {
  comm::RankEnv env;
  try {
    env = comm::read_rank_env();
  } catch (const ConfigError&) {
    return;  // not a usable identity: this is no rank of anything, launch as usual
  }
  if (env.world_size > 1)
    throw ConfigError("--as-rank", "this process is rank " + std::to_string(env.rank) + " of " +
                                       std::to_string(env.world_size) + " (from " + env.source +
                                       "): add --as-rank so that each rank runs its part of the " +
                                       std::to_string(s.layout.world) + "-rank layout instead of starting " +
                                       std::to_string(s.layout.world) + " ranks of its own");
}

// Errors of a rank carry its rank: the launcher prints every rank's lines unprefixed.
int run_rank(const RunOptions& o) {
  const std::string r = comm::rank_label();
  const std::string who = "parity: rank " + r + ": ";
  try {
    return run_rank_verdict(o);
  } catch (const std::exception& e) {
    const int code = exit_code::of(e);
    // every rank runs the same baseline and diverges alike: rank 0 says it once
    if (code == exit_code::diverged && r != "?" && r != "0") return code;
    std::fprintf(stderr, "%s%s: %s\n", who.c_str(), code == exit_code::diverged ? "baseline diverged" : "error",
                 printable_lines(e.what()).c_str());
    return code;
  }
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand(
      "run",
      "Train a scenario. World 1: print each step's loss beside the entropy floor. World > 1: start the\n"
      "layout's ranks, compare every step with the one-device baseline (loss, gradients and parameters\n"
      "per family, grad norm, clipping, routing, tokens_per_expert, expert bias) and print the verdict.\n"
      "Exit 0 within tolerance, 1 not, 2 bad input.");
  sub->add_option("scenario", o->scenario, "Scenario JSON file (docs/scenario.md)")->required();
  sub->add_option("--steps", o->steps, "Override the scenario's number of steps")->check(non_negative_integer());
  sub->add_option("--every", o->every, "World 1: print every K-th step (the last is always printed)")
      ->check(positive_integer());
  sub->add_option("--precision,--dtype", o->dtype,
                  "Override the scenario's precision policy: fp64, fp32, bf16 (bf16 storage, fp32 compute and "
                  "reductions) or bf16-reduce-bf16 (docs/precision.md); --dtype is its older name");
  sub->add_option("--backend", o->backend, "Override the layout's backend: gloo, mpi or nccl")->check(backend_choice());
  sub->add_option("--device", o->device,
                  "Override the layout's device: cpu or cuda (the baseline and every rank on the GPU; ranks share\n"
                  "the visible GPUs round-robin by local rank). Exit 77 when no CUDA device is visible")
      ->check(device_choice());
  sub->add_option("--optim", o->optim, "Override the optimizer: sgd, adam or adamw");
  sub->add_option("--inject", o->inject,
                  "Turn on named bugs in the parallel code (comma-separated; docs/zoo.md): the verdict must catch\n"
                  "them and name their root. Same as PARITY_INJECT=NAME");
  sub->add_option("--lr", o->lr, "Override the learning rate (a finite number > 0)")->check(positive_real());
  sub->add_option("--report", o->report,
                  "World > 1: also write the verdict as JSON to FILE (a scenario with a resume object: phase 2's; "
                  "phase 1's goes to FILE.phase1.json)");
  sub->add_option("--timeout", o->timeout_s, "World > 1: per-collective timeout in seconds")
      ->check(positive_seconds())
      ->capture_default_str();
  sub->add_option("--deadline", o->deadline_s,
                  "World > 1: wall-clock limit in seconds for the ranks (each phase of a resume check); when it\n"
                  "passes every rank is stopped and the exit code is 3 (infrastructure failed). Default: none")
      ->check(positive_seconds());
  sub->add_option("--log-dir", o->log_dir, "World > 1: also write each rank's output to DIR/rank<r>.log");
  add_node_options(*sub, o->nnodes, o->node_rank, o->master);
  sub->add_option("--save-at", o->save_at,
                  "Save the layout's whole training state (world 1: the baseline's, a seed checkpoint) to --ckpt\n"
                  "DIR after K steps, then go on")
      ->check(non_negative_integer());
  sub->add_option("--ckpt", o->ckpt, "Checkpoint directory for --save-at (replaced atomically)");
  sub->add_option("--resume", o->resume,
                  "Load the training state from DIR (saved under any layout) and continue from its step; the\n"
                  "baseline replays the steps before it without comparing");
  sub->add_flag("--as-rank", o->as_rank,
                "Run as one rank of the verdict, started by another launcher: mpirun, srun, torchrun-like\n"
                "(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or `parity launch --nnodes`; docs/multihost.md");
  return {sub, [o, sub]() {
            if (!o->inject.empty()) setenv("PARITY_INJECT", o->inject.c_str(), 1);  // every rank inherits it
            o->timeout_given = sub->get_option("--timeout")->count() > 0;
            if (o->as_rank) return run_rank(*o);
            Scenario s = load_with_overrides(*o);
            require_ranks_per_host(s, o->nnodes, printable(o->scenario, 4096));  // exit 2 before anything runs
            // with --nnodes this is one launcher per host, whatever started it (srun, one task a node)
            if ((s.layout.world > 1 || s.resume) && o->nnodes == 1) refuse_nested_launch(s);
            if (s.resume && o->save_at < 0 && o->resume.empty()) return run_resume_check(s, *o);
            std::vector<std::string> extra;
            if (o->save_at >= 0) extra = {"--save-at", std::to_string(o->save_at), "--ckpt", o->ckpt};
            if (!o->resume.empty()) extra.insert(extra.end(), {"--resume", o->resume});
            if (s.layout.world > 1) return launch_ranks(s, s.layout, *o, extra);
            return s.model.dtype == DType::f32 ? run_baseline<float>(s, *o) : run_baseline<double>(s, *o);
          }};
}

}  // namespace parity::cli
