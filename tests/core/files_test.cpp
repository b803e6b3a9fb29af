// Regular files only, never a blocking open, and outputs that are parity's (core/files.h).
#include "core/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"

namespace parity {
namespace {

namespace fs = std::filesystem;

class Files : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "parity-files-XXXXXX").string();
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    dir_ = t;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path(name)) << text; }
  fs::path dir_;
};

template <class E, class F> std::string message_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

TEST_F(Files, ReadsARegularFileWhole) {
  write("a.json", "{\"x\": 1}");
  EXPECT_EQ(read_regular(path("a.json"), 100, Blame::user_input, "scenario file"), "{\"x\": 1}");
  EXPECT_EQ(regular_file_problem(path("a.json"), 100), "");
  EXPECT_FALSE(read_regular_if_exists(path("none.json"), 100, Blame::user_input, "scenario file").has_value());
  EXPECT_EQ(regular_file_problem(path("none.json"), 100), "is missing");
}

// Once a FIFO hung every reader for ever: refused at once, before the open can wait.
TEST_F(Files, RefusesAFifoWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path("f").c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string user =
      message_of<ConfigError>([&] { read_regular(path("f"), 100, Blame::user_input, "scenario file"); });
  const std::string damaged =
      message_of<IoError>([&] { open_regular(path("f"), 100, Blame::damaged_data, "checkpoint rank file"); });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_NE(user.find("/f: scenario file is a FIFO (named pipe), not a regular file"), std::string::npos) << user;
  EXPECT_NE(damaged.find("/f: checkpoint rank file is a FIFO (named pipe)"), std::string::npos) << damaged;
}

TEST_F(Files, RefusesDevicesDirectoriesAndSizesPastTheLimit) {
  fs::create_symlink("/dev/zero", path("z"));
  EXPECT_EQ(regular_file_problem(path("z"), 100), "is a character device, not a regular file");
  fs::create_directory(path("d"));
  EXPECT_EQ(regular_file_problem(path("d"), 100), "is a directory, not a regular file");
  write("big", std::string(101, 'x'));
  EXPECT_EQ(regular_file_problem(path("big"), 100), "larger than 100 bytes, the limit (101 bytes)");
  EXPECT_NE(message_of<ConfigError>([&] { read_regular(path("z"), 100, Blame::user_input, "golden file"); })
                .find("golden file is a character device"),
            std::string::npos);
}

// Outputs: a directory parity did not write is refused; its own (the marker) or an empty one
// is reused; a missing one needs its parent; nothing is created by a check.
TEST_F(Files, OutputDirectoriesMustBeParitys) {
  fs::create_directory(path("foreign"));
  write("foreign/notes.txt", "precious");
  EXPECT_NE(message_of<ConfigError>([&] { check_output_dir("--out", path("foreign")); })
                .find("is a non-empty directory that parity did not write"),
            std::string::npos);
  write("file", "precious");
  EXPECT_NE(message_of<ConfigError>([&] { check_output_dir("--out", path("file")); })
                .find("is a regular file where a directory is expected"),
            std::string::npos);
  EXPECT_NE(message_of<ConfigError>([&] { check_output_dir("--out", path("no/such")); }).find("does not exist"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(path("no")));
  prepare_output_dir("--out", path("mine"));
  write("mine/x.log", "parity's");
  EXPECT_NO_THROW(check_output_dir("--out", path("mine")));  // its own: reused
  fs::create_directory(path("empty"));
  EXPECT_NO_THROW(check_output_dir("--ckpt", path("empty"), DirKind::checkpoint));
  // A checkpoint: its metadata.json names the format; the marker alone does not make one.
  EXPECT_THROW(check_output_dir("--ckpt", path("mine"), DirKind::checkpoint), ConfigError);
  fs::create_directory(path("ck"));
  write("ck/metadata.json", "{\n \"format\": \"parity-checkpoint\",\n \"version\": 2\n}\n");
  write("ck/rank0.safetensors", "bytes");
  EXPECT_NO_THROW(check_output_dir("--ckpt", path("ck"), DirKind::checkpoint));
  EXPECT_TRUE(is_checkpoint_dir(path("ck")));
}

TEST_F(Files, OutputFilesMustBeParitys) {
  write("r.json", "precious");
  EXPECT_NE(message_of<ConfigError>([&] { check_output_file("--report", path("r.json"), "\"compared_steps\":"); })
                .find("exists and is not a file parity wrote"),
            std::string::npos);
  write("own.json", "{\n  \"backend\": \"gloo\",\n  \"compared_steps\": 2\n}\n");
  EXPECT_NO_THROW(check_output_file("--report", path("own.json"), "\"compared_steps\":"));
  EXPECT_NO_THROW(check_output_file("--report", path("new.json"), "\"compared_steps\":"));
  EXPECT_NE(message_of<ConfigError>([&] { check_output_file("--junit", path("nonexistent/x.xml"), "<?xml"); })
                .find("its directory"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(path("nonexistent")));
  ASSERT_EQ(::mkfifo(path("fifo.xml").c_str(), 0600), 0);
  EXPECT_NE(message_of<ConfigError>([&] { check_output_file("--junit", path("fifo.xml"), "<?xml"); })
                .find("is a FIFO (named pipe) where a file is expected"),
            std::string::npos);
}

}  // namespace
}  // namespace parity
