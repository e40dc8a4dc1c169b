// `text`: RL on text prompts with the model's own tokenizer and chat template (docs/text-rl.md).
// A JSONL dataset, one example per line: {"prompt": str, "answer": str|number} or {"messages":
// [{"role", "content"}...], "answer": ...}, optionally a worked "solution" for the warm-up (keys
// renamed by rl.prompt_key / answer_key / solution_key). At construction, on every rank alike,
// each prompt is rendered with the chat template (system prompt first, generation prompt added)
// and encoded, once; prompts longer than max_prompt_tokens are dropped and counted. Examples are
// drawn as the jsonl task draws them (line uniform_below(engine(seed, iteration, index))), the
// same at any world size. A completion is decoded up to EOS and scored by rl.reward: a TextReward
// (math, exact, regex) or a reward process (command), which scores a rollout's batch at once.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "io/bounded_json.hpp"
#include "io/json_parse_message.hpp"
#include "rl/reward_command.hpp"
#include "rl/task_chat.hpp"
#include "rl/task_common.hpp"
#include "rl/text_reward.hpp"
#include "rollout/stop_ids.hpp"
#include "text/hf_tokenizer.hpp"

namespace shardrl::task_detail {
namespace {

// Lines keep their keys' order (a chat's tools and tool-call arguments print in it, as Python's
// dicts keep it in transformers' rendering).
using json = nlohmann::ordered_json;

struct TextRow {
  std::string prompt;                       // the rendered prompt text
  std::vector<std::int32_t> prompt_ids;
  std::string answer;
  std::vector<std::int32_t> demonstration;  // the solution's (else the answer's) ids
  json metadata;                            // the line's other fields, for a reward process
  std::string source;                       // "path:line"
};

// An answer field may be a string or a number (GSM8K-style files hold both).
// An empty answer is refused, as the jsonl task refuses it: it would reward stopping at once
// (exact), an empty capture (regex), and teach the warm-up to end every completion at once.
std::string answer_text(const json& v, const std::string& where, const std::string& key) {
  std::string text;
  if (v.is_string()) text = v.get<std::string>();
  // Unsigned first: nlohmann keeps 2^63 and above unsigned, and reading them signed wraps.
  else if (v.is_number_unsigned()) text = std::to_string(v.get<std::uint64_t>());
  else if (v.is_number_integer()) text = std::to_string(v.get<std::int64_t>());
  else if (v.is_number()) {
    // A JSON reader keeps a number past the 64-bit integers as a double: an integer of more than
    // 2^53 has then lost its last digits (12345678901234567890123 reads 1.2345678901234568e+22),
    // and the grader would compare against that. Such an answer must come as a string.
    const double d = v.get<double>();
    if (std::abs(d) >= 9007199254740992.0)
      throw InputError(fmt::format("{}: field \"{}\" is the number {}, too large to read exactly as a JSON number; "
                                   "write it as a string (\"{}\": \"...\")",
                                   where, key, v.dump(), key));
    text = v.dump();
  } else throw InputError(fmt::format("{}: field \"{}\" must be a string or a number, got {}", where, key, v.type_name()));
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw InputError(fmt::format("{}: field \"{}\" is empty", where, key));
  return text;
}

class TextTask final : public Task {
 public:
  explicit TextTask(const TaskOptions& o)
      : options_(o.text), dataset_path_(o.training_split ? o.dataset_path : std::string()),
        tokenizer_(o.text.tokenizer_dir), chat_(tokenizer_, o.text) {
    const TextTaskOptions& t = options_;
    const std::int32_t eos = o.eos_id >= 0 ? static_cast<std::int32_t>(o.eos_id) : tokenizer_.end_of_completion_id();
    // rl.eos_id given: that id alone; else the tokenizer's and the generation config's (the
    // vocabulary's bound is the loop's to apply).
    stop_ = o.eos_id >= 0 ? StopIds(eos) : StopIds(eos, tokenizer_.eos_ids(), INT32_MAX);
    if (eos < 0)
      throw InputError(fmt::format("the tokenizer in {} names no eos token (tokenizer_config.json eos_token, "
                                   "generation_config.json eos_token_id); set rl.eos_id",
                                   t.tokenizer_dir));
    if (o.training_split) train_ = load(o.dataset_path, "dataset");
    if (!t.eval_path.empty()) eval_ = load(t.eval_path, "eval dataset");
    if (t.reward == "command") {
      command_ = std::make_unique<RewardCommand>(t.reward_command, t.reward_timeout_s);
    } else {
      TextRewardOptions r;
      r.kind = text_reward_kind_from_name(t.reward);
      r.format_reward = t.format_reward;
      r.pattern = t.reward_pattern;
      reward_ = std::make_unique<TextReward>(r);
    }
  }

