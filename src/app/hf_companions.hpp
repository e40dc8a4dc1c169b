// What a Hugging Face model directory holds beside its weights and config.json, carried into an
// export of a run from the model's own directories: the tokenizer (tokenizer.json,
// tokenizer_config.json with its chat template, special_tokens_map.json, a slow tokenizer's vocab
// files, chat_template.jinja) from the run's tokenizer directory, generation_config.json (the
// ids generate() stops at) from model.init_from, and config.json's special-token ids. Without
// them transformers could not load the tokenizer, and its config defaults would replace the
// model's own end-of-sequence id (generate() would not stop at Qwen3's end of turn).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace shardrl {

struct HfCompanions {
  std::vector<std::filesystem::path> files;   // copied into the export under their own names
  // config.json's bos_token_id, eos_token_id and pad_token_id, as a JSON object: model.init_from's
  // config.json's values verbatim (Llama 3.1's eos_token_id is a list), else the run's end id
  // (rl.eos_id, or the byte tokenizer's); "{}" when neither is known.
  std::string token_ids_json = "{}";
  std::vector<std::string> notes;   // what could not be carried over, and why
};

// The companions of the run `config` (a checkpoint's record of it) as its directories hold
// them now; a directory moved or gone since leaves a note, not an error.
HfCompanions hf_companions(const Config& config);

// The names an export writes besides model.safetensors and config.json.
std::vector<std::string> companion_names(const HfCompanions& companions);

// Copies the companion files into `dir` (each written whole, or not at all) and prints what was
// carried over and what was not.
void write_hf_companions(const HfCompanions& companions, const std::filesystem::path& dir);

}  // namespace shardrl
