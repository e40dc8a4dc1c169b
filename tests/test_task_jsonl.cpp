// The jsonl task: every loading error by its message; pre-tokenized datasets: parsing, the
// one-kind-per-file rule, and exact scoring on ids.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "rl/task.hpp"
#include "rl/tokenizer.hpp"
#include "task_test_util.hpp"

namespace shardrl {
namespace {

namespace tok = tokenizer;
using namespace task_test;

// ---------------------------------------------------------------------------------- jsonl

class JsonlTask : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("shardrl_test_tasks_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes `text` to <dir>/data.jsonl and returns that path.
  std::string write(const std::string& text, const std::string& name = "data.jsonl") {
    const std::filesystem::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }

  static TaskOptions options(const std::string& path) {
    TaskOptions o;
    o.name = "jsonl";
    o.dataset_path = path;
    return o;
  }

  std::filesystem::path dir_;
};

TEST_F(JsonlTask, GoodFile) {
  const std::string path = write(
      "{\"prompt\": \"capital of France?\\n\", \"answer\": \"Paris\", \"id\": 1}\n"
      "\n"
      "   \n"
      "{\"answer\": \"4\", \"prompt\": \"2+2=\", \"tags\": [\"math\"]}\r\n"
      "{\"prompt\": \"caf\\u00e9\", \"answer\": \"\xc3\xa9t\xc3\xa9\"}");   // no final newline
  TaskOptions o = options(path);
  o.difficulty = 999;   // ignored by jsonl
  auto t = make_task(o);
  EXPECT_EQ(t->name(), "jsonl");

  std::set<std::string> seen;
  for (std::int64_t i = 0; i < 300; ++i) {
    const TaskExample ex = t->example(3, 2, i);
    const TaskExample again = t->example(3, 2, i);
    EXPECT_EQ(ex.prompt, again.prompt);
    EXPECT_EQ(ex.answer, ex.demonstration);
    if (ex.prompt == "capital of France?\n") EXPECT_EQ(ex.answer, "Paris");
    else if (ex.prompt == "2+2=") EXPECT_EQ(ex.answer, "4");
    else if (ex.prompt == "caf\xc3\xa9") EXPECT_EQ(ex.answer, "\xc3\xa9t\xc3\xa9");
    else ADD_FAILURE() << "unexpected prompt " << ex.prompt;
    seen.insert(ex.prompt);
  }
  EXPECT_EQ(seen.size(), 3u);   // every line is drawn

  const TaskExample ex{"2+2=", "4", "4"};
  EXPECT_EQ(t->score(ex, "4"), 1.0);
  EXPECT_EQ(t->score(ex, "4\n"), 1.0);
  EXPECT_EQ(t->score(ex, "4 "), 1.0);
  EXPECT_EQ(t->score(ex, "5"), 0.0);
  EXPECT_EQ(t->score(ex, "44"), 0.0);
  EXPECT_EQ(t->score(ex, " 4"), 0.0);
  EXPECT_EQ(t->score(ex, ""), 0.0);
  const TaskExample trailing{"q", "yes\n", "yes\n"};   // trailing whitespace of the answer too
  EXPECT_EQ(t->score(trailing, "yes"), 1.0);
}

TEST_F(JsonlTask, Errors) {
  const std::string good = "{\"prompt\": \"p\", \"answer\": \"a\"}\n";
  struct Case {
    std::string text;
    std::string message;   // after "<path>"
  };
  const std::vector<Case> cases = {
      {good + "\n{\"prompt\": \"p\"}\n", ":3: missing string field \"answer\""},
      {good + good + good + "\n{\"answer\": \"a\"}\n", ":5: missing string field \"prompt\""},
      {good + "{\"prompt\": \"p\", \"answer\": 4}\n",
       ":2: field \"answer\" must be a string, got number"},
      {"{\"prompt\": null, \"answer\": \"a\"}\n", ":1: field \"prompt\" must be a string, got null"},
      {good + "[\"p\", \"a\"]\n", ":2: expected a JSON object, got array"},
      {"\"just a string\"\n", ":1: expected a JSON object, got string"},
      {good + "{\"prompt\": \"\", \"answer\": \"a\"}\n", ":2: field \"prompt\" is empty"},
      {good + "{\"prompt\": \"p\", \"answer\": \" \\n\"}\n", ":2: field \"answer\" is empty"},
      // A key twice in one object (nlohmann kept the last: the first answer went silently).
      {good + "{\"prompt\": \"p\", \"answer\": \"1 3\", \"answer\": \" \"}\n",
       ":2: key \"answer\" appears twice in one object"},
      {good + "{\"prompt\": \"p\", \"answer\": \"a\", \"meta\": [{\"k\": 1}, {\"k\": 2, \"k\": 3}]}\n",
       ":2: key \"k\" appears twice in one object"},
      {"", ": no examples"},
      {"\n  \n\r\n", ": no examples"},
  };
  for (const Case& c : cases) {
    const std::string path = write(c.text);
    EXPECT_EQ(input_error_of(options(path)), path + c.message) << c.text;
  }

  // Invalid JSON: the parser's own explanation is kept in parentheses.
  for (const std::string& bad : {std::string("{\"prompt\": \"p\", \"answer\": \"a\""),
                                 std::string("{prompt: 1}"), std::string("{\"a\": 1} x"),
                                 // a number JSON cannot hold: nlohmann's out_of_range, which
                                 // stopped the job as an internal error
                                 std::string("{\"prompt\": \"1+1=\", \"answer\": \"2\", \"meta\": 1e999}")}) {
    const std::string path = write(good + "\n" + bad + "\n" + good);
    const std::string msg = input_error_of(options(path));
    EXPECT_TRUE(starts_with(msg, path + ":3: not valid JSON (")) << msg;
    EXPECT_EQ(msg.back(), ')') << msg;
    EXPECT_EQ(msg.find("[json.exception"), std::string::npos) << msg;
  }
  {   // nested past the bound (a line of 100,000 nested lists overflowed the parser's stack)
    const std::string path = write(good + "\n" + std::string(100000, '[') + std::string(100000, ']') + "\n");
    EXPECT_EQ(input_error_of(options(path)), path + ":3: JSON nested deeper than 512 levels");
  }
  {
    const std::string path = write("{\"prompt\": \"p\", \"answer\": \"a\"} trailing\n");
    EXPECT_EQ(input_error_of(options(path)).rfind(path + ":1: not valid JSON (", 0), 0u);
  }
  {
    const std::string path = write(good + "{prompt: 1}\n");
    EXPECT_EQ(input_error_of(options(path)),
              path + ":2: not valid JSON (parse error at column 2: syntax error while parsing "
                     "object key - invalid literal; last read: '{p'; expected string literal)");
  }

  const std::string missing = (dir_ / "x.jsonl").string();
  EXPECT_EQ(input_error_of(options(missing)),
            "cannot read dataset '" + missing + "': No such file or directory");
  EXPECT_EQ(input_error_of(options(dir_.string())),
            "cannot read dataset '" + dir_.string() + "': Is a directory");

  TaskOptions o = options(write(good));
  o.partial_credit = true;
  EXPECT_EQ(input_error_of(o),
            "task 'jsonl' has no partial credit (exact-match reward only); turn partial credit off");
  EXPECT_EQ(input_error_of(options("")), "task 'jsonl' needs a dataset path");
}

TEST_F(JsonlTask, RelativePathNamedAsGiven) {
  const std::string path = write("{\"prompt\": \"p\"}\n");
  const std::filesystem::path old = std::filesystem::current_path();
  std::filesystem::current_path(dir_);
  const std::string msg = input_error_of(options("data.jsonl"));
  std::filesystem::current_path(old);
  EXPECT_EQ(msg, "data.jsonl:1: missing string field \"answer\"");
  (void)path;
}

// ------------------------------------------------------------------------ pre-tokenized jsonl

TEST_F(JsonlTask, PreTokenizedFile) {
  const std::string path = write(
      "{\"prompt_ids\": [1, 17, 4], \"answer_ids\": [9, 8], \"answer\": \"yes\"}\n"
      "\n"
      "{\"answer_ids\": [2147483647], \"prompt_ids\": [0], \"prompt\": \"ignored\"}\r\n"
      "{\"prompt_ids\": [5], \"answer_ids\": [6, 6, 6]}");   // no "answer", no final newline
  TaskOptions o = options(path);
  o.eos_id = 3;
  auto t = make_task(o);
  EXPECT_TRUE(t->pre_tokenized());

  std::set<std::string> seen;
  for (std::int64_t i = 0; i < 300; ++i) {
    const TaskExample ex = t->example(3, 2, i);
    EXPECT_TRUE(ex.pre_tokenized());
    EXPECT_EQ(ex.prompt, "") << "a pre-tokenized prompt is only ids";
    EXPECT_EQ(ex.demonstration, "") << "the demonstration is answer_ids";
    if (ex.source == path + ":1") {
      EXPECT_EQ(ex.prompt_ids, (std::vector<std::int32_t>{1, 17, 4})) << "verbatim: no BOS added";
      EXPECT_EQ(ex.answer_ids, (std::vector<std::int32_t>{9, 8}));
      EXPECT_EQ(ex.answer, "yes");
    } else if (ex.source == path + ":3") {
      EXPECT_EQ(ex.prompt_ids, (std::vector<std::int32_t>{0}));
      EXPECT_EQ(ex.answer_ids, (std::vector<std::int32_t>{2147483647}));
      EXPECT_EQ(ex.answer, "");
    } else if (ex.source == path + ":4") {
      EXPECT_EQ(ex.prompt_ids, (std::vector<std::int32_t>{5}));
      EXPECT_EQ(ex.answer_ids, (std::vector<std::int32_t>{6, 6, 6}));
      EXPECT_EQ(ex.answer, "");
    } else {
      ADD_FAILURE() << "unexpected source " << ex.source;
    }
    seen.insert(ex.source);
  }
  EXPECT_EQ(seen.size(), 3u);   // every line is drawn

  // The same (seed, iteration, index) draws the same line as a text dataset of as many lines.
  const auto text = make_task(options(write("{\"prompt\": \"a\", \"answer\": \"1\"}\n\n"
                                            "{\"prompt\": \"b\", \"answer\": \"3\"}\n"
                                            "{\"prompt\": \"c\", \"answer\": \"4\"}\n",
                                            "text.jsonl")));
  for (std::int64_t i = 0; i < 20; ++i) {
    const std::string line = t->example(5, 1, i).source.substr(path.size() + 1);
    EXPECT_EQ(text->example(5, 1, i).source, (dir_ / "text.jsonl").string() + ":" + line) << i;
  }
}

TEST_F(JsonlTask, PreTokenizedScoringIsExactOnIdsBeforeEos) {
  TaskOptions o = options(write("{\"prompt_ids\": [1, 2], \"answer_ids\": [10, 11]}\n"));
  o.eos_id = 7;
  auto t = make_task(o);
  const TaskExample ex = t->example(1, 0, 0);
  ASSERT_EQ(ex.answer_ids, (std::vector<std::int32_t>{10, 11}));
  using Ids = std::vector<std::int32_t>;
  EXPECT_EQ(t->score_ids(ex, Ids{10, 11, 7}), 1.0);
  EXPECT_EQ(t->score_ids(ex, Ids{10, 11, 7, 3, 3}), 1.0) << "ids after EOS are not read";
  EXPECT_EQ(t->score_ids(ex, Ids{10, 11}), 1.0) << "max_new_tokens reached right after the answer";
  EXPECT_EQ(t->score_ids(ex, Ids{10, 12, 7}), 0.0) << "wrong";
  EXPECT_EQ(t->score_ids(ex, Ids{10, 7}), 0.0) << "prefix";
  EXPECT_EQ(t->score_ids(ex, Ids{10}), 0.0) << "prefix, no EOS";
  EXPECT_EQ(t->score_ids(ex, Ids{10, 11, 12, 7}), 0.0) << "longer";
  EXPECT_EQ(t->score_ids(ex, Ids{10, 11, tok::kEos}), 0.0) << "257 is not this dataset's EOS";
  EXPECT_EQ(t->score_ids(ex, Ids{7, 10, 11}), 0.0) << "empty before EOS";
  EXPECT_EQ(t->score_ids(ex, Ids{}), 0.0);
}

TEST_F(JsonlTask, TextPathUnchangedAndNotScoredOnIds) {
  const std::string path = write("{\"prompt\": \"2+2=\", \"answer\": \"4\"}\n");
  TaskOptions o = options(path);
  o.eos_id = 7;   // read only by a pre-tokenized dataset
  auto t = make_task(o);
  EXPECT_FALSE(t->pre_tokenized());
  const TaskExample ex = t->example(1, 0, 0);
  EXPECT_FALSE(ex.pre_tokenized());
  EXPECT_EQ(ex.prompt, "2+2=");
  EXPECT_EQ(ex.answer, "4");
  EXPECT_EQ(ex.demonstration, "4");
  EXPECT_TRUE(ex.prompt_ids.empty());
  EXPECT_TRUE(ex.answer_ids.empty());
  EXPECT_EQ(ex.source, path + ":1");
  EXPECT_EQ(t->score(ex, "4\n"), 1.0);
  EXPECT_EQ(t->score(ex, "44"), 0.0);
  try {
    t->score_ids(ex, {'4'});
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "task 'jsonl' scores decoded text, not token ids (its examples are not pre-tokenized)");
  }
  auto sort = task("sort", 4);
  EXPECT_FALSE(sort->pre_tokenized());
  EXPECT_FALSE(sort->example(1, 0, 0).pre_tokenized());
  EXPECT_THROW(sort->score_ids(sort->example(1, 0, 0), {1}), InputError);
}

TEST_F(JsonlTask, MixedKindsNameTheFirstLineOfTheOtherKind) {
  const std::string text = "{\"prompt\": \"p\", \"answer\": \"a\"}\n";
  const std::string ids = "{\"prompt_ids\": [1], \"answer_ids\": [2]}\n";
  std::string path = write("\n" + text + text + ids + text);
  TaskOptions o = options(path);
  o.eos_id = 0;
  EXPECT_EQ(input_error_of(o), path + ":4: a token-id line ({\"prompt_ids\", \"answer_ids\"}), but line 2 is a text "
                                      "line ({\"prompt\", \"answer\"}); every line of a dataset must be of the same "
                                      "kind");
  o.dataset_path = path = write(ids + "\n" + ids + text);
  EXPECT_EQ(input_error_of(o), path + ":4: a text line ({\"prompt\", \"answer\"}), but line 1 is a token-id line "
                                      "({\"prompt_ids\", \"answer_ids\"}); every line of a dataset must be of the "
                                      "same kind");
  // A line with only "answer_ids" is of the token-id kind, so it is missing its prompt_ids.
  o.dataset_path = path = write(ids + "{\"prompt\": \"p\", \"answer_ids\": [2]}\n");
  EXPECT_EQ(input_error_of(o), path + ":2: missing field \"prompt_ids\" (an array of token ids)");
}

TEST_F(JsonlTask, PreTokenizedErrors) {
  const std::string good = "{\"prompt_ids\": [1], \"answer_ids\": [2]}\n";
  struct Case {
    std::string line;
    std::string message;   // after "<path>:2"
  };
  const std::vector<Case> cases = {
      {"{\"prompt_ids\": [1]}", ": missing field \"answer_ids\" (an array of token ids)"},
      {"{\"prompt_ids\": \"1 2\", \"answer_ids\": [2]}",
       ": field \"prompt_ids\" must be an array of token ids, got string"},
      {"{\"prompt_ids\": [1], \"answer_ids\": {\"0\": 2}}",
       ": field \"answer_ids\" must be an array of token ids, got object"},
      {"{\"prompt_ids\": [], \"answer_ids\": [2]}", ": field \"prompt_ids\" is empty"},
      {"{\"prompt_ids\": [1], \"answer_ids\": []}", ": field \"answer_ids\" is empty"},
      {"{\"prompt_ids\": [1, -1], \"answer_ids\": [2]}",
       ": field \"prompt_ids\" element 1 must be a token id (an integer in 0..2147483647), got -1"},
      {"{\"prompt_ids\": [1], \"answer_ids\": [2, 3, 1.5]}",
       ": field \"answer_ids\" element 2 must be a token id (an integer in 0..2147483647), got 1.5"},
      {"{\"prompt_ids\": [1.0], \"answer_ids\": [2]}",
       ": field \"prompt_ids\" element 0 must be a token id (an integer in 0..2147483647), got 1.0"},
      {"{\"prompt_ids\": [\"7\"], \"answer_ids\": [2]}",
       ": field \"prompt_ids\" element 0 must be a token id (an integer in 0..2147483647), got \"7\""},
      {"{\"prompt_ids\": [true], \"answer_ids\": [2]}",
       ": field \"prompt_ids\" element 0 must be a token id (an integer in 0..2147483647), got true"},
      {"{\"prompt_ids\": [1], \"answer_ids\": [2147483648]}",
       ": field \"answer_ids\" element 0 must be a token id (an integer in 0..2147483647), got 2147483648"},
      {"{\"prompt_ids\": [1], \"answer_ids\": [2], \"answer\": 2}", ": field \"answer\" must be a string, got number"},
      {"{\"prompt_ids\": [1], \"answer_ids\": [2, 5]}",
       ": field \"answer_ids\" element 1 is rl.eos_id = 5: a completion ends at its first EOS, so this answer could "
       "never be matched"},
  };
  for (const Case& c : cases) {
    const std::string path = write(good + c.line + "\n" + good);
    TaskOptions o = options(path);
    o.eos_id = 5;
    EXPECT_EQ(input_error_of(o), path + ":2" + c.message) << c.line;
  }

  // The byte tokenizer's EOS means nothing to the dataset's tokenizer: rl.eos_id is required.
  const std::string path = write("\n" + good + good);
  EXPECT_EQ(input_error_of(options(path)),
            "rl.eos_id is required with the pre-tokenized dataset '" + path + "' (" + path +
                ":2 has \"prompt_ids\"): set it to the id that ends a completion in the dataset's tokenizer");
  TaskOptions o = options(path);
  o.eos_id = 0;
  EXPECT_TRUE(make_task(o)->pre_tokenized());
  o.partial_credit = true;
  EXPECT_EQ(input_error_of(o),
            "task 'jsonl' has no partial credit (exact-match reward only); turn partial credit off");
}

}  // namespace
}  // namespace shardrl
