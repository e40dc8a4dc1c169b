// The shardrl command line: `shardrl train --config F [--set k=v ...]`, `generate`, `inspect`,
// --help, --version.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace shardrl {

struct TrainArgs {
  std::string config_path;
  std::vector<std::string> overrides;   // "section.key=value"
  bool log_all_ranks = false;
  bool profile = false;   // per-step breakdown (fences between phases)
  std::string trace;      // every rank's timeline, merged into this Chrome trace file ("": none)
  bool no_resume = false;          // start fresh (refused where the run has checkpoints, unless overwrite)
  bool overwrite = false;          // with no_resume: delete the run's checkpoints and metrics first
  bool allow_config_change = false;   // resume although keys that shape the trajectory changed
  std::string resume_from;         // this checkpoint instead of the run's latest
  bool requeued = false;           // a requeued run of a job: the run's own checkpoints before the above
};

struct ReportArgs {
  std::string run_dir;
  std::string out;   // "": RUN_DIR/report.md
};

struct InspectArgs {
  std::string path;
  bool verify = false;
};

struct ConvertArgs {
  std::string from;               // checkpoint file -> to_safetensors
  std::string to_safetensors;     // output directory
  std::string to_peft;            // a LoRA run's adapters as a PEFT directory
  std::string dtype;              // bf16 | fp32 (export; default: the run's model.precision, fp32 for adapters)
  std::string from_safetensors;   // Hugging Face directory -> to
  std::string to;                 // checkpoint file
  bool force = false;             // replace an existing output
  bool merged = false;            // --to-safetensors of a LoRA run: the base with its adapters folded in
  std::string base;               // --merged / --to-peft: the LoRA run's base where it is now ("": its model.init_from)
};

// Runs the command line; returns the process exit code (see core/error.hpp).
int run_cli(int argc, char** argv);

}  // namespace shardrl
