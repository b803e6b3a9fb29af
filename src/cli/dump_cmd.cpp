// `parity dump SCENARIO DIR`: the option table; the trace is harness/runner/dump.h.
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/numbers.h"
#include "cli/self.h"
#include "core/device.h"
#include "core/precision.h"
#include "core/text.h"
#include "harness/runner/dump.h"
#include "harness/scenario/memory.h"
#include "harness/scenario/scenario.h"

namespace parity::cli {

namespace {

struct DumpOptions {
  std::string scenario, dir, device, precision;
  int64_t steps = -1, trace_steps = -1;
  bool no_bounds = false, trace = false;
};

}  // namespace

Command add_dump_command(CLI::App& app) {
  auto o = std::make_shared<DumpOptions>();
  CLI::App* sub = app.add_subcommand(
      "dump", "Write the baseline's initial parameters and every step (tokens, loss, gradients, parameters,\n"
              "routing) as safetensors files with a manifest.json describing them, and the rounding twin's\n"
              "noise per step: the reference `parity compare` holds another framework's dump to\n"
              "(docs/framework.md). `parity export` is the same command");
  sub->alias("export");
  sub->add_option("scenario", o->scenario, "Scenario JSON file (docs/scenario.md)")->required();
  sub->add_option("dir", o->dir, "Output directory (created if missing)")->required();
  sub->add_option("--steps", o->steps, "Override the scenario's number of steps")->check(steps_choice());
  sub->add_option("--device", o->device, "Compute on cpu or cuda (default: the scenario's layout.device)")
      ->check(device_choice());
  sub->add_flag("--no-bounds", o->no_bounds,
                "Skip the rounding twin (half the time); `parity compare` then holds rows to the floors alone");
  sub->add_flag("--trace", o->trace,
                "Also write each step's traced tensors (trace_NNNNNN.safetensors: every block's activations and\n"
                "the gradients arriving at them, docs/verdict.md \"The trace\"), for `parity compare` to name\n"
                "the first diverging one");
  sub->add_option("--trace-steps", o->trace_steps,
                  "With --trace: trace the first N steps only (a large model's traces are ~3x its step files;\n"
                  "`parity compare` traces the first failing step, else step 0)")
      ->check(non_negative_integer());
  sub->add_option("--precision,--dtype", o->precision,
                  "Override the scenario's precision policy: fp64, fp32, bf16, bf16-reduce-bf16, fp16, fp8 or "
                  "fp8-delayed")
      ->check(precision_choice());
  return {sub, [o]() {
            Scenario s = load_scenario(o->scenario);
            if (o->steps >= 0) s.steps = o->steps;
            if (!o->precision.empty()) s.model.set_precision(parse_precision(o->precision, "--precision"));
            validate_scenario(s);
            const Device d = o->device.empty() ? s.layout.device : parse_device(o->device);
            require_device(d, "dump --device cuda");
            LayoutConfig one;  // the baseline alone, on the chosen device
            one.device = d;
            require_memory(s, one, printable(o->scenario, 4096));  // exit 77 before allocating
            use_device(d);
            return write_dump(s, o->dir, !o->no_bounds, o->trace ? o->trace_steps : 0);
          }};
}

}  // namespace parity::cli
