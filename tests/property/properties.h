// The parity properties of issue 8 as plain functions, so that each is its own
// RC_GTEST_PROP (parity_props_test.cpp, run_props_test.cpp) and the fault test can run one
// programmatically with a broken reduction injected (fault_props_test.cpp).
// Each draws a case, runs it as real rank processes (`parity run --report`), and judges the
// report rows the property is about; every row is judged by the verdict's own tolerance
// table (harness/tolerance.h), never by a bound written here.
#pragma once
#include <rapidcheck.h>

#include <cmath>
#include <string>
#include <vector>

#include "case_run.h"
#include "ckpt/unsharded.h"
#include "generators.h"
#include "harness/tolerance.h"

namespace parity::property {

// Draws with `spec`, classifies, runs, and asserts that the rows `sel` are within tolerance.
// A case whose routing has a near-tie (a decision within rounding, docs/verdict.md) may
// legitimately differ downstream: it is discarded, never counted as a pass or a failure.
inline CaseRun expect_rows(const std::string& property, const CaseSpec& spec, const std::vector<RowSel>& sel) {
  const Scenario s = *gen_case(spec);
  classify_case(s);
  CaseRun r = run_case(s, property);
  const std::string bad = failing_rows(r, sel);
  RC_PRE(bad.empty() || !has_near_tie(r));
  if (!bad.empty()) record_failure(property, s, r, bad);
  RC_ASSERT(bad == std::string());
  return r;
}

// 1. Every gradient (reduced, accumulated, before clipping) matches, per family; the loss too.
inline void prop_gradients() { expect_rows("gradients", CaseSpec{}, {{"loss", ""}, {"grad", ""}}); }

// 2. Router gate gradients, routing decisions, tokens_per_expert and expert_bias match.
inline void prop_routing() {
  CaseSpec spec;
  spec.need_moe = true;
  expect_rows("routing", spec,
              {{"grad", "router"}, {"routing", ""}, {"tokens_per_expert", ""}, {"expert_bias", ""}});
}

// 3. LayerNorm gradients (and parameters) match, with and without sequence parallel.
inline void prop_layernorm() {
  CaseSpec spec;
  spec.want_tp = true;
  expect_rows("layernorm", spec, {{"grad", "layernorm"}, {"param", "layernorm"}});
}

// 4. Expert weights after one plain sgd step at lr 1 match: a gradient scale error of the
// routed experts (1/ep, 2, tp) shows in the parameters at full size.
inline void prop_expert_sgd_step() {
  CaseSpec spec;
  spec.need_moe = true, spec.sgd_lr1_one_step = true;
  expect_rows("expert_sgd_step", spec, {{"grad", "routed_experts"}, {"param", "routed_experts"}});
}

// 5. Every parameter after 2..3 adam / adamw steps matches.
inline void prop_adam_params() {
  CaseSpec spec;
  spec.adam_family = true;
  expect_rows("adam_params", spec, {{"param", ""}});
}

// 6. The global grad norm and the clip coefficient match, with clipping that clips,
// clipping that does not, and none.
inline void prop_grad_norm_clip() {
  CaseSpec spec;
  spec.draw_clip = true;
  const CaseRun r = expect_rows("grad_norm_clip", spec, {{"grad_norm", ""}, {"clip_coef", ""}});
  bool clipped = false;
  for (const auto& st : r.report["step_table"])
    clipped = clipped || (st["clip_ref"].is_number() && st["clip_ref"].get<double>() < 1.0);
  RC_CLASSIFY(clipped, "clips");
  RC_CLASSIFY(!clipped, "does not clip");
}

// 7. A checkpoint saved under one random layout and loaded under another (any folding mode,
// another world size, the one-device baseline) gives the bitwise-equal unsharded state:
// the loading layout resumes at the saved step and at once saves again (`parity run
// --resume A --save-at K --ckpt B`, no step in between), and `parity ckpt diff A B` must
// find nothing. The saving run's verdict is other properties' business.
inline void prop_ckpt_round_trip() {
  const CkptCase c = *gen_ckpt_case();
  classify_case(c.save);
  RC_CLASSIFY(c.load.world != c.save.layout.world, "loaded on another world size");
  RC_CLASSIFY(folding_of(c.load) != folding_of(c.save.layout), "loaded in another folding mode");
  RC_CLASSIFY(c.load.world == 1, "loaded by the one-device baseline");
  RC_CLASSIFY(c.load.order != c.save.layout.order, "loaded under another rank order");
  RC_CLASSIFY(c.load.fsdp_dim != c.save.layout.fsdp_dim, "loaded under another fsdp_dim");
  Scenario loader = c.save;
  loader.name = "property_ckpt_load";
  loader.layout = c.load;
  const auto dir = work_dir();
  const std::string a = (dir / "ckpt_saved").string(), b = (dir / "ckpt_loaded").string(),
                    K = std::to_string(c.save.steps);
  std::filesystem::remove_all(a), std::filesystem::remove_all(b);
  const CaseRun saved = run_case(c.save, "ckpt_save", "--save-at " + K + " --ckpt " + a);
  const CaseRun loaded = run_case(loader, "ckpt_load", "--resume " + a + " --save-at " + K + " --ckpt " + b);
  std::string why;
  if (!std::filesystem::exists(a + "/metadata.json"))
    why = "the saving run wrote no checkpoint (exit " + std::to_string(saved.rc) + ")\n" + saved.log.substr(0, 2000);
  else if (!std::filesystem::exists(b + "/metadata.json"))
    why = "the loading run wrote no checkpoint (exit " + std::to_string(loaded.rc) + ")\n" + loaded.log.substr(0, 2000);
  else
    for (const std::string& d : ckpt::diff_unsharded(ckpt::read_unsharded(a), ckpt::read_unsharded(b)))
      why += "DIFF " + d + "\n";
  if (!why.empty()) {
    const auto out = failure_dir();
    write_text(out / "ckpt_round_trip.load.json", scenario_to_json(loader).dump(2) + "\n");
    const std::string p = parity_binary();
    record_failure("ckpt_round_trip", c.save, loaded, why,
                   p + " run " + (out / "ckpt_round_trip.json").string() + " --save-at " + K + " --ckpt /tmp/A && " +
                       p + " run " + (out / "ckpt_round_trip.load.json").string() + " --resume /tmp/A --save-at " + K +
                       " --ckpt /tmp/B && " + p + " ckpt diff /tmp/A /tmp/B");
  }
  RC_ASSERT(why == std::string());
}

// The values of a report that must not depend on anything but the case: every step line and
// every row (verdict, errors, scale ratio, worst element); not the timings.
inline nlohmann::json report_values(const nlohmann::json& rep) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : rep["rows"])
    rows.push_back({row["quantity"], row["subject"], row["verdict"], row["norm_rel"], row["scale_ratio"],
                    row["step"], row["bad_steps"], row["worst"]});
  return {{"steps", rep["step_table"]}, {"rows", rows}};
}

