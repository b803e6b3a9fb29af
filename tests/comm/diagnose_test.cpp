// Naming the missing member after a failed collective (comm/diagnose.h), with boards in
// memory: a member silent in this group but stuck in another group's collective is named
// with what it was waiting for, instead of as a member that never arrived.
#include <gtest/gtest.h>

#include <map>

#include "comm/diagnose.h"
#include "core/clock.h"

using namespace parity::comm;
using ms = std::chrono::milliseconds;

using parity::seconds_since;

namespace {

// Notes by rank (group rank for a group board, world rank for the world board).
class MapBoard : public FailureBoard {
 public:
  MapBoard(std::map<int, std::string>& notes, int me) : notes_(notes), me_(me) {}
  void post(const std::string& note) override { notes_[me_] = note; }
  std::optional<std::string> read(int r) override {
    auto it = notes_.find(r);
    if (it == notes_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::map<int, std::string>& notes_;
  int me_;
};

// Peers on another host (pid checks do not apply), with addresses.
std::vector<PeerInfo> remote_peers(size_t n) {
  std::vector<PeerInfo> p(n);
  for (size_t i = 0; i < n; ++i)
    p[i] = {"elsewhere", static_cast<int64_t>(1000 + i), "10.0.0." + std::to_string(i + 1), "", 0};
  return p;
}

}  // namespace

TEST(NameMissing, ASilentMemberIsOneThatNeverArrived) {
  std::map<int, std::string> group;
  MapBoard board(group, 0);
  const std::string out = name_missing(0, {0, 1}, remote_peers(2), board, "allreduce #3", ms(200));
  EXPECT_EQ(out, "missing rank 1 (pid 1001 on elsewhere (10.0.0.2) did not report reaching allreduce #3)");
  EXPECT_EQ(group[0], "allreduce #3");
}

TEST(NameMissing, AMemberStuckInAnotherGroupIsNamedWithWhatItWaitedFor) {
  // Group {0, 1} (world ranks); world rank 1 failed in group{1,3} waiting for rank 3.
  std::map<int, std::string> group, world;
  world[1] =
      "group{1,3} allreduce #9: missing rank 3 (group rank 1) (pid 7 on h3 (10.0.0.4) did not report reaching "
      "allreduce #9)";
  MapBoard board(group, 0), wboard(world, 0);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string out =
      name_missing(0, {0, 1}, remote_peers(2), board, "allreduce #33", ms(3000), {&wboard, "group{0,1}"});
  EXPECT_LT(seconds_since(t0), 1.0) << "a final note ends the wait";
  EXPECT_EQ(out, "missing rank 1 (pid 1001 on elsewhere (10.0.0.2) is stuck in group{1,3} allreduce #9: missing rank 3 "
                 "(group rank 1) (pid 7 on h3 (10.0.0.4) did not report reaching allreduce #9))");
  // This rank's own world note ends up final, for whoever waits on it.
  EXPECT_EQ(world[0], "group{0,1} allreduce #33: " + out);
}

TEST(NameMissing, AShortNoteIsWaitedForUntilTheWindowEnds) {
  std::map<int, std::string> group, world;
  world[1] = "group{1,3} allreduce #9";  // posted, its poster's diagnosis not done yet
  MapBoard board(group, 0), wboard(world, 0);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string out =
      name_missing(0, {0, 1}, remote_peers(2), board, "allreduce #33", ms(300), {&wboard, "group{0,1}"});
  EXPECT_GE(seconds_since(t0), 0.3);
  EXPECT_EQ(out, "missing rank 1 (pid 1001 on elsewhere (10.0.0.2) is stuck in group{1,3} allreduce #9)");
}

TEST(NameMissing, AMemberThatFailedInThisCollectiveIsAVictimNotMissing) {
  std::map<int, std::string> group, world;
  group[1] = "allreduce #3";
  world[1] = "world allreduce #3";
  MapBoard board(group, 0), wboard(world, 0);
  EXPECT_EQ(name_missing(0, {0, 1}, remote_peers(2), board, "allreduce #3", ms(200), {&wboard, "world"}),
            "no member is missing: every member reported a failure");
}
