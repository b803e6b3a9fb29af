#include "core/knobs.h"

#include "core/error.h"
#include "core/text.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace parity {

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> table = {
      // the verdict (the launcher side: a launch writes them into every rank's request)
      {"PARITY_INJECT", "unset: none", "named bugs of the parallel code to turn on, a,b (as --inject; docs/zoo.md)"},
      {"PARITY_FAULT", "unset: none", "scale what a layout reports, KIND:FAMILY:FACTOR[@RANK] (docs/verdict.md)"},
      {"PARITY_TWIN_STREAM", "0", "which of the rounding twin's pseudo-random sequences (measuring its luck)"},
      {"PARITY_MEASURE_AGAIN", "1",
       "0: a failure at rounding level is not measured again with twice the twins (docs/verdict.md)"},
      {"PARITY_FLOORS_FIRST", "1",
       "0: fp64 and fp32 runs measure their rounding twin even when every row is within its floor (docs/verdict.md)"},
      {"PARITY_TWIN_JITTER", "the built-in ulps", "the rounding twin's input jitter in ulps of fp32 (measuring)"},
      {"PARITY_FP8_GRAD_JITTER", "the built-in ulps", "the twin's jitter at fp8's E5M2 gradient points (measuring)"},
      {"PARITY_FP8_ROW_JITTER", "the built-in ulps", "the twin's jitter at E5M2 points in ulps of the row's amax"},
      {"PARITY_SHARED_BASELINE", "1", "0: every rank trains its own baseline instead of one per host"},
      {"PARITY_TRACE_PLANT", "unset: none",
       "SITE:LAYER:fwd|bwd:RANK:RECORD:INDEX: +1 on one element of one traced shard (test hook; docs/verdict.md)"},
      // the launch and the rendezvous
      {"PARITY_RANK_START", "fork", "fork or exec: how a one-host gloo CPU launch starts its ranks"},
      {"PARITY_BACKEND", "gloo", "a rank's backend when its launcher does not say (gloo, mpi, nccl)"},
      {"PARITY_COMM_TIMEOUT_MS", "60000", "a rank's per-collective timeout"},
      {"PARITY_STORE_DIR", "set by parity launch", "the one-host file store of the rendezvous"},
      {"PARITY_STORE", "unset: none", "redis://HOST:PORT/RUN: a Redis store for the rendezvous (docs/multihost.md)"},
      {"PARITY_RUN_ID", "Slurm's job id", "the run id of a Redis store without one in its URL"},
      {"PARITY_TORCH_STORE", "the agent's torch", "1 or 2: torch's TCPStore protocol under torchrun"},
      {"PARITY_GLOO_HOST", "the host name's address", "the address gloo's TCP transport binds"},
      {"PARITY_GLOO_IFACE", "unset: none", "the interface whose address gloo binds (when PARITY_GLOO_HOST is unset)"},
      // communication
      {"PARITY_GLOO_SHM", "1", "0: ranks on one host talk over TCP, not shared memory"},
      {"PARITY_GLOO_DIRECT_BYTES", "1048576", "messages up to this size are sent directly, not by gloo's ring"},
      {"PARITY_SHM_SLOT_BYTES", "the built-in size", "the shared-memory slot of each rank (>= 4096)"},
      {"PARITY_SHM_SPIN", "about 20 us", "spin iterations before a shared-memory wait yields"},
      {"PARITY_SHM_YIELDS", "10", "sched_yield calls before a shared-memory wait sleeps"},
      {"PARITY_COMM_TRACE", "unset: none", "R: world rank R prints every collective it takes part in (docs/comm.md)"},
      {"PARITY_SIM_FAULT", "unset: none",
       "throw@R:N or stall@R:N: rank R of a simulated world fails at collective N; late@R:MS: it ends MS ms late"},
      {"PARITY_SIM_ORDER", "rank",
       "a simulated world's summation order: rank (gloo's) or ring (NCCL's ring: by offset; docs/comm.md)"},
      // memory
      {"PARITY_HUGE_PAGES", "1",
       "0: the heap is not advised onto transparent huge pages, and a launcher's threads keep arenas of their own"},
      // checkpoints (test hooks and the save lock)
      {"PARITY_CKPT_CRASH", "unset: none", "RANK:POINT: that rank exits at that point of a save (test hook)"},
      {"PARITY_CKPT_NO_EXCHANGE", "unset", "set: a save skips its exchange step (test hook)"},
      {"PARITY_CKPT_LOCK_HELD", "set by parity", "the checkpoint directory lock a parent holds for its ranks"},
  };
  return table;
}

const char* knob(std::string_view name) {
  const auto& t = knobs();
  if (std::none_of(t.begin(), t.end(), [&](const Knob& k) { return k.name == name; }))
    throw std::logic_error("knob " + std::string(name) + " is not in core/knobs.cpp's table");
  return std::getenv(std::string(name).c_str());
}

bool knob_on(std::string_view name) {
  const char* v = knob(name);
  const std::string x = v != nullptr ? v : "";
  if (x != "" && x != "0" && x != "1")
    throw ConfigError(std::string(name), "must be 0 or 1, got '" + printable(x, 64) + "'");
  return x != "0";
}

std::string knobs_text() {
  size_t w = 0, d = 0;
  for (const Knob& k : knobs()) w = std::max(w, k.name.size()), d = std::max(d, k.fallback.size());
  auto pad = [](std::string_view s, size_t n) { return std::string(s) + std::string(n - s.size() + 2, ' '); };
  std::string out = "parity's environment settings (src/core/knobs.h); a run request carries what a rank needs\n" +
                    pad("name", w) + pad("default", d) + "what\n";
  for (const Knob& k : knobs()) out += pad(k.name, w) + pad(k.fallback, d) + std::string(k.what) + "\n";
  return out;
}

}  // namespace parity
