// The one Config of a shardrl job (DESIGN.md invariant 1): parsed from TOML plus --set
// overrides, validated as a whole before any device work. Nothing rewrites a user's value;
// values computed from the config live in DerivedConfig.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace shardrl {

enum class Precision { bf16, fp32 };
enum class CommBackend { automatic, nccl, mpi };

struct RunConfig {
  std::string name = "shardrl";   // run directory is <dir>/<name>/
  std::string dir = "runs";
  std::int64_t seed = 1234;
  std::int64_t iterations = 10;
};

struct ModelConfig {
  std::string preset = "tiny";
  Precision precision = Precision::bf16;
};

struct TrainConfig {
  bool gradient_accumulation_fusion = true;
};

struct CommConfig {
  CommBackend backend = CommBackend::automatic;
  double timeout_s = 300.0;   // a collective unfinished after this long aborts the job
};

enum class FailMode { error, hang };

struct DebugConfig {
  std::int64_t fail_rank = -1;          // fault injection: this rank fails after start-up
  FailMode fail_mode = FailMode::error;  // how it fails: a fatal error, or stop taking part
};

struct Config {
  RunConfig run;
  ModelConfig model;
  TrainConfig train;
  CommConfig comm;
  DebugConfig debug;
};

// What this executable was built with; some settings are valid only on some builds.
struct BuildInfo {
  bool has_cuda = false;
};
BuildInfo this_build();

// Values derived from a validated Config and the job's world size. Never written back.
struct DerivedConfig {
  std::filesystem::path run_dir;   // <run.dir>/<run.name>
  CommBackend comm_backend = CommBackend::mpi;   // comm.backend with "auto" resolved
};

}  // namespace shardrl
