// The room a memory cgroup leaves this process, read from fake cgroup trees: a limit on the
// process's own cgroup or on an ancestor (a Slurm job's, above its step's), cgroup v2 alone,
// v1, and the hybrid layout (v2 under "unified"); the tightest wins, "no limit" is none, and
// inactive page cache (reclaimable) is not counted as used.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/memory_capacity.hpp"

namespace shardrl {
namespace {

namespace fs = std::filesystem;

class CgroupRoom : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("shardrl_cgroup_" + std::to_string(getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    const fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text << "\n";
  }
  double room(const std::string& proc_self_cgroup) { return cgroup_memory_room(proc_self_cgroup, root_.string()); }
  fs::path root_;
};

TEST_F(CgroupRoom, Version2TakesTheTightestOfTheCgroupAndItsAncestors) {
  write("cgroup.controllers", "memory");
  write("slurm/job_7/step_0/memory.max", "max");
  write("slurm/job_7/step_0/memory.current", "1000");
  EXPECT_EQ(room("0::/slurm/job_7/step_0\n"), -1) << "no limit anywhere";
  write("slurm/job_7/memory.max", "8000");   // the job's limit, above its step
  write("slurm/job_7/memory.current", "3000");
  EXPECT_EQ(room("0::/slurm/job_7/step_0\n"), 5000);
  write("slurm/job_7/step_0/memory.max", "2500");
  EXPECT_EQ(room("0::/slurm/job_7/step_0\n"), 1500);
  write("slurm/job_7/step_0/memory.current", "9000");   // past its limit: no room, not negative
  EXPECT_EQ(room("0::/slurm/job_7/step_0\n"), 0);
  // Inactive page cache (files the job script staged) is reclaimed before an allocation fails.
  write("slurm/job_7/step_0/memory.current", "2000");
  write("slurm/job_7/step_0/memory.stat", "anon 500\nfile 1500\ninactive_file 1200\nactive_file 300");
  EXPECT_EQ(room("0::/slurm/job_7/step_0\n"), 1700);
}

TEST_F(CgroupRoom, Version1AndTheHybridLayout) {
  write("memory/slurm/uid_0/job_3/memory.limit_in_bytes", "4096");
  write("memory/slurm/uid_0/job_3/memory.usage_in_bytes", "1024");
  write("memory/slurm/uid_0/job_3/step_1/memory.limit_in_bytes", "9223372036854771712");   // v1's "none"
  write("memory/slurm/uid_0/job_3/step_1/memory.usage_in_bytes", "512");
  const std::string v1 = "12:pids:/slurm/uid_0/job_3/step_1\n4:memory:/slurm/uid_0/job_3/step_1\n";
  EXPECT_EQ(room(v1), 3072);
  write("memory/slurm/uid_0/job_3/memory.stat", "cache 1000\ninactive_file 5\ntotal_inactive_file 1000");
  EXPECT_EQ(room(v1), 4072) << "v1 counts its hierarchy's inactive files as total_inactive_file";
  write("memory/slurm/uid_0/job_3/memory.stat", "");
  EXPECT_EQ(room("4:cpuacct,memory:/slurm/uid_0/job_3/step_1\n"), 3072) << "controllers listed together";
  EXPECT_EQ(room("4:cpu:/slurm/uid_0/job_3/step_1\n"), -1) << "not the memory controller";
  // Hybrid: v2 under "unified" beside v1's controllers; either hierarchy's limit counts.
  write("unified/slurm/memory.max", "2048");
  write("unified/slurm/memory.current", "1024");
  EXPECT_EQ(room(v1 + "0::/slurm\n"), 1024);
}

}  // namespace
}  // namespace shardrl
