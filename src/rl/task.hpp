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
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rl/scored.hpp"

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
  // The rewards of a batch of pre-tokenized completions, row by row, and which pass: score_ids of
  // each (a pass where it is 1), unless the task scores a batch at once (a reward process answers
  // a whole rollout's requests, and may mark its passes).
  virtual std::vector<Scored> score_ids_batch(const std::vector<TaskExample>& examples,
                                              const std::vector<std::vector<std::int32_t>>& completions) const;
  // The id that ends a completion when rl.eos_id is unset: the task's tokenizer's (-1: none).
  virtual std::int32_t eos_id() const { return -1; }
  // Every id that ends a completion, eos_id() first: with rl.eos_id unset also the model's
  // others (its generation_config.json's eos_token_id; rollout/stop_ids.hpp). Empty: eos_id()
  // (or rl.eos_id) alone.
  virtual std::vector<std::int32_t> end_ids() const { return {}; }
  // The files a dataset's task is made of, each with its role ("dataset", or the tokenizer's and
  // template's file names), in a fixed order: what its checksum covers (rl/task_checksum.hpp).
  // None for a generated task.
  struct InputFile {
    std::string role;
    std::string path;
  };
  virtual std::vector<InputFile> input_files() const { return {}; }
  // The evaluation's files (rl.eval_dataset): apart from input_files, as they change what is
  // measured, not what is trained (a resume may take an edited one), but every rank must read the
  // same, since each scores its share of them.
  virtual std::vector<InputFile> eval_files() const { return {}; }
  // A generated task's longest prompt ("" for a dataset's task): what the job checks at start
  // against the rows and the generator.
  virtual std::string longest_prompt() const { return {}; }
  // A generated task's longest demonstration (its longest answer; "" for a dataset's task): what
  // the job checks at start when a warm-up is to run, and against rollout.max_new_tokens.
  virtual std::string longest_demonstration() const { return {}; }
  // Every example a dataset task can draw, once each (a generated task has none to list): what
  // the job checks at start, so a bad line stops it before any compute, not when a batch draws it.
  virtual void for_each_dataset_example(const std::function<void(const TaskExample&)>&) const {}
  // The held-out split evaluated during training (text task): its size, and example i of it.
  virtual std::int64_t eval_count() const { return 0; }
  // InputError when what scores the task cannot (a reward command that ended as it started),
  // asked once on every rank before any compute.
  virtual void check_scorer() {}
  virtual TaskExample eval_example(std::int64_t index) const;
  // A pre-tokenized example's reward from the completion's ids (EOS included when drawn): 1.0
  // when the ids before the first EOS are exactly ex.answer_ids, else 0.0. Only for tasks whose
  // examples are pre-tokenized (InputError otherwise).
  virtual double score_ids(const TaskExample& ex, const std::vector<std::int32_t>& completion) const;
  // A check that gives up scoring that waits on a reward process (RewardCommand::give_up_when);
  // tasks that score in-process finish their batch.
  virtual void give_up_scoring_when(std::function<bool()>) {}
};

// Difficulty ranges (inclusive) of the generated tasks:
//   sort     number of digits (0..9, repeats allowed) to sort ascending   2..32
//   add      largest number of digits of each operand (each operand gets
//            1..difficulty digits, no leading zeros)                        1..18
//   reverse  length of the lowercase string to reverse                     2..64
// `jsonl` and `text` ignore the difficulty; they read dataset_path (required, and only allowed for them).
// Its lines are all text, {"prompt": str, "answer": str}, or all token ids, {"prompt_ids":
// [int...], "answer_ids": [int...], "answer": optional str}; a pre-tokenized dataset needs
// eos_id >= 0 (the byte tokenizer's EOS means nothing to the dataset's tokenizer).
// The text task (task_text.cpp, docs/text-rl.md): prompts of a JSONL dataset rendered with the
// model's chat template and encoded with its own tokenizer, once, at start; rewards on the
// decoded completion.
struct TextTaskOptions {
  std::string tokenizer_dir;              // tokenizer.json, tokenizer_config.json
  std::string eval_path;                  // "": no eval split
  std::string prompt_key = "prompt", answer_key = "answer", solution_key = "solution";
  std::string system_prompt;
  bool chat_template = true;
  std::string template_variables = "{}";  // a JSON object
  std::int64_t max_prompt_tokens = 0;     // longer prompts are dropped (> 0)
  std::string reward = "math";            // math | exact | regex | command
  double format_reward = 0;
  std::string reward_pattern;
  std::vector<std::string> reward_command;
  double reward_timeout_s = 60;
};

struct TaskOptions {
  std::string name = "sort";    // sort | add | reverse | jsonl | text
  int difficulty = 4;
  bool partial_credit = false;
  std::string dataset_path;     // jsonl and text
  std::int64_t eos_id = -1;     // rl.eos_id: ends a pre-tokenized completion; -1: unset
  TextTaskOptions text;         // text only
  // False for a task that is only evaluated (shardrl evaluate): text reads its eval split and
  // not the training split, whose file need not be there; example() then has nothing to draw.
  bool training_split = true;
};

// Unknown name, difficulty out of range, a dataset that cannot be read or parsed, or an option
// the task does not support: InputError naming the value and what is allowed.
std::unique_ptr<Task> make_task(const TaskOptions& options);

// The names make_task accepts, in documentation order.
std::vector<std::string> task_names();

}  // namespace shardrl
