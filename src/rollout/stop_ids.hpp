// The ids that end a completion. The first is the job's own end id (rl.eos_id, or the
// tokenizer's eos token: what a demonstration ends with, what pads pre-tokenized rows); the
// others are the model's other end ids (generation_config.json's eos_token_id: Qwen3's
// <|endoftext|> beside <|im_end|>, Llama 3.1 Instruct's <|end_of_text|> and <|eom_id|> beside
// <|eot_id|>), at which Hugging Face's generate() stops too.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace shardrl {

class StopIds {
 public:
  // One id (implicit: a call that passes one end id means that id alone).
  StopIds(std::int32_t end_id) : ids_{end_id} {}   // NOLINT(google-explicit-constructor)
  // `end_id`, then the ids of `others` that are not it and are below `vocab_size` (an id the
  // model cannot draw cannot end anything), in their order, each once.
  StopIds(std::int32_t end_id, const std::vector<std::int32_t>& others, std::int32_t vocab_size) : ids_{end_id} {
    for (std::int32_t id : others)
      if (id >= 0 && id < vocab_size && !contains(id)) ids_.push_back(id);
  }

  std::int32_t end_id() const { return ids_.front(); }
  const std::vector<std::int32_t>& ids() const { return ids_; }
  bool contains(std::int32_t id) const { return std::find(ids_.begin(), ids_.end(), id) != ids_.end(); }
  // The tokens of `tokens` before its first stop id.
  std::vector<std::int32_t> before_stop(const std::vector<std::int32_t>& tokens) const {
    const auto end = std::find_if(tokens.begin(), tokens.end(), [&](std::int32_t t) { return contains(t); });
    return std::vector<std::int32_t>(tokens.begin(), end);
  }

 private:
  std::vector<std::int32_t> ids_;
};

}  // namespace shardrl
