// The PARITY_* settings table (core/knobs.h): a name outside it cannot be read, and every
// PARITY_* name the sources quote is a row of it (a setting added with a getenv of its own,
// outside the table, fails here), read through knob() rather than std::getenv.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>

#include "core/knobs.h"

namespace parity::knobs_test {
namespace {

namespace fs = std::filesystem;

TEST(Knobs, ANameOutsideTheTableIsALogicError) {
  EXPECT_THROW((void)knob("PARITY_NO_SUCH_SETTING"), std::logic_error);
  EXPECT_NO_THROW((void)knob("PARITY_COMM_TIMEOUT_MS"));
  std::set<std::string_view> names;
  for (const Knob& k : knobs()) {
    EXPECT_TRUE(names.insert(k.name).second) << k.name << " twice";
    EXPECT_EQ(k.name.rfind("PARITY_", 0), 0u) << k.name;
    EXPECT_FALSE(k.what.empty()) << k.name;
  }
}

TEST(Knobs, EverySettingTheSourcesNameIsInTheTable) {
  const std::set<std::string> not_settings = {"PARITY_COMMIT"};  // read by the build (cmake), not at run time
  std::set<std::string> table;
  for (const Knob& k : knobs()) table.emplace(k.name);
  const std::regex quoted("\"(PARITY_[A-Z0-9_]+)\""), direct("getenv\\(\"PARITY_");
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(PARITY_SOURCE_DIR) / "src")) {
    const std::string ext = e.path().extension().string();
    if (ext != ".h" && ext != ".cpp") continue;
    std::ifstream in(e.path());
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    ++files;
    for (std::sregex_iterator m(text.begin(), text.end(), quoted), end; m != end; ++m) {
      const std::string name = (*m)[1];
      if (!not_settings.count(name)) {
        EXPECT_TRUE(table.count(name)) << name << " (" << e.path() << ") is no row";
      }
    }
    if (e.path().filename() != "knobs.cpp") {
      EXPECT_FALSE(std::regex_search(text, direct)) << e.path() << " reads a PARITY_* setting with getenv: knob()";
    }
  }
  EXPECT_GT(files, 100);
}

}  // namespace
}  // namespace parity::knobs_test
