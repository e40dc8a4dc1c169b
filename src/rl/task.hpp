// Verifiable tasks for RL post-training: a task generates (prompt, answer) examples and scores a
// completion against the answer. Examples depend only on (seed, iteration, index), never on the
// rank or on the world size, so every run generates the same global batch at any world size and
// a resumed run continues with the same examples.
//
// Randomness: each example draws from its own std::mt19937_64 seeded by a std::seed_seq over
// (task salt, seed, iteration, index), each 64-bit value split into two 32-bit words. Both are
// fully specified by the standard, and numbers are derived from the raw engine output (never
// from std::uniform_int_distribution, whose output differs between standard libraries), so an
// example is the same on every platform.
//
// Scoring: the completion is the decoded text up to EOS. Trailing whitespace (space, tab, CR,
// LF, VT, FF) is stripped from completion and answer; an exact match scores 1.0, anything else
// 0.0, or with partial credit on a value in [0, 1) (never 1.0 for a wrong answer):
//   sort     the completion split on single spaces has as many fields as there are digits:
//            fraction of fields equal to the reference field at the same position; else 0.
//   reverse  same length as the reference: fraction of character positions equal; else 0.
//   add      the completion is all digits: digits equal to the reference's aligned from the
//            right, divided by the longer of the two lengths (so leading zeros cost); else 0.
//   jsonl    no partial credit (requesting it is an InputError).
//
// Pre-tokenized examples (a jsonl dataset of "prompt_ids"/"answer_ids" lines, for a model with
// its own tokenizer) are scored on ids, never decoded: the completion's ids up to (not
// including) the first EOS equal answer_ids exactly -> 1.0, else 0.0.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shardrl {

struct TaskExample {
  std::string prompt;         // e.g. "sort: 3 1 2\n"
  std::string answer;         // e.g. "1 2 3" (pre-tokenized: the line's optional "answer", else "")
  std::string demonstration;  // what a supervised warm-up trains on: the answer (EOS added by the caller)
  // Pre-tokenized examples only (both empty otherwise): the ids are the example, used verbatim
  // (no BOS is added; the dataset holds whatever its tokenizer adds); answer_ids is also the
  // demonstration. (The `{}` keep brace-initialising the three text fields free of
  // -Wmissing-field-initializers.)
  std::vector<std::int32_t> prompt_ids{};
  std::vector<std::int32_t> answer_ids{};
  std::string source{};       // where a dataset example came from, "path:line" ("" for generated tasks)
  bool pre_tokenized() const { return !prompt_ids.empty(); }
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  // Pure function of its arguments (see above).
  virtual TaskExample example(std::uint64_t seed, std::int64_t iteration,
                              std::int64_t index) const = 0;
  // 1.0 for the right answer, else 0.0 or partial credit in [0, 1).
  virtual double score(const TaskExample& ex, const std::string& completion) const = 0;
  // Whether example() returns pre-tokenized examples (then every one of them is).
  virtual bool pre_tokenized() const { return false; }
  // A pre-tokenized example's reward from the completion's ids (EOS included when drawn): 1.0
  // when the ids before the first EOS are exactly ex.answer_ids, else 0.0. Only for tasks whose
  // examples are pre-tokenized (InputError otherwise).
  virtual double score_ids(const TaskExample& ex, const std::vector<std::int32_t>& completion) const;
};

// Difficulty ranges (inclusive) of the generated tasks:
//   sort     number of digits (0..9, repeats allowed) to sort ascending   2..32
//   add      largest number of digits of each operand (each operand gets
//            1..difficulty digits, no leading zeros)                        1..18
//   reverse  length of the lowercase string to reverse                     2..64
// `jsonl` ignores the difficulty; it reads dataset_path (required, and only allowed for it).
// Its lines are all text, {"prompt": str, "answer": str}, or all token ids, {"prompt_ids":
// [int...], "answer_ids": [int...], "answer": optional str}; a pre-tokenized dataset needs
// eos_id >= 0 (the byte tokenizer's EOS means nothing to the dataset's tokenizer).
struct TaskOptions {
  std::string name = "sort";    // sort | add | reverse | jsonl
  int difficulty = 4;
  bool partial_credit = false;
  std::string dataset_path;     // jsonl only
  std::int64_t eos_id = -1;     // rl.eos_id: ends a pre-tokenized completion; -1: unset
};

// Unknown name, difficulty out of range, a dataset that cannot be read or parsed, or an option
// the task does not support: InputError naming the value and what is allowed.
std::unique_ptr<Task> make_task(const TaskOptions& options);

// The names make_task accepts, in documentation order.
std::vector<std::string> task_names();

}  // namespace shardrl
