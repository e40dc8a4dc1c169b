// `jsonl`: prompts from a dataset file, one JSON object per line (blank lines skipped), of one
// of two kinds, the same on every line of a file:
//   text           {"prompt": str, "answer": str} (other fields ignored); the RL loop encodes the
//                  prompt with the byte tokenizer. Reward: exact match after stripping trailing
//                  whitespace.
//   pre-tokenized  {"prompt_ids": [int...], "answer_ids": [int...], "answer": optional str}, for a
//                  model with its own tokenizer: ids used verbatim. Reward: the completion's ids
//                  before the first EOS (rl.eos_id, then required) equal answer_ids exactly.
// No partial credit for either. Example (seed, iteration, index) is line
// uniform_below(engine(seed, iteration, index), count): sampling with replacement, the same at any
// world size.
#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "io/bounded_json.hpp"
#include "io/json_parse_message.hpp"
#include "rl/task_common.hpp"

namespace shardrl::task_detail {
namespace {

// One line of the dataset: the text fields, or (pre-tokenized) the ids and the optional answer.
struct DatasetRow {
  std::string prompt;
  std::string answer;
  std::vector<std::int32_t> prompt_ids;
  std::vector<std::int32_t> answer_ids;
  std::string source;   // "path:line"
};

struct Dataset {
  std::vector<DatasetRow> rows;
  bool pre_tokenized = false;
};

std::string required_string(const nlohmann::json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) throw InputError(fmt::format("{}: missing string field \"{}\"", where, key));
  if (!it->is_string())
    throw InputError(fmt::format("{}: field \"{}\" must be a string, got {}", where, key,
                                 it->type_name()));
  return it->get<std::string>();
}

// A non-empty array of token ids: integers in 0 .. 2^31-1 (ids index int32 buffers).
std::vector<std::int32_t> required_ids(const nlohmann::json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end())
    throw InputError(fmt::format("{}: missing field \"{}\" (an array of token ids)", where, key));
  if (!it->is_array())
    throw InputError(fmt::format("{}: field \"{}\" must be an array of token ids, got {}", where, key,
                                 it->type_name()));
  if (it->empty()) throw InputError(fmt::format("{}: field \"{}\" is empty", where, key));
  std::vector<std::int32_t> ids;
  ids.reserve(it->size());
  for (std::size_t k = 0; k < it->size(); ++k) {
    const nlohmann::json& v = (*it)[k];
    const bool in_range = v.is_number_unsigned()
                              ? v.get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<std::int32_t>::max())
                              : v.is_number_integer() && v.get<std::int64_t>() >= 0;
    if (!in_range)
      throw InputError(fmt::format("{}: field \"{}\" element {} must be a token id (an integer in 0..{}), got {}",
                                   where, key, k, std::numeric_limits<std::int32_t>::max(), v.dump()));
    ids.push_back(static_cast<std::int32_t>(v.get<std::int64_t>()));
  }
  return ids;
}

// A line of token ids names either id field; anything else is a text line.
bool is_ids_line(const nlohmann::json& obj) { return obj.contains("prompt_ids") || obj.contains("answer_ids"); }

Dataset load_dataset(const std::string& path) {
  const std::string data = read_input_file(path, "dataset");
  Dataset out;
  std::size_t first_line = 0;   // the first example's line, which fixes the file's kind
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < data.size()) {
    std::size_t end = data.find('\n', pos);
    if (end == std::string::npos) end = data.size();
    std::string line = data.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;   // blank line
    const std::string where = fmt::format("{}:{}", path, line_no);
    nlohmann::json obj;
    try {
      obj = parse_bounded_json<nlohmann::json>(line, where);
    } catch (const nlohmann::json::exception& e) {   // parse_error, or out_of_range for a number like 1e999
      throw InputError(fmt::format("{}: not valid JSON ({})", where, json_parse_message(e.what())));
    }
    if (!obj.is_object())
      throw InputError(fmt::format("{}: expected a JSON object, got {}", where, obj.type_name()));
    const bool ids_line = is_ids_line(obj);
    if (first_line == 0) {
      first_line = line_no;
      out.pre_tokenized = ids_line;
    } else if (ids_line != out.pre_tokenized) {
      // Both kinds in one file is almost surely two datasets concatenated by mistake.
      auto kind = [](bool ids) {
        return ids ? "a token-id line ({\"prompt_ids\", \"answer_ids\"})" : "a text line ({\"prompt\", \"answer\"})";
      };
      throw InputError(fmt::format("{}: {}, but line {} is {}; every line of a dataset must be of the same kind",
                                   where, kind(ids_line), first_line, kind(out.pre_tokenized)));
    }
    DatasetRow row;
    row.source = where;
    if (ids_line) {
      row.prompt_ids = required_ids(obj, "prompt_ids", where);
      row.answer_ids = required_ids(obj, "answer_ids", where);
      if (const auto it = obj.find("answer"); it != obj.end()) {
        if (!it->is_string())
          throw InputError(fmt::format("{}: field \"answer\" must be a string, got {}", where, it->type_name()));
        row.answer = it->get<std::string>();
      }
    } else {
      row.prompt = required_string(obj, "prompt", where);
      row.answer = required_string(obj, "answer", where);
      if (row.prompt.empty()) throw InputError(fmt::format("{}: field \"prompt\" is empty", where));
      // An empty answer would reward stopping at once; trailing whitespace is ignored in scoring.
      if (strip_trailing_whitespace(row.answer).empty())
        throw InputError(fmt::format("{}: field \"answer\" is empty", where));
    }
    out.rows.push_back(std::move(row));
  }
  if (out.rows.empty()) throw InputError(fmt::format("{}: no examples", path));
  return out;
}

