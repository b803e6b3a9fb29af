// The collective save and load across real rank processes: ckpt_worker under
// proc::launch_main (gloo). One launch per layout; each load counts #wrong over all ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>

#include "ckpt_helpers.h"
#include "proc/launch.h"

namespace parity::ckpt {
namespace {

using testing::Scratch;

class AcrossRanks : public Scratch {
 protected:
  int launch(int n, const std::vector<std::string>& args, std::vector<std::string> env = {},
             std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    proc::LaunchOptions o;
    o.nproc = n;
    o.timeout = timeout;
    o.grace = std::chrono::seconds(1);
    o.kill_after = std::chrono::milliseconds(500);
    o.log_dir = path("logs");
    o.store_root = path("store");
    o.extra_env = std::move(env);
    std::filesystem::create_directories(o.store_root);
    std::vector<std::string> cmd{PARITY_CKPT_WORKER};
    cmd.insert(cmd.end(), args.begin(), args.end());
    const int rc = proc::launch_main(o, cmd);
    log_ = testing_log(n);
    return rc;
  }
  std::string testing_log(int n) const {
    std::string s;
    for (int r = 0; r < n; ++r) {
      std::ifstream in(path("logs") + "/rank" + std::to_string(r) + ".log");
      std::stringstream ss;
      ss << in.rdbuf();
      s += "--- rank " + std::to_string(r) + "\n" + ss.str();
    }
    return s;
  }
  std::string log_;
};

TEST_F(AcrossRanks, SameLayoutW4) {
  ASSERT_EQ(launch(4, {"save", path("c"), "dps2.tp2", "1"}), 0) << log_;
  ASSERT_EQ(launch(4, {"load", path("c"), "dps2.tp2", "1"}), 0) << log_;
  EXPECT_NE(log_.find("#wrong 0"), std::string::npos) << log_;
}

TEST_F(AcrossRanks, W1ToFsdp8AndBack) {
  ASSERT_EQ(launch(1, {"save", path("a"), "dps1", "4"}), 0) << log_;
  ASSERT_EQ(launch(8, {"resave", path("a"), path("b"), "dps8", "4"}), 0) << log_;
  ASSERT_EQ(launch(1, {"load", path("b"), "dps1", "4"}), 0) << log_;
}

TEST_F(AcrossRanks, AWrongSaltIsCaught) {
  // The check can fire: loading salt 1's checkpoint while expecting salt 2 counts wrong elements.
  ASSERT_EQ(launch(2, {"save", path("c"), "dps2", "1"}), 0) << log_;
  EXPECT_EQ(launch(2, {"load", path("c"), "dps2", "2"}), 1) << log_;
  EXPECT_EQ(log_.find("#wrong 0"), std::string::npos) << log_;
}

TEST_F(AcrossRanks, ARankKilledDuringSaveLeavesThePreviousCheckpoint) {
  ASSERT_EQ(launch(4, {"save", path("c"), "dps2.tp2", "1"}), 0) << log_;
  const auto before = testing::snapshot(path("c"));
  // rank 2 dies after writing its file; rank 0 dies after metadata.json, before the commit
  for (const char* crash : {"PARITY_CKPT_CRASH=2:rank_file", "PARITY_CKPT_CRASH=0:metadata"}) {
    EXPECT_NE(launch(4, {"save", path("c"), "dps2.tp2", "2"}, {crash}, std::chrono::seconds(2)), 0) << crash;
    EXPECT_NE(log_.find("exits at"), std::string::npos) << log_;
    EXPECT_EQ(testing::snapshot(path("c")), before) << crash;
    EXPECT_EQ(testing::load_layout_wrong(path("c"), "dps4", 1), 0) << crash;
  }
  // the next save clears the leftovers and replaces the checkpoint
  ASSERT_EQ(launch(4, {"save", path("c"), "dps2.tp2", "2"}), 0) << log_;
  ASSERT_EQ(launch(2, {"load", path("c"), "dps2", "2"}), 0) << log_;
  for (const auto& e : std::filesystem::directory_iterator(root_))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace parity::ckpt
