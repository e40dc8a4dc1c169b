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
  // config.json's values (Llama 3.1's eos_token_id is a list), with the run's end id joined to
  // its eos_token_id; "{}" when neither is known.
  std::string token_ids_json = "{}";
  // model.init_from's generation_config.json with the run's end id joined to its eos_token_id
  // (what transformers' generate() and vLLM stop at: config.json's ids are not read where this
  // file exists); "" when the base has none.
  std::string generation_config_json;
  // model.init_from's max_position_embeddings (0: none): the export keeps the larger of it and
  // the run's model.max_seq_len, which a run may set shorter than its base's.
  std::int64_t base_max_positions = 0;
  std::vector<std::string> notes;   // what could not be carried over, and why
};

// The companions of the run `config` (a checkpoint's record of it) as its directories hold
// them now; a directory moved or gone since leaves a note, not an error. `trained`: the
// checkpoint holds steps the run took (not one `convert --from-safetensors` wrote). The run's end
// id is rl.eos_id, or, for a run that trained on the byte tokenizer's tasks, that tokenizer's
// end id; an untrained checkpoint has learned none (a real vocabulary's id 257 is a token).
HfCompanions hf_companions(const Config& config, bool trained);

// The names an export writes besides model.safetensors and config.json.
std::vector<std::string> companion_names(const HfCompanions& companions);

// Copies the companion files into `dir` (each written whole, or not at all) and prints what was
// carried over and what was not.
void write_hf_companions(const HfCompanions& companions, const std::filesystem::path& dir);

}  // namespace shardrl
