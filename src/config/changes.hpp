// What differs between two configurations of one run: the checkpoint's (the job that saved it)
// and the resuming job's. A resumed run continues the same trajectory only if nothing that
// shapes it changed; the keys that do not (how long, where, how often to save, how to run the
// same computation) are free to change.
#pragma once

#include <string>
#include <vector>

#include "config/config.hpp"

namespace shardrl {

struct ConfigChange {
  std::string key;                 // "rl.samples_per_prompt"
  std::string before, after;       // TOML literals
  bool keeps_trajectory = false;   // a key that does not change what the run computes
  bool read_by_neither = false;    // both configurations leave the key unread (unread_keys)
};

// Every key whose value differs, in the schema's order.
std::vector<ConfigChange> config_changes(const Config& before, const Config& after);

}  // namespace shardrl
