#include "app/hf_model_files.hpp"

#include <algorithm>
#include <array>
#include <string_view>

#include "core/string_affix.hpp"

namespace shardrl {
namespace {

bool is_hf_model_file(std::string_view name) {
  static constexpr std::array<std::string_view, 18> kNames = {
      "config.json", "generation_config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json",
      "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
      "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model", "adapter_config.json",
      "adapter_model.safetensors", "adapter_model.bin", "preprocessor_config.json", "processor_config.json"};
  if (std::find(kNames.begin(), kNames.end(), name) != kNames.end()) return true;
  // Sharded weights (model-00001-of-00004.safetensors, pytorch_model-00001-of-00002.bin) and their
  // index, which readers take before a model.safetensors beside them.
  if (ends_with(name, ".safetensors.index.json") || ends_with(name, ".bin.index.json")) return true;
  const bool shard = name.find("-of-") != std::string_view::npos;
  return shard && ((starts_with(name, "model-") && ends_with(name, ".safetensors")) ||
                   (starts_with(name, "pytorch_model-") && ends_with(name, ".bin")));
}

}  // namespace

std::vector<std::string> hf_model_files_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return names;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (is_hf_model_file(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> hf_model_files_not_written(const std::filesystem::path& dir,
                                                    const std::vector<std::string>& written) {
  std::vector<std::string> left;
  for (const std::string& name : hf_model_files_in(dir))
    if (std::find(written.begin(), written.end(), name) == written.end()) left.push_back(name);
  return left;
}

}  // namespace shardrl
