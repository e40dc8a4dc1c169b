#include "config/changes.hpp"

#include <algorithm>
#include <set>

#include "config/combinations.hpp"
#include "config/schema.hpp"

namespace shardrl {
namespace {

// Keys a resumed run may change and still compute what it would have: the run's length and
// place, checkpointing, communication and debugging, and the ways of running the same step that
// tests prove bit-identical (the rollout's CUDA graphs, resharding after forward; not the train
// step's graphs: a captured step runs the head on every token, an eager one on the scored
// tokens only, which rounds differently, model/transformer.hpp); the evaluation (its draws
// are keyed apart from the iterations' and change no state) and the reward command's timeout.
// model.init_from and lora.init_from only seed a fresh run (a LoRA run's base is checked by its
// checksum instead). (model.init_from is also the text task's tokenizer where model.tokenizer is
// unset; its path changes when a job copies the model to node scratch, so the path is no test
// of it: the task's files are compared by their checksum instead, app/resume_choice.hpp.)
bool keeps_trajectory(const KeyDef& d) {
  static const std::set<std::string> sections{"checkpoint", "comm", "debug"};
  static const std::set<std::string> keys{"run.iterations",     "run.name",        "run.dir",
                                          "rollout.cuda_graph", "fsdp.reshard_after_forward",
                                          "model.init_from",    "lora.init_from",  "rl.eval_interval",
                                          "rl.eval_samples",    "rl.eval_dataset", "rl.reward_timeout_s"};
  return sections.count(d.section) > 0 || keys.count(d.full_name()) > 0;
}

}  // namespace

std::vector<ConfigChange> config_changes(const Config& before, const Config& after) {
  const std::vector<std::string> unread_before = unread_keys(before), unread_after = unread_keys(after);
  auto unread = [](const std::vector<std::string>& keys, const std::string& key) {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
  };
  std::vector<ConfigChange> out;
  for (const KeyDef& d : config_schema()) {
    const std::string a = to_toml_literal(d.get(before)), b = to_toml_literal(d.get(after));
    if (a != b)
      out.push_back({d.full_name(), a, b, keeps_trajectory(d),
                     unread(unread_before, d.full_name()) && unread(unread_after, d.full_name())});
  }
  return out;
}

}  // namespace shardrl
