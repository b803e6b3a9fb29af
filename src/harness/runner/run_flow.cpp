#include "harness/runner/run_flow.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "ckpt/format.h"
#include "ckpt/training_state.h"
#include "comm/rank_env.h"
#include "core/device.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "harness/runner/baseline.h"
#include "harness/scenario/memory.h"
#include "harness/scenario/scenario.h"
#include "harness/verdict/verdict.h"

namespace parity {

namespace {


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
void require_layout_device(const LayoutConfig& layout) {
  require_device(layout.device,
                 "layout.device cuda" + std::string(layout.backend == comm::Backend::nccl ? " (backend nccl)" : ""));
}

// World 1: the baseline alone; --resume / --save-at on its state (the seed checkpoint).
template <class T> int run_baseline(const Scenario& s, const RunRequest& r, const std::string& source, int64_t every) {
  require_layout_device(s.layout);
  require_memory(s, s.layout, printable(source, 4096));
  use_device(s.layout.device);
  BaselineRun<T> run(s);
  const double floor = run.data().entropy_floor();
  const nlohmann::json model = scenario_to_json(s)["model"], identity = checkpoint_run(s);
  int64_t first = 0;
  if (!r.resume.empty()) {
    first = run.load(r.resume, model, identity).step;
    if (first > s.steps)
      throw ConfigError("--resume", r.resume + " was saved after step " + std::to_string(first) +
                                        ", beyond the run's last step (steps = " + std::to_string(s.steps) + ")");
    std::printf("resumed from %s at step %lld\n", r.resume.c_str(), static_cast<long long>(first));
  }
  if (r.save_at >= 0 && (r.save_at < first || r.save_at > s.steps))
    throw ConfigError("--save-at", "must be in [" + std::to_string(first) + ", steps = " + std::to_string(s.steps) +
                                       "], got " + std::to_string(r.save_at));
  print_header(s, floor);
  for (int64_t t = first;; ++t) {
    if (t == r.save_at) {
      run.save(r.ckpt, {t, data_position_after(s.model, t), model, identity});
      std::printf("saved %s after %lld steps\n", r.ckpt.c_str(), static_cast<long long>(t));
    }
    if (t >= s.steps) break;
    StepRecord<T> rec = run.step(t);
    require_finite_baseline(rec, run.model().params.specs, run.model().params.tensors);  // exit 4
    if (t % every == 0 || t + 1 == s.steps)
      std::printf("%6lld %14.8f %14.8f %12.4e %12.4e %8.4f %12.6f\n", static_cast<long long>(t), rec.loss, rec.ce,
                  rec.aux, rec.grad_norm, rec.clip_coef, rec.ce - floor);
    std::fflush(stdout);
  }
  return 0;
}

int baseline_alone(const RunRequest& r, const std::string& source, int64_t every) {
  return with_real(r.scenario->model.dtype,
                   [&](auto x) { return run_baseline<decltype(x)>(*r.scenario, r, source, every); });
}

// The launcher side, before any process starts: every check whose failure a rank would
// otherwise report once per rank. The run must fit in this machine's memory (exit 77), and a
// checkpoint to resume from must suit the run: the same model, a step within the run, and a
// step to compare unless it is re-saved at once (exit 2).
void check_before_launch(const RunRequest& r, const std::string& source) {
  const Scenario& s = *r.scenario;
  require_memory(s, s.layout, printable(source, 4096));
  if (r.resume.empty() || s.layout.world < 2) return;
  const std::string dir = ckpt::resolve(r.resume);
  const ckpt::Metadata md = ckpt::read_metadata(dir);
  ckpt::check_model(md.model, scenario_to_json(s)["model"], dir + "/" + ckpt::kMetadataFile);  // the ranks' words
  ckpt::check_run(md.run, checkpoint_run(s), dir + "/" + ckpt::kMetadataFile);
  const std::string K = std::to_string(md.step), steps = std::to_string(s.steps);
  if (md.step > s.steps)  // the same words as the ranks' check (harness/runner/verdict_run.cpp)
    throw ConfigError("--resume", r.resume + " was saved after step " + K + ", beyond the run's last step (steps = " +
                                      steps + ")");
  if (md.step == s.steps && r.save_at < 0)
    throw ConfigError("--resume", r.resume + " was saved after step " + K + ", the run's last step (steps = " + steps +
                                      "): nothing would be compared; give --steps above " + K +
                                      " (or --save-at " + K + " to save it again under this layout)");
  if (r.save_at >= 0 && r.save_at < md.step)
    throw ConfigError("--save-at", "must be in [" + K + ", steps = " + steps + "], got " + std::to_string(r.save_at));
}

// One phase: `r.scenario` holds the phase's steps and layout and no resume object.
int launch_phase(const RunRequest& r, const RankStart& how, const std::string& source) {
  return launch(r, how, [&] { check_before_launch(r, source); });
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
int run_resume_check(const RunRequest& r, const RankStart& how, const std::string& source, int64_t every) {
  const Scenario& s = *r.scenario;
  const ResumeConfig& rc = *s.resume;
  require_memory(s, rc.layout, printable(source, 4096));  // phase 2's, before phase 1 runs
  const TempDir tmp;
  const std::string dir = tmp.path + "/ckpt", K = std::to_string(rc.save_at);
  std::printf("resume check, phase 1 of 2: steps 0..%lld under %s, saved after step %s to %s\n",
              static_cast<long long>(rc.save_at - 1), describe_layout(s.layout, LayoutText::full).c_str(), K.c_str(),
              dir.c_str());
  std::fflush(stdout);
  RunRequest r1 = r;
  r1.report = r.report.empty() ? "" : phase1_report(r.report);
  r1.save_at = rc.save_at, r1.ckpt = dir;
  r1.carry = tmp.path + "/carry";  // the verdict's moments after phase 1 (verdict_carry.h)
  r1.scenario->steps = rc.save_at, r1.scenario->resume.reset();
  const int rc1 = s.layout.world > 1 ? launch_phase(r1, how, source) : baseline_alone(r1, source, every);
  std::error_code ec;
  if (!std::filesystem::exists(dir + "/metadata.json", ec)) {
    std::printf("resume check: phase 1 wrote no checkpoint (exit %d); phase 2 not run\nresume check verdict: FAIL\n",
                rc1);
    return rc1 != 0 ? rc1 : 1;
  }
  std::printf("resume check, phase 2 of 2: steps %s..%lld under %s, resumed from %s\n", K.c_str(),
              static_cast<long long>(s.steps - 1), describe_layout(rc.layout, LayoutText::full).c_str(), dir.c_str());
  std::fflush(stdout);
  RunRequest r2 = r;
  r2.resume = dir, r2.first_block = std::max<int64_t>(rc.save_at - 1, 0), r2.carry = r1.carry;
  r2.scenario->layout = rc.layout, r2.scenario->resume.reset();
  const int rc2 = launch_phase(r2, how, source);
  const int code = rc1 != 0 ? rc1 : rc2;
  std::printf("resume check verdict: %s (phase 1 exit %d, phase 2 exit %d)\n", code == 0 ? "PASS" : "FAIL", rc1, rc2);
  return code;
}

}  // namespace

std::string phase1_report(const std::string& report) {
  const std::string ext = ".json";
  if (report.size() > ext.size() && report.compare(report.size() - ext.size(), ext.size(), ext) == 0)
    return report.substr(0, report.size() - ext.size()) + ".phase1" + ext;
  return report + ".phase1";
}

void check_request(const RunRequest& r, const std::string& source) {
  (void)source;
  const Scenario& s = *r.scenario;
  if ((r.save_at >= 0) != !r.ckpt.empty())
    throw ConfigError(r.save_at >= 0 ? "--ckpt" : "--save-at", "--save-at K and --ckpt DIR go together");
  if (r.save_at > s.steps)
    throw ConfigError("--save-at", "must be <= steps (" + std::to_string(s.steps) + "), got " +
                                       std::to_string(r.save_at));
  if (!r.ckpt.empty()) check_output_dir("--ckpt", r.ckpt, DirKind::checkpoint);
  if (r.report.empty()) return;
  check_output_file("--report", r.report, kVerdictReportSignature);
  if (s.resume) check_output_file("--report", phase1_report(r.report), kVerdictReportSignature);
}

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

namespace {

// The --ckpt directory, held by this launcher for the whole run (one writer per directory:
// ckpt::lock_checkpoint_dir); its ranks are told so (kLockHeldEnv). A directory it created that
// holds nothing but the lock when the run ends (nothing was saved) is removed again.
class CheckpointHold {
 public:
  explicit CheckpointHold(const std::string& dir) : dir_(dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    created_ = !fs::exists(fs::symlink_status(dir, ec));
    lock_ = ckpt::lock_checkpoint_dir("--ckpt", dir);
    setenv(ckpt::kLockHeldEnv, fs::absolute(fs::path(dir)).lexically_normal().c_str(), 1);
  }
  ~CheckpointHold() {
    namespace fs = std::filesystem;
    unsetenv(ckpt::kLockHeldEnv);
    std::error_code ec;
    if (!created_ || fs::exists(dir_ + "/" + ckpt::kMetadataFile, ec)) return;
    for (const auto& e : fs::directory_iterator(dir_, ec))
      if (e.path().filename() != kLockFile) return;
    fs::remove(dir_ + "/" + kLockFile, ec);
    fs::remove(dir_, ec);
  }
  CheckpointHold(const CheckpointHold&) = delete;
  CheckpointHold& operator=(const CheckpointHold&) = delete;

 private:
  std::string dir_;
  bool created_ = false;
  DirLock lock_;
};

}  // namespace

int run_scenario(const RunRequest& r, const RankStart& how, const std::string& source, int64_t every) {
  const Scenario& s = *r.scenario;
  require_ranks_per_host(s, r.nnodes, printable(source, 4096));  // exit 2 before anything runs
  std::optional<CheckpointHold> hold;  // before any rank starts: a second writer is refused at once
  if (r.save_at >= 0 && !r.ckpt.empty() && r.nnodes == 1) hold.emplace(r.ckpt);  // else rank 0 locks it
  // with --nnodes this is one launcher per host, whatever started it (srun, one task a node)
  if ((s.layout.world > 1 || s.resume) && r.nnodes == 1) refuse_nested_launch(s);
  if (s.resume && r.save_at < 0 && r.resume.empty()) return run_resume_check(r, how, source, every);
  RunRequest one = r;
  one.scenario->resume.reset();  // a run given --save-at or --resume runs one phase, its own layout
  if (s.layout.world > 1) return launch_phase(one, how, source);
  return baseline_alone(one, source, every);
}

}  // namespace parity
