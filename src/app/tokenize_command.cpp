#include "app/tokenize_command.hpp"

#include <fmt/format.h>

#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/job_config.hpp"
#include "app/printable_line.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "io/bounded_json.hpp"
#include "io/json_parse_message.hpp"
#include "job/options.hpp"
#include "rl/task_chat.hpp"
#include "text/hf_tokenizer.hpp"

namespace shardrl {
namespace {

std::string ids_line(const std::vector<std::int32_t>& ids) {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
  return out;
}

}  // namespace

int run_tokenize(const TokenizeArgs& args) {
  std::optional<Config> job;
  if (!args.config_path.empty()) {
    TrainArgs train;
    train.config_path = args.config_path;
    train.overrides = args.overrides;
    LoadedConfig loaded;
    try {
      // Its prompts rendered, nothing trained or run: not checked as a job, nor against this build
      // (a GPU job's config, rollout.cuda_graph and all, is tokenized on a CPU login node).
      BuildInfo any_build;
      any_build.has_cuda = any_build.has_cudnn = any_build.any = true;
      loaded = read_job_config(MPI_COMM_WORLD, train, /*world_size=*/0, any_build, /*trains=*/false);
    } catch (const InputError& e) {
      print_error(e.what());
      return kExitUsage;
    }
    if (!loaded.ok()) {
      report_config_errors(loaded, 0);
      return kExitUsage;
    }
    job = loaded.config;
  }
  try {
    std::string dir = args.tokenizer;
    if (dir.empty() && job) dir = tokenizer_dir(*job);
    if (dir.empty())
      throw InputError(fmt::format("{}: the job has no tokenizer of its own (model.tokenizer, or model.init_from with "
                                   "tokenizer.json); pass --tokenizer DIR",
                                   args.config_path));
    const HfTokenizer tokenizer(dir);
    // The job's rendering (rl/task_chat.hpp), or without a job the template's own defaults (a
    // default config's: no variables, no system prompt); built when a line first needs it, as
    // plain lines need no chat template.
    std::optional<TaskChat> chat;
    auto render_chat = [&](const nlohmann::ordered_json& messages, const std::string& where) {
      try {
        // Without a job there is no rl.chat_template to set: the remedy is the command's own.
        if (!job && tokenizer.chat_template().empty() && tokenizer.chat_template_problem().empty())
          throw InputError(fmt::format("{} has no chat template (tokenizer_config.json's chat_template, "
                                       "chat_template.jinja) to render {}; tokenize the text as it is (without "
                                       "--chat, a line's \"text\" instead of its \"messages\")",
                                       dir, args.chat ? "--chat" : "a chat's \"messages\""));
        if (!chat) chat.emplace(tokenizer, chat_options(job ? *job : Config{}));
        return chat->render(messages);
      } catch (const InputError& e) {
        throw InputError(fmt::format("{}: {}", where, e.what()));
      }
    };
    if (!args.decode.empty()) {
      std::vector<std::int32_t> ids;
      std::istringstream in(args.decode);
      for (std::string word; in >> word;) {
        std::size_t used = 0;
        long long id = -1;
        try {
          id = std::stoll(word, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != word.size() || id < 0 || id > INT32_MAX)
          throw InputError(fmt::format("--decode: {} is not a token id", excerpt(word)));
        ids.push_back(static_cast<std::int32_t>(id));
      }
      std::cout << printable_line(tokenizer.decode(ids, args.skip_special_tokens)) << "\n";
      return 0;
    }
    if (!args.file.empty()) {
      const std::string data = read_input_file(args.file, "input file");
      std::istringstream in(data);
      int number = 0;
      for (std::string line; std::getline(in, line);) {
        ++number;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const std::string where = fmt::format("{}:{}", args.file, number);
        nlohmann::ordered_json j;
        try {
          j = parse_bounded_json<nlohmann::ordered_json>(line, where);
        } catch (const nlohmann::json::exception& e) {   // parse_error, or out_of_range (1e999)
          throw InputError(fmt::format("{}: not valid JSON: {}", where, json_parse_message(e.what())));
        }
        std::string text;
        if (j.is_string()) text = args.chat ? render_chat({{{"role", "user"}, {"content", j}}}, where)
                                            : j.get<std::string>();
        else if (j.is_object() && j.contains("messages")) text = render_chat(j["messages"], where);
        else if (j.is_object() && j.contains("text") && j["text"].is_string())
          text = args.chat ? render_chat({{{"role", "user"}, {"content", j["text"]}}}, where)
                           : j["text"].get<std::string>();
        else
          throw InputError(fmt::format("{}: expected a JSON string, or an object with \"text\" (a string) or "
                                       "\"messages\" (a chat)",
                                       where));
        std::cout << ids_line(tokenizer.encode(text, args.add_special_tokens)) << "\n";
      }
      return 0;
    }
    const std::string text = args.chat ? render_chat({{{"role", "user"}, {"content", args.text}}}, "--text")
                                       : args.text;
    std::cout << ids_line(tokenizer.encode(text, args.add_special_tokens)) << "\n";
    return 0;
  } catch (const InputError& e) {
    print_error(e.what());
    return kExitUsage;
  }
}

}  // namespace shardrl
