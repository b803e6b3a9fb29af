// One baseline per host (issue 16). The launcher of a layout (`parity run`, world > 1)
// trains the one-device baseline once, in a thread of its own, while the ranks run, and
// writes every step's record into a file the ranks map read-only (the run request's
// baseline_file); no rank trains a copy. A rank whose request names none (under an external
// launcher) or a file that is gone (a request replayed by hand) trains its own, as before.
// The comparison stays rank-local and the verdict is the same: the records are the same bits
// BaselineRun produces. On the CPU a rank's records and baseline parameters read the file in place
// (core/buffer.h borrow: no copy, no fresh memory per rank); each handle pins its step's block, which
// the producer reuses only once no handle reads it. On cuda they are copies into managed memory.
//
// File: a header page (magic, the baseline key, the step size, steps ready, each reader's
// next step, an error message), then the parameters before step 0, then a ring of step
// blocks, each: loss, ce, aux,
// grad_norm, clip_coef, the micro-batch losses, every gradient (before clipping), every
// parameter after the step, the expert biases after the step, tokens per expert, the chosen
// experts and the selection scores per MoE layer. The producer publishes a step by storing
// the count of steps ready (release) after writing its block.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness/runner/baseline.h"
#include "harness/scenario/memory.h"

namespace parity {

// What a baseline must agree on with a rank: model, optimizer, seeds, dtype and device
// (not the layout, the name or the number of steps).
std::string baseline_key(const Scenario& s);

// Where `parity run` trains the baseline: once per host (the default), or in every rank
// when PARITY_SHARED_BASELINE=0 (the old way, kept for comparisons).
BaselinePlace baseline_place();

// The baseline a verdict compares with: trained here, or read from the host's shared file.
template <class T> class BaselineSource {
 public:
  virtual ~BaselineSource() = default;
  // Step t's record, gradients included; t must follow the previous call (or skip_to). Shared,
  // read-only: the ranks of a simulated world reading one file share one copy per step. A handle held
  // holds the shared file's ring back: let it go within a few steps (the ring keeps four blocks).
  virtual std::shared_ptr<const StepRecord<T>> step(int64_t t) = 0;
  // The parameters and expert biases after the last step() (before step 0 at first).
  virtual const std::vector<Tensor<T>>& params() = 0;
  virtual const std::vector<Buffer<T>>& expert_bias() = 0;
  // params() kept alive past the next step (shared where the source shares its state, else a copy).
  virtual std::shared_ptr<const std::vector<Tensor<T>>> params_handle() = 0;
  // Makes step t the next one (a resumed run: the steps before are not compared).
  virtual void skip_to(int64_t t) = 0;
  virtual bool shared() const = 0;
};

// The file at `path` (the run request's baseline_file) when it is given, exists, its key
// matches `s` and `slot` (this rank's place among the file's readers: its world rank) is one
// of them; otherwise a BaselineRun trained in this process.
template <class T>
std::unique_ptr<BaselineSource<T>> make_baseline_source(const Scenario& s, int slot, const std::string& path);

// How many ranks read the shared baseline file at `path` (its header's), 0 when it is not one.
int shared_baseline_readers(const std::string& path);

// Trains the baseline of `s` for s.steps steps into `path`, in a thread, for `consumers`
// ranks whose first needed block is step `first` (a resumed phase: the step before its
// first); it keeps a ring of a few step blocks and runs at most that far ahead of the
// slowest rank, so the file stays small however many steps run. stop() asks it to end (the
// ranks failed), the destructor joins and removes the file. Errors are written into the
// file's header, where a waiting rank reads them.
class BaselineProducer {
 public:
  BaselineProducer(const Scenario& s, std::string path, int consumers, int64_t first);
  ~BaselineProducer();
  // Starts the training thread (once the ranks are started: a launcher that starts them by
  // fork alone must have no other thread then).
  void start();
  void stop() { stop_.store(true); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::function<void()> work_;  // the training, until start() hands it to the thread
  void* map_ = nullptr;          // the file's mapping, unmapped once the thread has ended
  size_t map_bytes_ = 0;
  int fd_ = -1;  // the file: the records are written through it (pwrite), the header through the mapping
};

}  // namespace parity
