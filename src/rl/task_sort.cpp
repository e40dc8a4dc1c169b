// `sort`: sort `difficulty` digits ascending. Prompt "sort: 3 1 2\n", answer "1 2 3".
#include <algorithm>

#include "rl/task_common.hpp"
#include "rl/task_prompt.hpp"

namespace shardrl::task_detail {
namespace {

std::string join_digits(const std::vector<int>& digits) {
  std::string s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0) s.push_back(' ');
    s.push_back(static_cast<char>('0' + digits[i]));
  }
  return s;
}

// Split on single spaces: "1  2" has an empty middle field, which never matches a digit.
std::vector<std::string> split_on_spaces(const std::string& text) {
  std::vector<std::string> fields(1);
  for (char c : text) {
    if (c == ' ')
      fields.emplace_back();
    else
      fields.back().push_back(c);
  }
  return fields;
}

class SortTask final : public Task {
 public:
  SortTask(int n, bool partial) : n_(n), partial_(partial) {}

  std::string name() const override { return "sort"; }

  std::string longest_prompt() const override {   // every prompt is as long
    return task_prompt("sort", join_digits(std::vector<int>(static_cast<std::size_t>(n_), 0)));
  }

  std::string longest_demonstration() const override {   // every answer is as long
    return join_digits(std::vector<int>(static_cast<std::size_t>(n_), 0));
  }

  TaskExample example(std::uint64_t seed, std::int64_t iteration,
                      std::int64_t index) const override {
    std::mt19937_64 engine = example_engine(kSortSalt, seed, iteration, index);
    std::vector<int> digits(static_cast<std::size_t>(n_));
    for (int& d : digits) d = static_cast<int>(uniform_below(engine, 10));
    TaskExample ex;
    ex.prompt = task_prompt("sort", join_digits(digits));
    std::sort(digits.begin(), digits.end());
    ex.answer = join_digits(digits);
    ex.demonstration = ex.answer;
    return ex;
  }

  double score(const TaskExample& ex, const std::string& completion) const override {
    const std::string got = strip_trailing_whitespace(completion);
    const std::string want = strip_trailing_whitespace(ex.answer);
    if (got == want) return 1.0;
    // All fields equal would mean got == want, handled above; so this stays below 1.
    return partial_ ? matching_fraction(split_on_spaces(got), split_on_spaces(want)) : 0.0;
  }

 private:
  int n_;
  bool partial_;
};

}  // namespace

std::unique_ptr<Task> make_sort_task(int difficulty, bool partial_credit) {
  return std::make_unique<SortTask>(difficulty, partial_credit);
}

}  // namespace shardrl::task_detail
