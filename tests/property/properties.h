// The parity properties of issue 8 as plain functions, so that each is its own
// RC_GTEST_PROP (parity_props_test.cpp, run_props_test.cpp) and the fault test can run one
// programmatically with a broken reduction injected (fault_props_test.cpp).
// Each draws a case, runs it as real rank processes (`parity run --report`), and judges the
// report rows the property is about; every row is judged by the verdict's own tolerance
// table (harness/verdict/tolerance.h), never by a bound written here.
#pragma once
#include <rapidcheck.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "case_run.h"
#include "ckpt/unsharded.h"
#include "generators.h"
#include "harness/runner/baseline.h"
#include "harness/verdict/tolerance.h"

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
  // and the parameters after the (clipped) step: a coefficient applied to the wrong tensors
  // leaves grad_norm and clip_coef right (the zoo's clip_skips_experts)
  const CaseRun r = expect_rows("grad_norm_clip", spec, {{"grad_norm", ""}, {"clip_coef", ""}, {"param", ""}});
  bool clipped = false;
  for (const auto& st : r.report["step_table"])
    clipped = clipped || (st["clip_ref"].is_number() && st["clip_ref"].get<double>() < 1.0);
  RC_CLASSIFY(clipped, "clips");
  RC_CLASSIFY(!clipped, "does not clip");
}

// The saved checkpoint against the training state in memory: the one-device baseline trained
// the same steps in this process, read from its model and optimizer directly (not through
// the checkpoint's naming of them), tensor by tensor: parameters, the optimizer's moments and
// step count, the expert bias, each within the verdict's parameter bound (moments: the larger
// of it and the gradient bound). A round trip alone cannot see a mistake made the same way on
// save and on load (two state tensors saved from one buffer); this can.
template <class T> std::string state_off_baseline(const Scenario& s, const ckpt::UnshardedState& saved) {
  BaselineRun<T> base(s);
  for (int64_t t = 0; t < s.steps; ++t) (void)base.step(t);
  const Precision prec = s.model.precision();
  const double pb = tolerance_for(prec, Quantity::parameter).norm_rel;
  const double mb = std::max(pb, tolerance_for(prec, Quantity::gradient).norm_rel);
  struct Expect {
    std::string name, group;  // group: the kind of state and the family, as the verdict's rows
    const T* data;
    int64_t n;
    double bound;
  };
  std::vector<Expect> want;
  const auto& P = base.model().params;
  for (size_t p = 0; p < P.specs.size(); ++p) {
    const std::string fam(family_name(P.specs[p].family));
    want.push_back({P.specs[p].name, "param " + fam, P.tensors[p].ptr(), P.tensors[p].numel(), pb});
    const auto& m = base.optimizer().first_moment().tensors.at(p);
    want.push_back({"optim.m." + P.specs[p].name, "optim.m " + fam, m.ptr(), m.numel(), mb});
    if (base.optimizer().has_second_moment()) {
      const auto& v = base.optimizer().second_moment().tensors.at(p);
      want.push_back({"optim.v." + P.specs[p].name, "optim.v " + fam, v.ptr(), v.numel(), mb});
    }
  }
  const auto& bias = base.model().expert_bias;
  for (size_t l = 0; l < bias.size(); ++l)
    want.push_back({"expert_bias.layers." + std::to_string(s.model.dense_layers + static_cast<int64_t>(l)),
                    "expert_bias", bias[l].data(), static_cast<int64_t>(bias[l].size()), pb});
  auto find = [&](const std::string& n) -> const ckpt::WholeTensor* {
    for (const auto& x : saved.tensors)
      if (x.name == n) return &x;
    return nullptr;
  };
  std::string why;
  if (const ckpt::WholeTensor* st = find("optim.step");
      st == nullptr || st->dtype() != DType::i64 || *static_cast<const int64_t*>(st->data()) != s.steps)
    why += "STEP optim.step is not " + std::to_string(s.steps) + "\n";
  // normwise per group, as the verdict's family rows: a tensor whose true value is all but
  // zero (a gradient that cancels) has no relative error of its own
  std::map<std::string, std::pair<double, double>> sums;  // group: (sum d^2, sum r^2)
  std::map<std::string, double> bounds;
  for (const Expect& e : want) {
    const ckpt::WholeTensor* w = find(e.name);
    if (w == nullptr || w->dtype() != dtype_of<T>() || numel(w->shape()) != e.n) {
      why += "MISSING " + e.name + " (in memory; absent from the checkpoint or of another size)\n";
      continue;
    }
    const T* got = static_cast<const T*>(w->data());
    auto& [d2, r2] = sums[e.group];
    bounds[e.group] = e.bound;
    for (int64_t i = 0; i < e.n; ++i) {
      const double g = static_cast<double>(got[i]), r = static_cast<double>(e.data[i]);
      d2 += (g - r) * (g - r), r2 += r * r;
    }
  }
  for (const auto& [group, dr] : sums) {
    const double rel = dr.second > 0 ? std::sqrt(dr.first / dr.second) : std::sqrt(dr.first);
    char num[96];
    std::snprintf(num, sizeof num, "%.3e from the state in memory (bound %.1e)", rel, bounds[group]);
    if (!(rel <= bounds[group])) why += "OFF " + group + ": normwise " + num + "\n";
  }
  return why;
}

// 7. A checkpoint saved under one random layout holds the training state in memory (within
// the verdict's bounds of the one-device baseline's), and loaded under another (any folding mode,
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
  if (std::filesystem::exists(a + "/metadata.json")) {  // what was saved is what was in memory
    const ckpt::UnshardedState sa = ckpt::read_unsharded(a);
    why = c.save.model.dtype == DType::f64 ? state_off_baseline<double>(c.save, sa)
                                           : state_off_baseline<float>(c.save, sa);
  }
  if (!std::filesystem::exists(a + "/metadata.json"))
    why = "the saving run wrote no checkpoint (exit " + std::to_string(saved.rc) + ")\n" + saved.log.substr(0, 2000);
  else if (!std::filesystem::exists(b + "/metadata.json"))
    why +=
        "the loading run wrote no checkpoint (exit " + std::to_string(loaded.rc) + ")\n" + loaded.log.substr(0, 2000);
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
