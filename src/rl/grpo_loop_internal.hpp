// Helpers the RL loop's two source files share (grpo_loop.cpp: construction, warm-up and the
// train phase; grpo_loop_rollout.cpp: rollout, scoring and evaluation). Internal to src/rl.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "rl/task.hpp"
#include "rl/tokenizer.hpp"
#include "rollout/stop_ids.hpp"

namespace shardrl::grpo_loop_detail {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline int ceil_div(std::int64_t a, std::int64_t b) { return static_cast<int>((a + b - 1) / b); }

// The ids the model sees for an example's prompt: a pre-tokenized prompt verbatim, else BOS and
// the prompt's bytes.
inline std::vector<std::int32_t> prompt_ids(const TaskExample& ex) {
  if (ex.pre_tokenized()) return ex.prompt_ids;
  std::vector<std::int32_t> ids{tokenizer::kBos};
  for (std::int32_t t : tokenizer::encode(ex.prompt)) ids.push_back(t);
  return ids;
}

// A warm-up sequence: the prompt's ids, the demonstration's (a pre-tokenized example's answer
// ids, else its bytes), then the end-of-completion id.
inline std::vector<std::int32_t> warmup_ids(const TaskExample& ex, std::int32_t eos_id) {
  std::vector<std::int32_t> ids = prompt_ids(ex);
  if (ex.pre_tokenized()) ids.insert(ids.end(), ex.answer_ids.begin(), ex.answer_ids.end());
  else for (std::int32_t t : tokenizer::encode(ex.demonstration)) ids.push_back(t);
  ids.push_back(eos_id);
  return ids;
}

// Every id of a pre-tokenized example must index the model's embedding and head (a text
// example's ids are the byte tokenizer's). Called for every example of a batch on every rank,
// so a bad line stops all ranks alike. `which` names the example in the message, e.g. "eval
// prompt 3"; the overload below builds it as "prompt 3 of iteration 7".
inline void check_ids_in_vocabulary(const TaskExample& ex, std::int64_t vocab_size, const std::string& which) {
  if (!ex.pre_tokenized()) return;
  const std::pair<const char*, const std::vector<std::int32_t>*> fields[] = {{"prompt_ids", &ex.prompt_ids},
                                                                            {"answer_ids", &ex.answer_ids}};
  for (const auto& [field, ids] : fields)
    for (std::size_t k = 0; k < ids->size(); ++k)
      if ((*ids)[k] >= vocab_size)
        throw InputError(fmt::format("{}: field \"{}\" element {} is id {}, outside the model's vocabulary "
                                     "(model.vocab_size = {}; {})",
                                     ex.source.empty() ? "dataset" : ex.source, field, k, (*ids)[k], vocab_size, which));
}

inline void check_ids_in_vocabulary(const TaskExample& ex, std::int64_t vocab_size, const char* what, std::int64_t index,
                                    const char* of, std::int64_t step) {
  if (ex.pre_tokenized()) check_ids_in_vocabulary(ex, vocab_size, fmt::format("{} {} of {} {}", what, index, of, step));
}

// "path:line: " for an example from a dataset, "" for a generated one: a message about the
// example starts with where to find it.
inline std::string example_where(const TaskExample& ex) { return ex.source.empty() ? "" : ex.source + ": "; }

// The completion's text as the task scores it: the bytes before the first end id.
inline std::string completion_text(const std::vector<std::int32_t>& tokens, const StopIds& stop) {
  return tokenizer::decode_completion(stop.before_stop(tokens));
}

}  // namespace shardrl::grpo_loop_detail
