// `reverse`: reverse a string of `difficulty` lowercase letters. Prompt "reverse: abcd\n",
// answer "dcba".
#include <algorithm>

#include "rl/task_common.hpp"
#include "rl/task_prompt.hpp"

namespace shardrl::task_detail {
namespace {

class ReverseTask final : public Task {
 public:
  ReverseTask(int length, bool partial) : length_(length), partial_(partial) {}

  std::string name() const override { return "reverse"; }

  std::string longest_prompt() const override {   // every prompt is as long
    return task_prompt("reverse", std::string(static_cast<std::size_t>(length_), 'a'));
  }

  std::string longest_demonstration() const override {   // every answer is as long
    return std::string(static_cast<std::size_t>(length_), 'a');
  }

  TaskExample example(std::uint64_t seed, std::int64_t iteration,
                      std::int64_t index) const override {
    std::mt19937_64 engine = example_engine(kReverseSalt, seed, iteration, index);
    std::string text(static_cast<std::size_t>(length_), 'a');
    for (char& c : text) c = static_cast<char>('a' + uniform_below(engine, 26));
    TaskExample ex;
    ex.prompt = task_prompt("reverse", text);
    ex.answer = std::string(text.rbegin(), text.rend());
    ex.demonstration = ex.answer;
    return ex;
  }

  double score(const TaskExample& ex, const std::string& completion) const override {
    const std::string got = strip_trailing_whitespace(completion);
    const std::string want = strip_trailing_whitespace(ex.answer);
    if (got == want) return 1.0;
    return partial_ ? matching_fraction(got, want) : 0.0;
  }

 private:
  int length_;
  bool partial_;
};

}  // namespace

std::unique_ptr<Task> make_reverse_task(int difficulty, bool partial_credit) {
  return std::make_unique<ReverseTask>(difficulty, partial_credit);
}

}  // namespace shardrl::task_detail
