// "Did you mean" (src/cli/suggest.h) on its own: the edit distance, which names are close
// enough to suggest, and how a command line is read to find the unknown word.
#include "cli/suggest.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace parity::cli {
namespace {

using Names = std::vector<std::string>;

TEST(Suggest, EditDistanceCountsASwapOfNeighboursAsOne) {
  EXPECT_EQ(edit_distance("matirx", "matrix"), 1u);
  EXPECT_EQ(edit_distance("--stpes", "--steps"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("MATRIX", "matrix"), 0u);  // letters compare without case
  EXPECT_EQ(edit_distance("ca", "abc"), 3u);         // a swap is not followed by an insertion in between
}

TEST(Suggest, OnlyCloseNamesAreSuggested) {
  const Names commands{"run", "dump", "bench", "matrix", "zoo", "cover", "ckpt", "golden", "help", "version"};
  EXPECT_EQ(closest("matirx", commands), Names{"matrix"});
  EXPECT_EQ(closest("mtrix", commands), Names{"matrix"});
  EXPECT_EQ(closest("zo", commands), Names{"zoo"});
  EXPECT_EQ(closest("frobnicate", commands), Names{});
  EXPECT_EQ(closest("x", commands), Names{});  // one letter is close to too much
  EXPECT_EQ(closest("rum", {"run", "dump"}), Names{"run"});
  EXPECT_EQ(closest("cat", {"cut", "bat", "cart"}), (Names{"cut", "bat", "cart"}));  // a tie: all, in order
  EXPECT_EQ(closest("--stpes", {"--steps", "--save-at", "--resume"}), Names{"--steps"});
  // No name within the distance: the ones it begins.
  EXPECT_EQ(closest("--summ", {"--summary", "--summary-title", "--steps"}), (Names{"--summary", "--summary-title"}));
}

class Misspellings : public ::testing::Test {
 protected:
  void SetUp() override {
    app_.add_option("--config", config_);
    CLI::App* run = app_.add_subcommand("run");
    run->add_option("scenario", scenario_);
    run->add_option("--steps", steps_);
    run->add_flag("--golden", golden_);
    CLI::App* ckpt = app_.add_subcommand("ckpt");
    ckpt->add_subcommand("inspect")->add_option("dir", scenario_);
  }
  CLI::App app_;
  std::string scenario_, config_;
  int steps_ = 0;
  bool golden_ = false;
};

TEST_F(Misspellings, AnUnknownCommandOrOptionIsNamedWithItsCommand) {
  auto m = find_misspelling(app_, {"matirx"});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(misspelling_message(*m), "parity: unknown command 'matirx' (`parity help` lists the commands)");
  m = find_misspelling(app_, {"rnu", "S"});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(misspelling_message(*m),
            "parity: unknown command 'rnu'; did you mean 'run'? (`parity help` lists the "
            "commands)");
  m = find_misspelling(app_, {"run", "S", "--golden", "--stpes=3"});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(misspelling_message(*m),
            "parity run: unknown option '--stpes'; did you mean '--steps'? (`parity help "
            "run` lists the options)");
  m = find_misspelling(app_, {"ckpt", "inspetc", "d"});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->path, "parity ckpt");
  EXPECT_EQ(m->suggestions, Names{"inspect"});
}

TEST_F(Misspellings, ValuesPositionalsAndWhatFollowsDashDashAreNotWords) {
  // An option's value is the next word, whatever it is: here no subcommand.
  EXPECT_FALSE(find_misspelling(app_, {"--config", "matirx", "run", "S"}).has_value());
  EXPECT_TRUE(find_misspelling(app_, {"--config=c", "matirx", "run", "S"}).has_value());  // the value attached
  // A word where run takes a positional is one.
  EXPECT_FALSE(find_misspelling(app_, {"run", "--steps", "matirx", "S"}).has_value());
  EXPECT_FALSE(find_misspelling(app_, {"run", "--steps", "-3", "S"}).has_value());
  EXPECT_FALSE(find_misspelling(app_, {"run", "matirx"}).has_value());
  EXPECT_FALSE(find_misspelling(app_, {"run", "S", "--", "--stpes"}).has_value());
  EXPECT_FALSE(find_misspelling(app_, {"ckpt", "inspect", "d", "--help"}).has_value());
}

}  // namespace
}  // namespace parity::cli
