// The generated tasks' difficulty ranges (inclusive), in one place for the task factory and the
// config's checks (which name rl.difficulty's place in the file or --set before anything runs).
#pragma once

#include <optional>
#include <string>

namespace shardrl {

struct DifficultyRange {
  int min;
  int max;
};

// sort: digits to sort; add: most digits of an operand (the sum stays in 64 bits); reverse:
// letters to reverse. None for the tasks that read a dataset.
inline std::optional<DifficultyRange> difficulty_range(const std::string& task) {
  if (task == "sort") return DifficultyRange{2, 32};
  if (task == "add") return DifficultyRange{1, 18};
  if (task == "reverse") return DifficultyRange{2, 64};
  return std::nullopt;
}

}  // namespace shardrl
