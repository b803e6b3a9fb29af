// The gate measures its own sensitivity (issue 25): for every row kind a fault can reach
// (loss, grad_norm, every grad FAMILY, every param FAMILY) and every precision, a fault just
// above the row's bound must FAIL that row and one just below it must PASS the run. A bound
// loosened or tightened by more than 2x fails here. The faults are the harness's own
// (PARITY_FAULT scales what the layout reports, just before the compare): a factor 1 + e
// moves a row's normwise error by e, on top of the layout's own rounding.
//
// The bound the row prints is checked too, against the fixed table written here from
// docs/verdict.md (fp64 / fp32; bf16's are measured by the rounding twin): a table loosened
// in the code fails here even though the faults above follow the printed bound.
//
// Each run is fsdp2_tp2 for one step (the bounds are the step-0 bounds the row prints).
// Tensor rows have a second measure (far elements, docs/verdict.md): a uniform scale 1 + e
// makes every element far once e passes about 2^-11, so a grad row's smallest failing scale
// is the smaller of its normwise bound and 2^-11 (measured: fp32 layernorm 1.26e-3 and router
// 2e-3 fail at half their bound, through this measure), and "just below" is half of that.
// A param row's far measure is taken on the update: scaling the parameters by 1 + e moves
// the update by e |p| / |update|, which in fp32 and bf16 is far long before e reaches the
// normwise bound. There the fault above the bound must fail, and the one below may fail only by
// the far measure: its normwise error within the bound, wherever the layout's own error (the
// clean row's norm_rel) leaves room for half the bound. (Measured, fp8-delayed param attention at
// half its 1.60e-3 bound: norm_rel 8.0e-4, 90% of the update's elements far against 5%.)
//
// The other precisions (issue 41, 48): bf16-reduce-bf16, fp16, fp8, fp8-delayed on the same
// scenario (its kv_heads 4 is a multiple of tp 2, which fp8 requires; fp16's exact loss_scale row
// passes in the clean run and no fault here reaches it, so fp16 needs no other scenario). Their bounds
// are the twin's, as bf16's: no table. Param rows are far-first as above (measured, fault at half
// the bound failing by far: bf16-reduce-bf16 all 8 families, fp16 all but head, fp8 embedding,
// layernorm and router, fp8-delayed all but head). Under bf16-reduce-bf16 the layout's own error
// leaves no room for half the bound in three param rows: their bound is mostly the update the
// bf16-reduced gradients explain, and the clean run's norm_rel is 98.5% (dense_mlp 4.09e-3 of
// 4.15e-3), 98.0% (shared_experts 5.91e-3 of 6.03e-3) and 98.7% (head 4.68e-3 of 4.74e-3) of it;
// there the row must fail by one of the two measures. Every other row holds at half the bound.
// Their loss and param floors are checked against the fixed values instead (the loss u / 64, u
// the storage's unit roundoff, 2^-11 under fp16 and 2^-8 else; parameters 1024 fp32 ulps, 2^-14),
// widened as the table by sqrt(256 / elements): a floor loosened in the code fails here.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

