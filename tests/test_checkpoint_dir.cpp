// io/checkpoint_dir: file names, the commit (partial -> final, latest replaced), reading latest,
// and retention (keep the newest, keep multiples, drop crash leftovers, never drop latest).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "io/checkpoint_dir.hpp"

namespace shardrl {
namespace {

namespace fs = std::filesystem;

class CheckpointDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("shardrl_ckdir_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A checkpoint written and committed, as the save path does.
  void save(std::int64_t iteration, const std::string& content = "data") {
    std::ofstream(checkpoint_partial_path(dir_, iteration), std::ios::binary) << content << iteration;
    commit_checkpoint(dir_, iteration);
  }

  std::set<std::string> files() const {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.insert(e.path().filename().string());
    return names;
  }

  std::string read(const fs::path& p) const {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::set<std::string> committed_names(std::initializer_list<int> iterations) const {
    std::set<std::string> names;
    for (int i : iterations) names.insert(checkpoint_path(dir_, i).filename().string());
    return names;
  }

  fs::path dir_;
};

TEST_F(CheckpointDir, Names) {
  EXPECT_EQ(checkpoint_path("/runs/a/ckpt", 12), fs::path("/runs/a/ckpt/iter_00000012.h5"));
  EXPECT_EQ(checkpoint_partial_path("/runs/a/ckpt", 12), fs::path("/runs/a/ckpt/iter_00000012.h5.partial"));
  EXPECT_EQ(checkpoint_path("d", 0), fs::path("d/iter_00000000.h5"));
  EXPECT_EQ(checkpoint_path("d", 123456789), fs::path("d/iter_123456789.h5"));
}

TEST_F(CheckpointDir, CommitRenamesAndUpdatesLatest) {
  std::ofstream(checkpoint_partial_path(dir_, 12), std::ios::binary) << "twelve";
  commit_checkpoint(dir_, 12);
  EXPECT_FALSE(fs::exists(checkpoint_partial_path(dir_, 12)));
  ASSERT_TRUE(fs::exists(checkpoint_path(dir_, 12)));
  EXPECT_EQ(read(checkpoint_path(dir_, 12)), "twelve");
  EXPECT_EQ(read(dir_ / "latest"), "iter_00000012.h5\n");
  EXPECT_EQ(latest_checkpoint(dir_), checkpoint_path(dir_, 12));
  EXPECT_EQ(files(), (std::set<std::string>{"iter_00000012.h5", "latest"})) << "no latest.tmp left behind";

  save(13);
  EXPECT_EQ(latest_checkpoint(dir_), checkpoint_path(dir_, 13));
  EXPECT_TRUE(fs::exists(checkpoint_path(dir_, 12)));
}

TEST_F(CheckpointDir, CommitWithoutPartialFailsAndKeepsLatest) {
  save(4);
  try {
    commit_checkpoint(dir_, 5);
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(checkpoint_partial_path(dir_, 5).string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(latest_checkpoint(dir_), checkpoint_path(dir_, 4));
}

TEST_F(CheckpointDir, LatestMissingDanglingOrMalformed) {
  EXPECT_EQ(latest_checkpoint(dir_), fs::path());
  EXPECT_EQ(latest_checkpoint(dir_ / "no_such_subdir"), fs::path());

  std::ofstream(dir_ / "latest") << "iter_00000007.h5\n";
  try {
    latest_checkpoint(dir_);
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "'" + (dir_ / "latest").string() + "' names 'iter_00000007.h5', but '" +
                                         (dir_ / "iter_00000007.h5").string() + "' does not exist");
  }
  std::ofstream(dir_ / "latest") << "\n";
  EXPECT_THROW(latest_checkpoint(dir_), InputError);
  std::ofstream(dir_ / "latest") << "../elsewhere/iter_00000001.h5\n";
  EXPECT_THROW(latest_checkpoint(dir_), InputError);
  // A FIFO named latest (opening it blocked for ever) or a directory: not a regular file.
  fs::remove(dir_ / "latest");
  ASSERT_EQ(::mkfifo((dir_ / "latest").c_str(), 0644), 0);
  try {
    latest_checkpoint(dir_);
    ADD_FAILURE() << "a FIFO named latest: no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("latest' is not a regular file"), std::string::npos) << e.what();
  }
  fs::remove(dir_ / "latest");
  fs::create_directory(dir_ / "latest");
  EXPECT_THROW(latest_checkpoint(dir_), InputError);
  fs::remove(dir_ / "latest");
}

TEST_F(CheckpointDir, RetentionKeepsNewestAndMultiples) {
  for (int i = 1; i <= 12; ++i) save(i);
  apply_retention(dir_, 2, 5);
  std::set<std::string> expected = committed_names({5, 10, 11, 12});
  expected.insert("latest");
  EXPECT_EQ(files(), expected);
  EXPECT_EQ(latest_checkpoint(dir_), checkpoint_path(dir_, 12));

  apply_retention(dir_, 1, 0);   // keep_every 0: no multiples kept
  expected = committed_names({12});
  expected.insert("latest");
  EXPECT_EQ(files(), expected);
}

TEST_F(CheckpointDir, RetentionRemovesCrashLeftoversOnly) {
  for (int i = 1; i <= 3; ++i) save(i);
  std::ofstream(checkpoint_partial_path(dir_, 4)) << "half";
  std::ofstream(dir_ / "latest.tmp") << "iter_00000004.h5\n";
  std::ofstream(dir_ / "notes.txt") << "mine";
  std::ofstream(dir_ / "iter_x.h5") << "not a checkpoint name";
  apply_retention(dir_, 3, 0);
  std::set<std::string> expected = committed_names({1, 2, 3});
  expected.insert({"latest", "notes.txt", "iter_x.h5"});
  EXPECT_EQ(files(), expected);
}

TEST_F(CheckpointDir, RetentionNeverDeletesLatest) {
  for (int i = 1; i <= 6; ++i) save(i);
  std::ofstream(dir_ / "latest") << "iter_00000002.h5\n";   // e.g. a run rolled back to 2
  apply_retention(dir_, 1, 0);
  std::set<std::string> expected = committed_names({2, 6});
  expected.insert("latest");
  EXPECT_EQ(files(), expected);
  EXPECT_EQ(latest_checkpoint(dir_), checkpoint_path(dir_, 2));

  apply_retention(dir_, 0, 0);
  expected = committed_names({2});
  expected.insert("latest");
  EXPECT_EQ(files(), expected);
}

}  // namespace
}  // namespace shardrl