// A pre-tokenized dataset ends its completions with eos_id, which must be given (the byte
// tokenizer's EOS means nothing to the dataset's tokenizer) and must not occur in an answer
// (a completion stops at its first EOS, so such an answer could never be matched).
void check_eos_for(const Dataset& dataset, const std::string& path, std::int64_t eos_id) {
  if (!dataset.pre_tokenized) return;
  if (eos_id < 0)
    throw InputError(fmt::format("rl.eos_id is required with the pre-tokenized dataset '{}' ({} has \"prompt_ids\"): "
                                 "set it to the id that ends a completion in the dataset's tokenizer",
                                 path, dataset.rows.front().source));
  for (const DatasetRow& row : dataset.rows) {
    const auto at = std::find(row.answer_ids.begin(), row.answer_ids.end(), eos_id);
    if (at != row.answer_ids.end())
      throw InputError(fmt::format("{}: field \"answer_ids\" element {} is rl.eos_id = {}: a completion ends at its "
                                   "first EOS, so this answer could never be matched",
                                   row.source, at - row.answer_ids.begin(), eos_id));
  }
}

class JsonlTask final : public Task {
 public:
  JsonlTask(Dataset dataset, std::string path, std::int32_t eos_id)
      : dataset_(std::move(dataset)), path_(std::move(path)), eos_id_(eos_id) {}

  std::string name() const override { return "jsonl"; }
  std::vector<InputFile> input_files() const override { return {{"dataset", path_}}; }

  TaskExample example(std::uint64_t seed, std::int64_t iteration,
                      std::int64_t index) const override {
    std::mt19937_64 engine = example_engine(kJsonlSalt, seed, iteration, index);
    return example_of(dataset_.rows[uniform_below(engine, dataset_.rows.size())]);
  }

  void for_each_dataset_example(const std::function<void(const TaskExample&)>& f) const override {
    for (const DatasetRow& row : dataset_.rows) f(example_of(row));
  }

  double score(const TaskExample& ex, const std::string& completion) const override {
    SHARDRL_CHECK(!ex.pre_tokenized(), "a pre-tokenized example is scored on ids (score_ids), not on text");
    return strip_trailing_whitespace(completion) == strip_trailing_whitespace(ex.answer) ? 1.0
                                                                                         : 0.0;
  }

  bool pre_tokenized() const override { return dataset_.pre_tokenized; }

  double score_ids(const TaskExample& ex, const std::vector<std::int32_t>& completion) const override {
    if (!ex.pre_tokenized()) return Task::score_ids(ex, completion);
    const auto end = std::find(completion.begin(), completion.end(), eos_id_);
    return std::equal(completion.begin(), end, ex.answer_ids.begin(), ex.answer_ids.end()) ? 1.0 : 0.0;
  }

 private:
  TaskExample example_of(const DatasetRow& row) const {
    TaskExample ex;
    ex.prompt = row.prompt;
    ex.answer = row.answer;
    // A pre-tokenized example's demonstration is answer_ids; its optional "answer" is for people.
    if (!dataset_.pre_tokenized) ex.demonstration = row.answer;
    ex.prompt_ids = row.prompt_ids;
    ex.answer_ids = row.answer_ids;
    ex.source = row.source;
    return ex;
  }
  Dataset dataset_;
  std::string path_;
  std::int32_t eos_id_;   // -1 for a text dataset (unused)
};

}  // namespace

std::unique_ptr<Task> make_jsonl_task(const std::string& dataset_path, std::int64_t eos_id) {
  Dataset dataset = load_dataset(dataset_path);
  check_eos_for(dataset, dataset_path, eos_id);
  const auto eos = dataset.pre_tokenized ? static_cast<std::int32_t>(eos_id) : std::int32_t{-1};
  return std::make_unique<JsonlTask>(std::move(dataset), dataset_path, eos);
}

}  // namespace shardrl::task_detail