  std::string name() const override { return "text"; }
  bool pre_tokenized() const override { return true; }
  std::int32_t eos_id() const override { return stop_.end_id(); }
  std::vector<std::int32_t> end_ids() const override { return stop_.ids(); }

  TaskExample example(std::uint64_t seed, std::int64_t iteration, std::int64_t index) const override {
    SHARDRL_CHECK(!train_.empty(), "a training example drawn from a task built without its training split");
    std::mt19937_64 engine = example_engine(kTextSalt, seed, iteration, index);
    return as_example(train_[uniform_below(engine, train_.size())]);
  }

  void for_each_dataset_example(const std::function<void(const TaskExample&)>& f) const override {
    for (const TextRow& row : train_) f(as_example(row));
  }
  // The lines (their other fields, which a reward command reads, too) and what renders and
  // encodes them: not the prompts as rendered, which a template may date (strftime_now).
  std::vector<InputFile> input_files() const override {
    std::vector<InputFile> files;
    if (!dataset_path_.empty()) files.push_back({"dataset", dataset_path_});
    for (const auto& f : tokenizer_.files()) files.push_back({f.filename().string(), f.string()});
    return files;
  }

  std::vector<InputFile> eval_files() const override {
    if (options_.eval_path.empty()) return {};
    return {{"eval dataset", options_.eval_path}};
  }

  std::int64_t eval_count() const override { return static_cast<std::int64_t>(eval_.size()); }
  // A second is enough for an interpreter to find the script missing or fail an import.
  void check_scorer() override {
    if (command_) command_->check_started(kRewardCommandSettleS);
  }
  static constexpr double kRewardCommandSettleS = 1.0;

  void give_up_scoring_when(std::function<bool()> check) override {
    if (command_) command_->give_up_when(std::move(check));
  }
  TaskExample eval_example(std::int64_t index) const override {
    SHARDRL_CHECK(index >= 0 && index < eval_count(), "eval example out of range");
    return as_example(eval_[static_cast<std::size_t>(index)]);
  }

  double score(const TaskExample&, const std::string&) const override {
    SHARDRL_CHECK(false, "the text task's examples are scored on ids (score_ids)");
    return 0;
  }

  double score_ids(const TaskExample& ex, const std::vector<std::int32_t>& completion) const override {
    return score_ids_batch({ex}, {completion}).front().reward;
  }

  std::vector<Scored> score_ids_batch(const std::vector<TaskExample>& examples,
                                      const std::vector<std::vector<std::int32_t>>& completions) const override {
    std::vector<std::string> texts;
    texts.reserve(completions.size());
    for (const auto& c : completions) texts.push_back(completion_text(c));
    std::vector<Scored> rewards;
    if (command_) {
      std::vector<RewardRequest> batch;
      for (std::size_t i = 0; i < examples.size(); ++i)
        batch.push_back({examples[i].prompt, texts[i], examples[i].answer, metadata_of(examples[i]), examples[i].source});
      std::lock_guard<std::mutex> lock(command_mutex_);   // one conversation with the process at a time
      return command_->score(batch);
    }
    for (std::size_t i = 0; i < examples.size(); ++i) rewards.push_back(Scored::of(reward_->score(texts[i], examples[i].answer)));
    return rewards;
  }

 private:
  // The completion's text: its ids before the first end id, special tokens kept (a reward sees
  // what the model wrote).
  std::string completion_text(const std::vector<std::int32_t>& ids) const {
    return tokenizer_.decode(stop_.before_stop(ids));
  }

  TaskExample as_example(const TextRow& row) const {
    TaskExample ex;
    ex.prompt = row.prompt;
    ex.answer = row.answer;
    ex.prompt_ids = row.prompt_ids;
    ex.answer_ids = row.demonstration;
    ex.source = row.source;
    return ex;
  }

  nlohmann::json metadata_of(const TaskExample& ex) const {
    const auto it = metadata_.find(ex.source);
    return it == metadata_.end() ? nlohmann::json::object() : nlohmann::json(it->second);
  }

