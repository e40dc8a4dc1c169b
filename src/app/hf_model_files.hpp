// The files of a Hugging Face model directory that its readers (transformers, PEFT, vLLM) take
// as the model's: the weights in any of their forms and shardings, config.json,
// generation_config.json, the tokenizer's and the chat template's files, adapters. An export
// into a directory that holds any it does not write itself would leave them beside the new
// weights: another model's tokenizer or chat template, a sharded model that importers read
// before model.safetensors, adapters that PEFT would apply.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace shardrl {

// The names (sorted) of such files in `dir`; none where `dir` does not exist.
std::vector<std::string> hf_model_files_in(const std::filesystem::path& dir);

// Those of hf_model_files_in(dir) that `written` does not name.
std::vector<std::string> hf_model_files_not_written(const std::filesystem::path& dir,
                                                    const std::vector<std::string>& written);

}  // namespace shardrl
