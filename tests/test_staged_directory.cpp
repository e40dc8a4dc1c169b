// io/staged_directory: an export's files replace a directory's as one set. Committed, every staged
// file is in the directory (replacing the old of the same name, others left alone) and the
// staging folder is gone; abandoned (an error on the way), the directory keeps its old files and
// the staging folder is gone; a staging folder left by a killed export is removed and said.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "io/staged_directory.hpp"
#include "io/text_file.hpp"

namespace shardrl {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class StagedDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("shardrl_staged_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(StagedDirectoryTest, CommitMovesEveryFileInAndLeavesTheOthers) {
  const fs::path dir = root_ / "export";
  fs::create_directories(dir);
  write_text_atomically(dir / "config.json", "old config");
  write_text_atomically(dir / "README.md", "the user's");
  {
    StagedDirectory staged(dir);
    EXPECT_FALSE(staged.stale_removed());
    EXPECT_EQ(staged.staging(), dir / StagedDirectory::kStagingName);
    write_text_atomically(staged.staging() / "model.safetensors", "new weights");
    write_text_atomically(staged.staging() / "config.json", "new config");
    // Nothing is in place before the commit.
    EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
    EXPECT_EQ(slurp(dir / "config.json"), "old config");
    staged.commit("config.json");
  }
  EXPECT_EQ(slurp(dir / "model.safetensors"), "new weights");
  EXPECT_EQ(slurp(dir / "config.json"), "new config");
  EXPECT_EQ(slurp(dir / "README.md"), "the user's");
  EXPECT_FALSE(fs::exists(dir / StagedDirectory::kStagingName));
}

TEST_F(StagedDirectoryTest, ADirectoryThatDidNotExistIsCreated) {
  const fs::path dir = root_ / "a" / "b";
  StagedDirectory staged(dir);
  write_text_atomically(staged.staging() / "adapter_config.json", "{}");
  staged.commit("adapter_config.json");
  EXPECT_EQ(slurp(dir / "adapter_config.json"), "{}");
  EXPECT_FALSE(fs::exists(dir / StagedDirectory::kStagingName));
}

TEST_F(StagedDirectoryTest, AnAbandonedExportLeavesTheOldFiles) {
  const fs::path dir = root_ / "export";
  fs::create_directories(dir);
  write_text_atomically(dir / "model.safetensors", "old weights");
  write_text_atomically(dir / "config.json", "old config");
  try {
    StagedDirectory staged(dir);
    write_text_atomically(staged.staging() / "model.safetensors", "new weights");
    throw std::runtime_error("the disk filled before config.json");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(slurp(dir / "model.safetensors"), "old weights");
  EXPECT_EQ(slurp(dir / "config.json"), "old config");
  EXPECT_FALSE(fs::exists(dir / StagedDirectory::kStagingName));
}

TEST_F(StagedDirectoryTest, AStagingFolderLeftByAKilledExportIsRemoved) {
  const fs::path dir = root_ / "export";
  fs::create_directories(dir / StagedDirectory::kStagingName);
  write_text_atomically(dir / StagedDirectory::kStagingName / "model.safetensors", "half");
  StagedDirectory staged(dir);
  EXPECT_TRUE(staged.stale_removed());
  write_text_atomically(staged.staging() / "config.json", "new config");
  staged.commit("config.json");
  EXPECT_FALSE(fs::exists(dir / "model.safetensors")) << "the killed export's file was not moved in";
  EXPECT_EQ(slurp(dir / "config.json"), "new config");
}

}  // namespace
}  // namespace shardrl
