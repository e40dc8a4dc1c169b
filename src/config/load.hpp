// Reading a Config: TOML text plus --set overrides -> a validated Config, or every problem
// found, each naming where it is (file:line:column or the --set argument) and the key.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace shardrl {

struct LoadedConfig {
  Config config;
  std::vector<std::string> errors;              // empty when the config is valid
  std::map<std::string, std::string> origin;    // "run.seed" -> "run.toml:4:8" | "--set run.seed=3" | "default"
  bool ok() const { return errors.empty(); }
};

// Parses `toml_text` (read from `source_name`, used in messages), applies `overrides`
// ("section.key=value", later ones win) and validates everything against `build`.
LoadedConfig load_config(const std::string& toml_text, const std::string& source_name,
                         const std::vector<std::string>& overrides, const BuildInfo& build);

// Checks that need the job's shape (known once MPI is up, before any device work).
// `trains`: the job trains (train, plan) rather than only sampling (generate, which decodes the
// whole model on each rank whatever rollout.tensor_parallel the run trained with, and whose
// --temperature 0 is a greedy look at a policy whose config samples): the rollout's
// tensor-parallel groups, and settings under which a rollout trains nothing, are checked.
std::vector<std::string> check_for_job(const LoadedConfig& loaded, int world_size, bool trains = true);

DerivedConfig derive(const Config& config, const BuildInfo& build);

// The closest of `candidates` to `word`, or "" when none is close enough to be a likely typo.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace shardrl
