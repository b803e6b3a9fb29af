// Activation recompute (layout.recompute, parallel/recompute.h) across real ranks:
// recompute_worker under proc::launch_main (gloo). Each layout runs under recompute none,
// full, attention and mlp, and every fp64 number of every step (losses, grad norm, gradient
// and parameter shards, expert bias, token counts, routing) must be the same bytes; the
// layers must hold fewer bytes for the backward with recompute; and a changed saved input
// must make the recomputed routing's check fire, naming the layer and a token.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>
#include <unistd.h>

#include "proc/launch.h"

namespace parity {
namespace {

struct Launched {
  int code = -1;
  std::string rank0_log;
};

Launched launch(int n, const std::vector<std::string>& args) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "parity-recompute-test-XXXXXX").string();
  const std::string root = mkdtemp(tmpl.data());
  proc::LaunchOptions o;
  o.nproc = n;
  o.backend = comm::Backend::gloo;
  o.timeout = std::chrono::seconds(120);
  o.log_dir = root + "/logs";
  o.store_root = root + "/store";
  o.mpirun = PARITY_MPIRUN;
  std::filesystem::create_directories(o.store_root);
  std::vector<std::string> argv{PARITY_RECOMPUTE_WORKER};
  argv.insert(argv.end(), args.begin(), args.end());
  Launched r;
  r.code = proc::launch_main(o, argv);
  std::ifstream log(o.log_dir + "/rank0.log");
  std::stringstream ss;
  ss << log.rdbuf();
  r.rank0_log = ss.str();
  std::filesystem::remove_all(root);
  return r;
}

std::string scenario(const std::string& name) {
  return std::string(PARITY_SOURCE_DIR) + "/scenarios/" + name + ".json";
}

// The activation bytes a mode's line reports (summed over ranks).
double activation_bytes(const std::string& log, const std::string& mode) {
  const std::regex re("recompute " + mode + " +bitwise: .* activation bytes ([0-9]+)");
  std::smatch m;
  return std::regex_search(log, m, re) ? std::stod(m[1]) : -1;
}

void expect_bitwise(const std::string& name, int world) {
  const Launched r = launch(world, {scenario(name), "2"});
  EXPECT_EQ(r.code, 0) << r.rank0_log;
  EXPECT_NE(r.rank0_log.find("recompute: OK"), std::string::npos) << r.rank0_log;
  for (const char* mode : {"full", "attention", "mlp"})
    EXPECT_NE(r.rank0_log.find(std::string("recompute ") + mode), std::string::npos) << r.rank0_log;
  // recompute drops what the layers held: full holds the least, each selective one less than none
  const double none = activation_bytes(r.rank0_log, "none"), full = activation_bytes(r.rank0_log, "full");
  const double attn = activation_bytes(r.rank0_log, "attention"), mlp = activation_bytes(r.rank0_log, "mlp");
  EXPECT_GT(none, 0) << r.rank0_log;
  EXPECT_LT(full, attn) << r.rank0_log;
  EXPECT_LT(full, mlp) << r.rank0_log;
  EXPECT_LT(attn, none) << r.rank0_log;
  EXPECT_LT(mlp, none) << r.rank0_log;
  EXPECT_GT(full, 0) << r.rank0_log;  // the layers' inputs stay
}

// SP with cross-lane EP, two micro-batches, an uneven batch (ranks with no sequence)
TEST(Recompute, BitwiseTp2SpCrossLaneEpUneven) { expect_bitwise("w4_tp2_sp_ep4_uneven_b3_mb2", 4); }
// TP without SP (the dispatch split of the copies), FSDP, cross-lane EP
TEST(Recompute, BitwiseFsdp2Tp2Ep4) { expect_bitwise("w4_tp2_ep4", 4); }
// EP borrowed from FSDP (dp2ep folding), clipping, an uneven batch
TEST(Recompute, BitwiseFsdp4Ep4Clip) { expect_bitwise("fsdp4_ep4_uneven_b3_clip", 4); }
// context parallel: the K/V all-gather and the aux loss's gathers recomputed
TEST(Recompute, BitwiseCp2Tp2Sp) { expect_bitwise("cp2_tp2_sp", 4); }
TEST(Recompute, BitwiseHsdp2Cp2Ep2) { expect_bitwise("hsdp2x1_cp2_ep2", 4); }

// The comparison can fail: one ulp of one saved input of the attention recompute shows.
TEST(Recompute, OneUlpInTheSavedInputDiffers) {
  const Launched r = launch(4, {scenario("w4_tp2_ep4"), "1", "one-ulp"});
  EXPECT_EQ(r.code, 1) << r.rank0_log;
  EXPECT_NE(r.rank0_log.find("recompute attention DIFFER"), std::string::npos) << r.rank0_log;
  EXPECT_NE(r.rank0_log.find("recompute full      bitwise"), std::string::npos) << r.rank0_log;
  EXPECT_NE(r.rank0_log.find("recompute: DIFFER"), std::string::npos) << r.rank0_log;
}

void expect_route_check(const std::string& mode) {
  const Launched r = launch(4, {scenario("w4_tp2_ep4"), "route-check", mode});
  EXPECT_EQ(r.code, 0) << r.rank0_log;
  EXPECT_NE(r.rank0_log.find("route check fired on 4 of 4 ranks"), std::string::npos) << r.rank0_log;
  EXPECT_NE(r.rank0_log.find("layers.1: activation recompute: the recomputed MoE routing differs from the first "
                             "forward's"),
            std::string::npos)
      << r.rank0_log;
}

TEST(Recompute, ChangedSavedInputFailsTheRoutingCheckMlp) { expect_route_check("mlp"); }
TEST(Recompute, ChangedSavedInputFailsTheRoutingCheckFull) { expect_route_check("full"); }

}  // namespace
}  // namespace parity