// 8. The same case run twice gives bitwise the same report values.
inline void prop_twice_bitwise() {
  const Scenario s = *gen_case(CaseSpec{});
  classify_case(s);
  const CaseRun a = run_case(s, "twice_a"), b = run_case(s, "twice_b");
  RC_ASSERT(!a.report.is_null());
  RC_ASSERT(!b.report.is_null());
  const nlohmann::json va = report_values(a.report), vb = report_values(b.report);
  if (va != vb) record_failure("twice_bitwise", s, b, "second run differs:\n" + nlohmann::json::diff(va, vb).dump(1));
  RC_ASSERT(va == vb);
}

// 9. gloo and mpi give the same result: the same verdict on every row, and losses that agree
// within the loss tolerance (the backends sum in different orders, so not bitwise).
inline void prop_gloo_mpi() {
  CaseSpec spec;
  spec.allow_mpi = false;
  const Scenario s = *gen_case(spec);
  classify_case(s);
  const CaseRun g = run_case(s, "gloo", "--backend gloo"), m = run_case(s, "mpi", "--backend mpi");
  RC_PRE(!has_near_tie(g) && !has_near_tie(m));
  std::string why = g.report.is_null() || m.report.is_null() ? "no report (exit " + std::to_string(g.rc) + ", " +
                                                                   std::to_string(m.rc) + ")\n" + m.log.substr(0, 2000)
                                                             : "";
  if (why.empty()) {
    const double tol = tolerance_for(s.model.dtype, Quantity::loss).norm_rel;
    const auto &rg = g.report["rows"], &rm = m.report["rows"];
    for (size_t i = 0; i < rg.size() && i < rm.size(); ++i)
      if (rg[i]["verdict"] != rm[i]["verdict"])
        why += "row " + rg[i]["quantity"].get<std::string>() + " " + rg[i]["subject"].get<std::string>() +
               ": gloo " + rg[i]["verdict"].get<std::string>() + ", mpi " + rm[i]["verdict"].get<std::string>() + "\n";
    const auto &sg = g.report["step_table"], &sm = m.report["step_table"];
    for (size_t t = 0; t < sg.size() && t < sm.size(); ++t) {
      const double lg = sg[t]["loss"].get<double>(), lm = sm[t]["loss"].get<double>();
      if (!(std::abs(lg - lm) <= tol * std::abs(sg[t]["loss_ref"].get<double>())))
        why += "step " + std::to_string(t) + " loss: gloo " + num_str(lg) + ", mpi " + num_str(lm) + "\n";
    }
    if (rg.size() != rm.size()) why += "different row counts\n";
  }
  if (!why.empty()) record_failure("gloo_mpi", s, m, why);
  RC_ASSERT(why == std::string());
}

}  // namespace parity::property