  std::vector<TextRow> load(const std::string& path, const char* what) {
    const TextTaskOptions& t = options_;
    const std::string data = read_input_file(path, what);
    std::istringstream in(data);
    std::vector<TextRow> rows;
    std::int64_t dropped = 0, longest_dropped = 0;
    int number = 0;
    for (std::string line; std::getline(in, line);) {
      ++number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = fmt::format("{}:{}", path, number);
      json j;
      try {
        j = parse_bounded_json<json>(line, where);
      } catch (const json::exception& e) {   // parse_error, or out_of_range for a number like 1e999
        throw InputError(fmt::format("{}: not valid JSON: {}", where, json_parse_message(e.what())));
      }
      if (!j.is_object()) throw InputError(fmt::format("{}: expected a JSON object, got {}", where, j.type_name()));
      json messages;
      if (j.contains("messages")) {
        messages = j["messages"];
      } else {
        const auto p = j.find(t.prompt_key);
        if (p == j.end() || !p->is_string())
          throw InputError(fmt::format("{}: missing string field \"{}\" (or \"messages\")", where, t.prompt_key));
        messages = json::array({{{"role", "user"}, {"content", *p}}});
      }
      TextRow row;
      // The messages' own problems and the template's refusal (raise_exception) name this line.
      try {
        row.prompt = chat_.render(messages);
      } catch (const InputError& e) {
        throw InputError(fmt::format("{}: {}", where, e.what()));
      }
      const auto a = j.find(t.answer_key);
      if (a == j.end()) throw InputError(fmt::format("{}: missing field \"{}\"", where, t.answer_key));
      row.answer = answer_text(*a, where, t.answer_key);
      row.source = where;
      // The tokenizer's own refusal (a character it cannot encode) names this line too.
      const auto encode = [&](const std::string& text, const char* part) {
        try {
          return tokenizer_.encode(text);
        } catch (const InputError& e) {
          throw InputError(fmt::format("{}: {}: {}", where, part, e.what()));
        }
      };
      row.prompt_ids = encode(row.prompt, "the prompt");
      if (row.prompt_ids.empty()) throw InputError(fmt::format("{}: the prompt encodes to no tokens", where));
      if (static_cast<std::int64_t>(row.prompt_ids.size()) > t.max_prompt_tokens) {
        ++dropped;
        longest_dropped = std::max<std::int64_t>(longest_dropped, static_cast<std::int64_t>(row.prompt_ids.size()));
        continue;
      }
      std::string demonstration = row.answer;
      if (!t.solution_key.empty() && j.contains(t.solution_key) && !j[t.solution_key].is_null()) {
        if (!j[t.solution_key].is_string())
          throw InputError(fmt::format("{}: field \"{}\" must be a string, got {}", where, t.solution_key,
                                       j[t.solution_key].type_name()));
        demonstration = j[t.solution_key].get<std::string>();
        // An empty one would teach the warm-up to end every completion at once (as an empty answer).
        if (demonstration.find_first_not_of(" \t\r\n") == std::string::npos)
          throw InputError(fmt::format("{}: field \"{}\" is empty", where, t.solution_key));
      }
      row.demonstration = encode(demonstration, "the answer or solution");
      // The line as written, the prompt or messages included: the request's "prompt" is the
      // rendered one (the chat template applied), and a judge may need the question itself.
      metadata_[where] = j;
      rows.push_back(std::move(row));
    }
    if (dropped > 0)
      spdlog::info("{} '{}': dropped {} prompt(s) longer than {} tokens (the longest {}); {} kept", what, path, dropped,
                   t.max_prompt_tokens, longest_dropped, rows.size());
    if (rows.empty())
      throw InputError(fmt::format("{} '{}' has no usable example{}", what, path,
                                   dropped > 0 ? fmt::format(" ({} dropped as longer than {} tokens)", dropped,
                                                             t.max_prompt_tokens)
                                               : ""));
    return rows;
  }

  TextTaskOptions options_;
  std::string dataset_path_;
  HfTokenizer tokenizer_;
  TaskChat chat_;   // the prompts' rendering (rl.chat_template, rl.system_prompt)
  StopIds stop_ = -1;   // the end id (rl.eos_id or the tokenizer's eos), then the model's others
  std::vector<TextRow> train_, eval_;
  std::map<std::string, json> metadata_;   // by source "path:line"
  std::unique_ptr<TextReward> reward_;
  std::unique_ptr<RewardCommand> command_;
  mutable std::mutex command_mutex_;
};

}  // namespace

std::unique_ptr<Task> make_text_task(const TaskOptions& options) { return std::make_unique<TextTask>(options); }

}  // namespace shardrl::task_detail
