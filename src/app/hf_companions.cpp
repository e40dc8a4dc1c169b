#include "app/hf_companions.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "io/text_file.hpp"
#include "job/options.hpp"

namespace shardrl {
namespace {

namespace fs = std::filesystem;

// A Hugging Face tokenizer's files (fast and slow), as AutoTokenizer.from_pretrained reads them.
constexpr const char* kTokenizerFiles[] = {"tokenizer.json",   "tokenizer_config.json", "special_tokens_map.json",
                                           "chat_template.jinja", "chat_template.json", "vocab.json",
                                           "merges.txt",       "tokenizer.model",       "added_tokens.json"};
constexpr const char* kTokenIdKeys[] = {"bos_token_id", "eos_token_id", "pad_token_id"};

}  // namespace

HfCompanions hf_companions(const Config& config, bool trained) {
  HfCompanions c;
  const std::string tokenizer = tokenizer_dir(config), base = config.model.init_from;
  if (!tokenizer.empty()) {
    if (fs::is_directory(tokenizer)) {
      for (const char* name : kTokenizerFiles)
        if (fs::is_regular_file(fs::path(tokenizer) / name)) c.files.push_back(fs::path(tokenizer) / name);
    } else {
      c.notes.push_back(fmt::format("the run's tokenizer directory '{}' is not there any more: copy the tokenizer "
                                    "files from the model's own directory",
                                    tokenizer));
    }
  } else {
    c.notes.push_back("the run used shardrl's byte tokenizer (no model.tokenizer or model.init_from with "
                      "tokenizer.json): the export has no tokenizer files");
  }
  // The run's own end id (rl.eos_id, e.g. an instruct end of turn over a base model's end of
  // text; or the byte tokenizer's, which its tasks trained) joins the base's, in config.json and
  // generation_config.json alike, so generate() stops where the policy learned to.
  const std::int32_t end = config.rl.eos_id >= 0 ? static_cast<std::int32_t>(config.rl.eos_id)
                           : trained && config.rl.task != "text" ? eos_id(config)
                                                                 : -1;
  const auto join_end = [end](nlohmann::ordered_json& holder) {
    if (end < 0) return;
    if (!holder.contains("eos_token_id") || holder.at("eos_token_id").is_null()) {
      holder["eos_token_id"] = end;
      return;
    }
    auto& eos = holder["eos_token_id"];
    if (!eos.is_array()) eos = nlohmann::ordered_json::array({eos});
    if (std::find(eos.begin(), eos.end(), end) == eos.end()) eos.push_back(end);
    if (eos.size() == 1) eos = eos.front();
  };
  nlohmann::ordered_json ids = nlohmann::ordered_json::object();
  if (!base.empty()) {
    const fs::path generation = fs::path(base) / "generation_config.json";
    if (fs::is_regular_file(generation)) {
      try {
        auto g = nlohmann::ordered_json::parse(read_input_file(generation, "model.init_from's generation config"));
        if (!g.is_object()) throw InputError(fmt::format("expected a JSON object, got {}", g.type_name()));
        join_end(g);
        c.generation_config_json = g.dump(2) + "\n";
      } catch (const std::exception& e) {
        c.files.push_back(generation);   // as it is, the run's end id not joined
        c.notes.push_back(fmt::format("'{}' copied as it is, without the run's end id: {}", generation.string(),
                                      e.what()));
      }
    }
    const fs::path base_config = fs::path(base) / "config.json";
    try {
      const auto j = nlohmann::ordered_json::parse(read_input_file(base_config, "model.init_from's config.json"));
      for (const char* key : kTokenIdKeys)
        if (j.is_object() && j.contains(key) && !j.at(key).is_null()) ids[key] = j.at(key);
      if (j.is_object() && j.contains("max_position_embeddings") && j.at("max_position_embeddings").is_number_integer())
        c.base_max_positions = j.at("max_position_embeddings").get<std::int64_t>();
    } catch (const std::exception& e) {
      c.notes.push_back(fmt::format("no special-token ids from '{}': {}", base_config.string(), e.what()));
    }
  }
  join_end(ids);
  c.token_ids_json = ids.dump();
  return c;
}

std::vector<std::string> companion_names(const HfCompanions& companions) {
  std::vector<std::string> names;
  for (const fs::path& f : companions.files) names.push_back(f.filename().string());
  if (!companions.generation_config_json.empty()) names.push_back("generation_config.json");
  return names;
}

void write_hf_companions(const HfCompanions& companions, const fs::path& dir) {
  std::string copied;
  for (const fs::path& f : companions.files) {
    write_text_atomically(dir / f.filename(), read_input_file(f, "a tokenizer or generation file"));
    copied += (copied.empty() ? "" : ", ") + f.filename().string();
  }
  if (!copied.empty())
    std::cout << fmt::format("{} copied from the run's model directories\n", copied);
  if (!companions.generation_config_json.empty()) {
    write_text_atomically(dir / "generation_config.json", companions.generation_config_json);
    std::cout << "generation_config.json from model.init_from's, with the run's end id\n";
  }
  for (const std::string& note : companions.notes) std::cout << "note: " << note << "\n";
}

}  // namespace shardrl
