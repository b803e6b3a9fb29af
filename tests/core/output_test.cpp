// core/output.h (issue 42): the one safe writer and the lock of an output directory.
#include "core/output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"

namespace parity {
namespace {

namespace fs = std::filesystem;

class Output : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "parity-output-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    dir_ = t;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path(name)) << text; }
  std::string read(const std::string& name) const {
    std::ifstream f(path(name));
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  size_t entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), {})); }
  std::string dir_;
};

template <class E, class F> std::string output_message_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

TEST_F(Output, NeverWritesThroughALinkAtTheOldTemporaryName) {
  write("victim", "precious");
  fs::create_symlink(path("victim"), path("out.json.tmp"));  // what a fixed NAME.tmp would follow
  write("mine.json.tmp", "the user's own");
  write_file_atomically(path("out.json"), "new\n", {}, "test file");
  write_file_atomically(path("mine.json"), "new\n", {}, "test file");
  EXPECT_EQ(read("victim"), "precious");
  EXPECT_EQ(read("mine.json.tmp"), "the user's own");
  EXPECT_EQ(read("out.json"), "new\n");
  EXPECT_TRUE(fs::is_symlink(path("out.json.tmp")));
  EXPECT_EQ(entries(), 5u);  // no temporary left
}

TEST_F(Output, ALongNameStillGetsATemporaryName) {
  const std::string name(250, 'n');  // ".NAME.parity-tmp-..." in full would pass NAME_MAX (255)
  write_file_atomically(path(name), "x", {}, "test file");
  EXPECT_EQ(read(name), "x");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(Output, RefusesWhatIsNotParitys) {
  write("user.txt", "precious");
  EXPECT_NE(output_message_of<ConfigError>([&] {
              write_file_atomically(path("user.txt"), "x", Replace{"parity-mark"}, "test file", "--out");
            }).find("--out: " + path("user.txt") + ": exists and is not a file parity wrote"),
            std::string::npos);
  EXPECT_EQ(read("user.txt"), "precious");
  EXPECT_EQ(entries(), 1u);  // the temporary file removed
  write_file_atomically(path("user.txt"), "x", Replace{"parity-mark", /*force=*/true}, "test file");
  EXPECT_EQ(read("user.txt"), "x");
  write("own.txt", "a parity-mark b");
  EXPECT_NO_THROW(write_file_atomically(path("own.txt"), "y", Replace{"parity-mark"}, "test file"));
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  EXPECT_NE(output_message_of<ConfigError>([&] {
              write_file_atomically(path("fifo"), "x", Replace{"", true}, "test file");
            }).find("is a FIFO (named pipe) where a file is expected"),
            std::string::npos);
  fs::create_symlink("/dev/null", path("null"));
  EXPECT_NE(output_message_of<ConfigError>([&] { write_file_atomically(path("null"), "x", Replace{"", true}, "f"); })
                .find("is a symbolic link"),
            std::string::npos);
  EXPECT_TRUE(fs::is_symlink(path("null")));
  EXPECT_NE(output_message_of<ConfigError>([&] {
              write_file_atomically(path("own.txt"), "x", Replace{.signature = {}, .force = false, .create_only = true},
                                    "f");
            }).find("exists"),
            std::string::npos);
}

TEST_F(Output, OneWriterPerDirectory) {
  {
    const DirLock first("--out", dir_);
    EXPECT_TRUE(first.held());
    const std::string pid = std::to_string(::getpid());  // in 20 columns: never empty while held
    EXPECT_EQ(read(kLockFile), pid + std::string(20 - pid.size(), ' ') + "\n");
    // a second open of the lock file is another writer, even in this process
    EXPECT_NE(output_message_of<ConfigError>([&] { DirLock("--out", dir_); })
                  .find(dir_ + ": is being written by another parity (pid " + std::to_string(::getpid()) + ")"),
              std::string::npos);
  }
  EXPECT_NO_THROW(DirLock("--out", dir_));  // released with its holder
  fs::remove(path(kLockFile));
  fs::create_symlink("/dev/null", path(kLockFile));
  EXPECT_NE(output_message_of<ConfigError>([&] { DirLock("--out", dir_); }).find("is a symbolic link"),
            std::string::npos);
}

}  // namespace
}  // namespace parity
