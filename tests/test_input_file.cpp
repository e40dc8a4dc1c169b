// Files the user names must be readable regular files: a directory, a FIFO or a missing file is
// refused by name before it is opened (a directory used to read as an empty config, a FIFO as a
// dataset blocked forever).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/input_file.hpp"

namespace shardrl {
namespace {

namespace fs = std::filesystem;

class InputFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("shardrl_input_file_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string message(const fs::path& p) {
    try {
      read_input_file(p, "config file");
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(InputFile, ARegularFileIsReadWhole) {
  const std::string bytes("x = 1\n\0\xff", 8);   // read as bytes: a NUL and a non-UTF-8 byte survive
  std::ofstream(dir_ / "a.toml", std::ios::binary) << bytes;
  EXPECT_EQ(read_input_file(dir_ / "a.toml", "config file"), bytes);
  EXPECT_EQ(input_file_problem(dir_ / "a.toml"), "");
}

TEST_F(InputFile, DirectoriesFifosAndMissingFilesAreNamed) {
  EXPECT_EQ(message(dir_), "cannot read config file '" + dir_.string() + "': Is a directory");
  EXPECT_EQ(message(dir_ / "none.toml"),
            "cannot read config file '" + (dir_ / "none.toml").string() + "': No such file or directory");
  ASSERT_EQ(::mkfifo((dir_ / "pipe").c_str(), 0600), 0);
  EXPECT_EQ(message(dir_ / "pipe"),
            "cannot read config file '" + (dir_ / "pipe").string() + "': a FIFO (named pipe), not a regular file");
}

}  // namespace
}  // namespace shardrl
