// `add`: add two non-negative integers of 1..`difficulty` digits each (no leading zeros).
// Prompt "add: 123+45=\n", answer "168". difficulty <= 18 keeps the sum inside uint64.
#include <algorithm>

#include "rl/task_common.hpp"
#include "rl/task_prompt.hpp"

namespace shardrl::task_detail {
namespace {

class AddTask final : public Task {
 public:
  AddTask(int max_digits, bool partial) : max_digits_(max_digits), partial_(partial) {}

  std::string name() const override { return "add"; }

  std::string longest_prompt() const override {
    const std::string widest(static_cast<std::size_t>(max_digits_), '9');
    return task_prompt("add", widest + "+" + widest);
  }

  std::string longest_demonstration() const override {   // the widest sum: one digit more
    return std::string(static_cast<std::size_t>(max_digits_) + 1, '9');
  }

  TaskExample example(std::uint64_t seed, std::int64_t iteration,
                      std::int64_t index) const override {
    std::mt19937_64 engine = example_engine(kAddSalt, seed, iteration, index);
    const std::uint64_t a = operand(engine);
    const std::uint64_t b = operand(engine);
    TaskExample ex;
    ex.prompt = task_prompt("add", std::to_string(a) + "+" + std::to_string(b));
    ex.answer = std::to_string(a + b);
    ex.demonstration = ex.answer;
    return ex;
  }

  double score(const TaskExample& ex, const std::string& completion) const override {
    const std::string got = strip_trailing_whitespace(completion);
    const std::string want = strip_trailing_whitespace(ex.answer);
    if (got == want) return 1.0;
    if (!partial_ || got.empty() || want.empty()) return 0.0;
    const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
    if (!std::all_of(got.begin(), got.end(), is_digit)) return 0.0;
    const std::size_t common = std::min(got.size(), want.size());
    std::size_t right = 0;
    for (std::size_t k = 0; k < common; ++k)
      right += (got[got.size() - 1 - k] == want[want.size() - 1 - k]) ? 1 : 0;
    // Equal lengths with every digit right would be an exact match; otherwise right < longer.
    return static_cast<double>(right) / static_cast<double>(std::max(got.size(), want.size()));
  }

 private:
  // 1..max_digits_ digits, uniformly; then uniform among the numbers of that many digits.
  std::uint64_t operand(std::mt19937_64& engine) const {
    const int digits = 1 + static_cast<int>(uniform_below(engine, static_cast<std::uint64_t>(max_digits_)));
    if (digits == 1) return uniform_below(engine, 10);
    std::uint64_t low = 1;
    for (int i = 1; i < digits; ++i) low *= 10;
    return low + uniform_below(engine, 9 * low);   // [10^(d-1), 10^d)
  }

  int max_digits_;
  bool partial_;
};

}  // namespace

std::unique_ptr<Task> make_add_task(int difficulty, bool partial_credit) {
  return std::make_unique<AddTask>(difficulty, partial_credit);
}

}  // namespace shardrl::task_detail