namespace parity {
namespace {

namespace fs = std::filesystem;

int run(const std::string& env, const std::string& args) {
  const std::string cmd = env + " " + PARITY_BINARY + " run " + PARITY_SOURCE_DIR +
                          "/scenarios/fsdp2_tp2.json --steps 1 " + args + " >/dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

nlohmann::json report(const fs::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

struct Kind {
  std::string quantity, subject, fault;  // fault: the PARITY_FAULT prefix, e.g. "scale_grad:router"
};

const nlohmann::json* find_row(const nlohmann::json& rep, const Kind& k) {
  for (const auto& r : rep["rows"])
    if (r["quantity"] == k.quantity && (k.subject.empty() || r["subject"] == k.subject)) return &r;
  return nullptr;
}

void calibrate(const std::string& precision) {
  const fs::path dir = fs::temp_directory_path() / ("parity_calibration_" + precision + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string p = "--precision " + precision + " --report ";
  ASSERT_EQ(run("", p + (dir / "clean.json").string()), 0) << "the clean run fails: nothing to calibrate";
  const nlohmann::json clean = report(dir / "clean.json");
  std::vector<Kind> kinds = {{"loss", "", "scale_loss:all"}, {"grad_norm", "", "scale_grad_norm:all"}};
  for (const auto& r : clean["rows"])
    if (r["quantity"] == "grad" || r["quantity"] == "param")
      kinds.push_back({r["quantity"], r["subject"],
                       std::string(r["quantity"] == "grad" ? "scale_grad:" : "scale_param:") +
                           r["subject"].get<std::string>()});
  ASSERT_GE(kinds.size(), 10u);
  // docs/verdict.md's table: floor x max(1, sqrt(256 / elements)); grad_norm: its largest grad's
  auto table = [&](const std::string& q) {
    const bool f64 = precision == "fp64";
    if (q == "loss") return f64 ? 1e-13 : 1e-5;
    if (q == "grad") return f64 ? 1e-11 : 1e-3;
    return f64 ? 1e-10 : 1e-3;  // param
  };
  double grad_cap = 0;
  auto cap_of = [&](const nlohmann::json& r) {
    const std::string q = r["quantity"];
    const double n = r["compared"].get<double>();
    return table(q) * (n > 0 && n < 256 ? std::sqrt(256 / n) : 1.0);
  };
  for (const auto& r : clean["rows"])
    if (r["quantity"] == "grad") grad_cap = std::max(grad_cap, cap_of(r));
  std::printf("%-10s %-24s %10s %10s %10s %12s\n", "precision", "row", "bound", "x2 above", "below", "(fault)");
  for (const Kind& k : kinds) {
    const nlohmann::json* row = find_row(clean, k);
    ASSERT_NE(row, nullptr) << k.quantity << " " << k.subject;
    const double bound = (*row)["tol"].get<double>();
    ASSERT_GT(bound, 0) << k.quantity << " " << k.subject;
    if (precision == "fp64" || precision == "fp32") {  // the others' bounds are measured by the twin
      // a param row also allows the update the gradients taken explain (tolerance.h with_explained)
      const double cap = (k.quantity == "grad_norm" ? grad_cap : cap_of(*row)) + row->value("explained", 0.0);
      EXPECT_LE(bound, cap * (1 + 1e-9)) << k.quantity << " " << k.subject << ": looser than docs/verdict.md's table";
    } else if (k.quantity == "loss" || k.quantity == "param") {  // the twin's floors (tolerance.cpp noise_floor)
      const double u = precision == "fp16" ? 0x1p-11 : 0x1p-8, n = (*row)["compared"].get<double>();
      const double floor = (k.quantity == "loss" ? u / 64 : 0x1p-14) * (n > 0 && n < 256 ? std::sqrt(256 / n) : 1.0);
      EXPECT_LE((*row)["floor"].get<double>(), floor * (1 + 1e-9))
          << k.quantity << " " << k.subject << ": a floor looser than docs/precision.md's (u / 64, 1024 fp32 u)";
    }
    auto with = [&](double e, const std::string& name) {
      char f[160];
      std::snprintf(f, sizeof f, "PARITY_FAULT=%s:%.17g", k.fault.c_str(), 1 + e);
      const fs::path file = dir / (name + ".json");
      const int rc = run(f, p + file.string());
      std::string verdict = "none";
      nlohmann::json got;
      if (fs::exists(file)) {
        const nlohmann::json rep = report(file);
        if (const nlohmann::json* r = find_row(rep, k)) {
          verdict = (*r)["verdict"].get<std::string>();
          got = *r;
        }
      }
      fs::remove(file);
      return std::tuple{rc, verdict, got};
    };
    const auto [rc_above, above, row_above] = with(2 * bound, "above");
    const double smallest = k.quantity == "grad" ? std::min(bound, 0x1p-11) : bound;
    const auto [rc_below, below, row_below] = with(smallest / 2, "below");
    const std::string name = k.quantity + (k.subject.empty() ? "" : " " + k.subject);
    std::printf("%-10s %-24s %10.2e %10s %10s %12.2e\n", precision.c_str(), name.c_str(), bound, above.c_str(),
                below.c_str(), smallest / 2);
    EXPECT_EQ(rc_above, 1) << name << ": a fault of twice the bound passed";
    EXPECT_EQ(above, "FAIL") << name;
    const bool far_first = k.quantity == "param" && precision != "fp64";  // see the header
    if (!far_first || below == "ok") {
      EXPECT_EQ(rc_below, 0) << name << ": a fault of half the bound failed";
      EXPECT_EQ(below, "ok") << name;
    } else {  // the normwise measure holds at half the bound where the layout's own error leaves room for it
      ASSERT_EQ(below, "FAIL") << name;
      const double own = (*row)["norm_rel"].get<double>(), got = row_below["norm_rel"].get<double>();
      const bool far = row_below["far"].get<double>() > row_below["far_bound"].get<double>();
      if (own + smallest / 2 <= bound) {
        EXPECT_LE(got, bound) << name << ": half the bound failed normwise (own error " << own << ")";
        EXPECT_TRUE(far) << name << ": failed at half the bound, not by the far measure";
      } else {
        EXPECT_TRUE(far || got > bound) << name << ": failed at half the bound by neither measure";
      }
    }
  }
  fs::remove_all(dir);
}

TEST(Calibration, EveryRowFailsJustAboveItsBoundAndPassesJustBelowFp64) { calibrate("fp64"); }
TEST(Calibration, EveryRowFailsJustAboveItsBoundAndPassesJustBelowFp32) { calibrate("fp32"); }
TEST(Calibration, EveryRowFailsJustAboveItsBoundAndPassesJustBelowBf16) { calibrate("bf16"); }
TEST(Calibration, EveryRowFailsJustAboveItsBoundAndPassesJustBelowBf16ReduceBf16) { calibrate("bf16-reduce-bf16"); }
TEST(Calibration, EveryRowFailsJustAboveItsBoundAndPassesJustBelowFp16) { calibrate("fp16"); }
TEST(Calibration, EveryRowFailsJustAboveItsBoundAndPassesJustBelowFp8) { calibrate("fp8"); }
TEST(Calibration, EveryRowFailsJustAboveItsBoundAndPassesJustBelowFp8Delayed) { calibrate("fp8-delayed"); }

}  // namespace
}  // namespace parity
