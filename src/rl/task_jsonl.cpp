// `jsonl`: prompts from a dataset file, one JSON object per line with string fields "prompt"
// and "answer" (other fields ignored; blank lines skipped). Example (seed, iteration, index) is
// line uniform_below(engine(seed, iteration, index), count): sampling with replacement, the same
// at any world size. Reward: exact match after stripping trailing whitespace; no partial credit.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/json_parse_message.hpp"
#include "rl/task_common.hpp"

namespace shardrl::task_detail {
namespace {

struct PromptAnswer {
  std::string prompt;
  std::string answer;
};

std::string read_file_or_throw(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    throw InputError(fmt::format("cannot read dataset '{}': {}", path, std::strerror(errno)));
  std::string data;
  char buf[65536];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) data.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;   // a directory opens, then fails here with EISDIR
  std::fclose(f);
  if (failed)
    throw InputError(fmt::format("cannot read dataset '{}': {}", path, std::strerror(err)));
  return data;
}


std::string required_string(const nlohmann::json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) throw InputError(fmt::format("{}: missing string field \"{}\"", where, key));
  if (!it->is_string())
    throw InputError(fmt::format("{}: field \"{}\" must be a string, got {}", where, key,
                                 it->type_name()));
  return it->get<std::string>();
}

std::vector<PromptAnswer> load_dataset(const std::string& path) {
  const std::string data = read_file_or_throw(path);
  std::vector<PromptAnswer> rows;
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
      obj = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(fmt::format("{}: not valid JSON ({})", where, json_parse_message(e.what())));
    }
    if (!obj.is_object())
      throw InputError(fmt::format("{}: expected a JSON object, got {}", where, obj.type_name()));
    PromptAnswer row;
    row.prompt = required_string(obj, "prompt", where);
    row.answer = required_string(obj, "answer", where);
    if (row.prompt.empty()) throw InputError(fmt::format("{}: field \"prompt\" is empty", where));
    // An empty answer would reward stopping at once; trailing whitespace is ignored in scoring.
    if (strip_trailing_whitespace(row.answer).empty())
      throw InputError(fmt::format("{}: field \"answer\" is empty", where));
    rows.push_back(std::move(row));
  }
  if (rows.empty()) throw InputError(fmt::format("{}: no examples", path));
  return rows;
}

class JsonlTask final : public Task {
 public:
  explicit JsonlTask(std::vector<PromptAnswer> rows) : rows_(std::move(rows)) {}

  std::string name() const override { return "jsonl"; }

  TaskExample example(std::uint64_t seed, std::int64_t iteration,
                      std::int64_t index) const override {
    std::mt19937_64 engine = example_engine(kJsonlSalt, seed, iteration, index);
    const PromptAnswer& row = rows_[uniform_below(engine, rows_.size())];
    return TaskExample{row.prompt, row.answer, row.answer};
  }

  double score(const TaskExample& ex, const std::string& completion) const override {
    return strip_trailing_whitespace(completion) == strip_trailing_whitespace(ex.answer) ? 1.0
                                                                                         : 0.0;
  }

 private:
  std::vector<PromptAnswer> rows_;
};

}  // namespace

std::unique_ptr<Task> make_jsonl_task(const std::string& dataset_path) {
  return std::make_unique<JsonlTask>(load_dataset(dataset_path));
}

}  // namespace shardrl::task_detail
