// The byte tokenizer and the verifiable tasks: generators checked against answers computed here
// independently, determinism in (seed, iteration, index), pinned examples (a change in the
// random stream would change every run's data), scorers on right, wrong and malformed
// completions with exact partial-credit values, and every jsonl loading error by its message;
// pre-tokenized jsonl datasets: parsing, the one-kind-per-file rule, and exact scoring on ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "rl/task.hpp"
#include "rl/tokenizer.hpp"

namespace shardrl {
namespace {

namespace tok = tokenizer;

std::unique_ptr<Task> task(const std::string& name, int difficulty, bool partial = false) {
  TaskOptions o;
  o.name = name;
  o.difficulty = difficulty;
  o.partial_credit = partial;
  return make_task(o);
}

std::string input_error_of(const TaskOptions& o) {
  try {
    make_task(o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

// Splits "a b c" on single spaces.
std::vector<std::string> fields(const std::string& s) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == ' ') out.emplace_back(); else out.back().push_back(c);
  }
  return out;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// ---------------------------------------------------------------------------------- tokenizer

TEST(Tokenizer, Constants) {
  EXPECT_EQ(tok::kBos, 256);
  EXPECT_EQ(tok::kEos, 257);
  EXPECT_EQ(tok::kPad, 258);
  EXPECT_EQ(tok::kVocabSize, 259);
}

TEST(Tokenizer, EncodeIsBytes) {
  EXPECT_EQ(tok::encode("add: 1+2=\n"),
            (std::vector<std::int32_t>{97, 100, 100, 58, 32, 49, 43, 50, 61, 10}));
  EXPECT_TRUE(tok::encode("").empty());
  // "é" is two UTF-8 bytes; ids are the unsigned byte values.
  EXPECT_EQ(tok::encode("\xc3\xa9"), (std::vector<std::int32_t>{0xc3, 0xa9}));
}

TEST(Tokenizer, RoundTripAllBytes) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::vector<std::int32_t> ids = tok::encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[static_cast<std::size_t>(b)], b);
  EXPECT_EQ(tok::decode(ids), all);
  const std::string mixed = "na\xc3\xafve \xe2\x82\xac \xff\xfe\x00x";
  EXPECT_EQ(tok::decode(tok::encode(mixed)), mixed);
}

TEST(Tokenizer, SpecialsDecodeToNothingAndEosStops) {
  EXPECT_EQ(tok::decode({tok::kBos, 104, 105, tok::kPad}), "hi");
  EXPECT_EQ(tok::decode({104, tok::kEos, 105, 106}), "h");
  EXPECT_EQ(tok::decode({tok::kEos, 104}), "");
  EXPECT_EQ(tok::decode({tok::kBos, tok::kPad, tok::kPad}), "");
  EXPECT_EQ(tok::decode(std::vector<std::int32_t>{}), "");
  const std::int32_t raw[] = {tok::kBos, 49, 50, tok::kEos, 51};
  EXPECT_EQ(tok::decode(raw, 5), "12");
  EXPECT_EQ(tok::decode(raw, 2), "1");
}

TEST(Tokenizer, CompletionOfALargerVocabularyIsScoredNotAnError) {
  // "1 2" then an id of a 128k vocabulary, then EOS: the answer gains a byte no answer has.
  EXPECT_EQ(tokenizer::decode_completion({'1', ' ', '2', 70000, tokenizer::kEos, 9}), "1 2\xff");
  EXPECT_EQ(tokenizer::decode_completion({'7', tokenizer::kPad, tokenizer::kEos}), "7");
  auto task = make_task(TaskOptions{});
  TaskExample ex = task->example(1, 0, 0);
  std::vector<std::int32_t> ids = tokenizer::encode(ex.answer);
  EXPECT_EQ(task->score(ex, tokenizer::decode_completion(ids)), 1.0);
  ids.insert(ids.begin() + 1, 1000);
  EXPECT_EQ(task->score(ex, tokenizer::decode_completion(ids)), 0.0);
}

TEST(Tokenizer, OutOfVocabularyIsAnError) {
  try {
    tok::decode({104, 259});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "token id 259 at position 1 is outside the vocabulary (0..258)");
  }
  EXPECT_THROW(tok::decode({-1}), InputError);
  // Past EOS nothing is read, so nothing is checked.
  EXPECT_EQ(tok::decode({104, tok::kEos, 1000}), "h");
}

// ---------------------------------------------------------------------------------- factory

TEST(TaskFactory, NamesAndErrors) {
  EXPECT_EQ(task_names(), (std::vector<std::string>{"sort", "add", "reverse", "jsonl"}));
  for (const char* n : {"sort", "add", "reverse"}) EXPECT_EQ(task(n, 4)->name(), n);

  TaskOptions o;
  o.name = "multiply";
  EXPECT_EQ(input_error_of(o), "unknown task 'multiply' (known tasks: sort, add, reverse, jsonl)");
  o.name = "sort";
  o.difficulty = 1;
  EXPECT_EQ(input_error_of(o), "task 'sort': difficulty 1 is out of range (allowed 2..32)");
  o.difficulty = 33;
  EXPECT_EQ(input_error_of(o), "task 'sort': difficulty 33 is out of range (allowed 2..32)");
  o.name = "add";
  o.difficulty = 0;
  EXPECT_EQ(input_error_of(o), "task 'add': difficulty 0 is out of range (allowed 1..18)");
  o.difficulty = 19;
  EXPECT_EQ(input_error_of(o), "task 'add': difficulty 19 is out of range (allowed 1..18)");
  o.name = "reverse";
  o.difficulty = 65;
  EXPECT_EQ(input_error_of(o), "task 'reverse': difficulty 65 is out of range (allowed 2..64)");
  o.difficulty = -3;
  EXPECT_EQ(input_error_of(o), "task 'reverse': difficulty -3 is out of range (allowed 2..64)");
  o.difficulty = 4;
  o.dataset_path = "data.jsonl";
  EXPECT_EQ(input_error_of(o),
            "task 'reverse' takes no dataset path (got 'data.jsonl'); only task 'jsonl' reads one");
  // The ends of each range are accepted.
  EXPECT_NO_THROW(task("sort", 2));
  EXPECT_NO_THROW(task("sort", 32));
  EXPECT_NO_THROW(task("add", 1));
  EXPECT_NO_THROW(task("add", 18));
  EXPECT_NO_THROW(task("reverse", 2));
  EXPECT_NO_THROW(task("reverse", 64));
}

// ---------------------------------------------------------------------------------- generators

TEST(TaskSort, GeneratorAgainstIndependentSort) {
  for (int n : {2, 3, 7, 32}) {
    auto t = task("sort", n);
    for (std::int64_t i = 0; i < 300; ++i) {
      const TaskExample ex = t->example(1234, i / 10, i);
      ASSERT_TRUE(starts_with(ex.prompt, "sort: ")) << ex.prompt;
      ASSERT_EQ(ex.prompt.back(), '\n');
      const std::string body = ex.prompt.substr(6, ex.prompt.size() - 7);
      const std::vector<std::string> f = fields(body);
      ASSERT_EQ(f.size(), static_cast<std::size_t>(n)) << ex.prompt;
      std::vector<int> digits;
      for (const std::string& d : f) {
        ASSERT_EQ(d.size(), 1u) << ex.prompt;
        ASSERT_TRUE(d[0] >= '0' && d[0] <= '9') << ex.prompt;
        digits.push_back(d[0] - '0');
      }
      std::sort(digits.begin(), digits.end());
      std::string want;
      for (int d : digits) want += (want.empty() ? "" : " ") + std::to_string(d);
      EXPECT_EQ(ex.answer, want) << ex.prompt;
      EXPECT_EQ(ex.demonstration, ex.answer);
      EXPECT_EQ(t->score(ex, ex.answer), 1.0);
      EXPECT_EQ(t->score(ex, ex.demonstration), 1.0);
    }
  }
}

TEST(TaskAdd, GeneratorAgainstIndependentSum) {
  for (int d : {1, 2, 3, 9, 18}) {
    auto t = task("add", d);
    std::set<std::size_t> lengths_seen;
    for (std::int64_t i = 0; i < 400; ++i) {
      const TaskExample ex = t->example(77, 3, i);
      ASSERT_TRUE(starts_with(ex.prompt, "add: ")) << ex.prompt;
      ASSERT_EQ(ex.prompt.substr(ex.prompt.size() - 2), "=\n") << ex.prompt;
      const std::string body = ex.prompt.substr(5, ex.prompt.size() - 7);
      const std::size_t plus = body.find('+');
      ASSERT_NE(plus, std::string::npos) << ex.prompt;
      const std::string a = body.substr(0, plus), b = body.substr(plus + 1);
      for (const std::string& s : {a, b}) {
        ASSERT_GE(s.size(), 1u) << ex.prompt;
        ASSERT_LE(s.size(), static_cast<std::size_t>(d)) << ex.prompt;
        ASSERT_TRUE(s.size() == 1 || s[0] != '0') << "leading zero: " << ex.prompt;
        ASSERT_EQ(s.find_first_not_of("0123456789"), std::string::npos) << ex.prompt;
        lengths_seen.insert(s.size());
      }
      const unsigned long long sum = std::strtoull(a.c_str(), nullptr, 10) +
                                     std::strtoull(b.c_str(), nullptr, 10);
      EXPECT_EQ(ex.answer, std::to_string(sum)) << ex.prompt;
      EXPECT_EQ(ex.demonstration, ex.answer);
      EXPECT_EQ(t->score(ex, ex.answer), 1.0);
    }
    // Every operand length 1..d occurs (d <= 18, 800 operands).
    EXPECT_EQ(lengths_seen.size(), static_cast<std::size_t>(d));
  }
}

TEST(TaskReverse, GeneratorAgainstIndependentReverse) {
  for (int n : {2, 5, 64}) {
    auto t = task("reverse", n);
    for (std::int64_t i = 0; i < 300; ++i) {
      const TaskExample ex = t->example(5, 0, i);
      ASSERT_TRUE(starts_with(ex.prompt, "reverse: ")) << ex.prompt;
      ASSERT_EQ(ex.prompt.back(), '\n');
      const std::string text = ex.prompt.substr(9, ex.prompt.size() - 10);
      ASSERT_EQ(text.size(), static_cast<std::size_t>(n));
      for (char c : text) ASSERT_TRUE(c >= 'a' && c <= 'z') << ex.prompt;
      std::string want;
      for (std::size_t k = text.size(); k > 0; --k) want.push_back(text[k - 1]);
      EXPECT_EQ(ex.answer, want);
      EXPECT_EQ(ex.demonstration, ex.answer);
      EXPECT_EQ(t->score(ex, ex.answer), 1.0);
    }
  }
}

TEST(Tasks, ExamplesArePureFunctionsOfSeedIterationIndex) {
  for (const auto& [name, difficulty] :
       std::vector<std::pair<std::string, int>>{{"sort", 8}, {"add", 6}, {"reverse", 8}}) {
    auto t1 = task(name, difficulty);
    auto t2 = task(name, difficulty, /*partial=*/true);   // a second instance, other options
    std::set<std::string> prompts;
    for (std::int64_t i = 0; i < 200; ++i) {
      const TaskExample a = t1->example(42, 7, i);
      const TaskExample b = t2->example(42, 7, i);
      EXPECT_EQ(a.prompt, b.prompt);
      EXPECT_EQ(a.answer, b.answer);
      prompts.insert(a.prompt);
    }
    EXPECT_GE(prompts.size(), 195u) << name;   // different indices: different examples, mostly
    // Each of seed, iteration and index changes the example.
    const std::string base = t1->example(42, 7, 0).prompt;
    int differ_seed = 0, differ_iter = 0, differ_index = 0;
    for (std::int64_t k = 1; k <= 20; ++k) {
      differ_seed += t1->example(42 + static_cast<std::uint64_t>(k), 7, 0).prompt != base;
      differ_iter += t1->example(42, 7 + k, 0).prompt != base;
      differ_index += t1->example(42, 7, k).prompt != base;
    }
    EXPECT_GE(differ_seed, 19) << name;
    EXPECT_GE(differ_iter, 19) << name;
    EXPECT_GE(differ_index, 19) << name;
  }
  // Large values are fine (all 64 bits take part).
  auto t = task("sort", 8);
  EXPECT_NE(t->example(1, 0, 0).prompt, t->example(1 + (std::uint64_t{1} << 40), 0, 0).prompt);
}

// Pinned examples: the generators' random stream is part of the run's reproducibility (a
// resumed or re-run job must see the same data), so a change here must be deliberate.
TEST(Tasks, PinnedExamples) {
  const TaskExample s = task("sort", 6)->example(1234, 0, 0);
  EXPECT_EQ(s.prompt, "sort: 9 1 4 0 7 2\n");
  EXPECT_EQ(s.answer, "0 1 2 4 7 9");
  const TaskExample a = task("add", 4)->example(1234, 0, 0);
  EXPECT_EQ(a.prompt, "add: 55+241=\n");
  EXPECT_EQ(a.answer, "296");
  const TaskExample r = task("reverse", 6)->example(1234, 0, 0);
  EXPECT_EQ(r.prompt, "reverse: lyfvyu\n");
  EXPECT_EQ(r.answer, "uyvfyl");
  EXPECT_EQ(task("sort", 6)->example(1234, 5, 17).prompt, "sort: 1 7 0 9 2 8\n");
}

// ---------------------------------------------------------------------------------- scorers

TEST(TaskSort, ScoreExactOnly) {
  auto t = task("sort", 4);
  const TaskExample ex{"sort: 3 1 2 1\n", "1 1 2 3", "1 1 2 3"};
  EXPECT_EQ(t->score(ex, "1 1 2 3"), 1.0);
  EXPECT_EQ(t->score(ex, "1 1 2 3\n"), 1.0);      // trailing whitespace is ignored
  EXPECT_EQ(t->score(ex, "1 1 2 3  \t\r\n"), 1.0);
  EXPECT_EQ(t->score(ex, " 1 1 2 3"), 0.0);       // leading is not
  EXPECT_EQ(t->score(ex, ""), 0.0);
  EXPECT_EQ(t->score(ex, "1 1 3 2"), 0.0);
  EXPECT_EQ(t->score(ex, "1123"), 0.0);
  EXPECT_EQ(t->score(ex, "1 1 2 3 4"), 0.0);
  EXPECT_EQ(t->score(ex, "1 1 2 3\n1"), 0.0);     // extra tokens after a newline
  EXPECT_EQ(t->score(ex, "\xff\xfe garbage"), 0.0);
}

TEST(TaskSort, ScorePartialCredit) {
  auto t = task("sort", 4, true);
  const TaskExample ex{"sort: 3 1 2 1\n", "1 1 2 3", "1 1 2 3"};
  EXPECT_EQ(t->score(ex, "1 1 2 3"), 1.0);
  EXPECT_EQ(t->score(ex, "1 1 3 2"), 0.5);
  EXPECT_EQ(t->score(ex, "1 1 2 9"), 0.75);
  EXPECT_EQ(t->score(ex, "3 2 1 1"), 0.0);
  EXPECT_EQ(t->score(ex, "1 1 2 3\n"), 1.0);
  EXPECT_EQ(t->score(ex, "1 1 2"), 0.0);          // wrong count: no credit
  EXPECT_EQ(t->score(ex, "1 1 2 3 4"), 0.0);
  EXPECT_EQ(t->score(ex, "1123"), 0.0);
  EXPECT_EQ(t->score(ex, "1  1 2 3"), 0.0);       // double space: 5 fields
  EXPECT_EQ(t->score(ex, "1 1 2 33"), 0.75);
  EXPECT_EQ(t->score(ex, "1 1 2 03"), 0.75);
  EXPECT_EQ(t->score(ex, ""), 0.0);
  EXPECT_EQ(t->score(ex, "\xff \xfe \x01 3"), 0.25);
}

TEST(TaskAdd, ScoreExactOnly) {
  auto t = task("add", 3);
  const TaskExample ex{"add: 123+45=\n", "168", "168"};
  EXPECT_EQ(t->score(ex, "168"), 1.0);
  EXPECT_EQ(t->score(ex, "168 \n"), 1.0);
  EXPECT_EQ(t->score(ex, "0168"), 0.0);
  EXPECT_EQ(t->score(ex, "+168"), 0.0);
  EXPECT_EQ(t->score(ex, "168.0"), 0.0);
  EXPECT_EQ(t->score(ex, "167"), 0.0);
  EXPECT_EQ(t->score(ex, "16"), 0.0);
  EXPECT_EQ(t->score(ex, ""), 0.0);
  EXPECT_EQ(t->score(ex, "168 168"), 0.0);
}

TEST(TaskAdd, ScorePartialCredit) {
  auto t = task("add", 3, true);
  const TaskExample ex{"add: 123+45=\n", "168", "168"};
  EXPECT_EQ(t->score(ex, "168"), 1.0);
  EXPECT_EQ(t->score(ex, "168\n"), 1.0);
  EXPECT_DOUBLE_EQ(t->score(ex, "178"), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(t->score(ex, "167"), 2.0 / 3.0);
  EXPECT_EQ(t->score(ex, "999"), 0.0);
  EXPECT_DOUBLE_EQ(t->score(ex, "68"), 2.0 / 3.0);     // missing digit: aligned right
  EXPECT_DOUBLE_EQ(t->score(ex, "16"), 0.0);           // "16" vs "68": 6/8 and 1/6 differ
  EXPECT_EQ(t->score(ex, "0168"), 0.75);               // leading zero costs
  EXPECT_EQ(t->score(ex, "00168"), 0.6);
  EXPECT_EQ(t->score(ex, "2168"), 0.75);               // extra digit
  EXPECT_EQ(t->score(ex, "+168"), 0.0);                // not all digits
  EXPECT_EQ(t->score(ex, "-168"), 0.0);
  EXPECT_EQ(t->score(ex, "1 68"), 0.0);
  EXPECT_EQ(t->score(ex, "168abc"), 0.0);
  EXPECT_EQ(t->score(ex, ""), 0.0);
  EXPECT_EQ(t->score(ex, " \n"), 0.0);
  const TaskExample zero{"add: 0+0=\n", "0", "0"};
  EXPECT_EQ(t->score(zero, "0"), 1.0);
  EXPECT_EQ(t->score(zero, "00"), 0.5);
}

TEST(TaskReverse, ScoreExactAndPartial) {
  auto exact = task("reverse", 4);
  auto partial = task("reverse", 4, true);
  const TaskExample ex{"reverse: abcd\n", "dcba", "dcba"};
  EXPECT_EQ(exact->score(ex, "dcba"), 1.0);
  EXPECT_EQ(exact->score(ex, "dcba\n"), 1.0);
  EXPECT_EQ(exact->score(ex, "dcbx"), 0.0);
  EXPECT_EQ(exact->score(ex, "abcd"), 0.0);
  EXPECT_EQ(exact->score(ex, ""), 0.0);
  EXPECT_EQ(partial->score(ex, "dcba"), 1.0);
  EXPECT_EQ(partial->score(ex, "dcba \n"), 1.0);
  EXPECT_EQ(partial->score(ex, "dcbx"), 0.75);
  EXPECT_EQ(partial->score(ex, "dxbx"), 0.5);
  EXPECT_EQ(partial->score(ex, "abcd"), 0.0);
  EXPECT_EQ(partial->score(ex, "dcb"), 0.0);          // length differs: no credit
  EXPECT_EQ(partial->score(ex, "dcbaa"), 0.0);
  EXPECT_EQ(partial->score(ex, " dcb"), 0.0);         // shifted by a leading space
  EXPECT_EQ(partial->score(ex, "DCBA"), 0.0);
  EXPECT_EQ(partial->score(ex, "dc\xff\x01"), 0.5);
  EXPECT_EQ(partial->score(ex, ""), 0.0);
}

// Partial credit never reaches 1 for a wrong answer: random perturbations of real examples.
TEST(Tasks, PartialCreditBelowOneForEveryWrongAnswer) {
  const std::string alphabet = "0123456789 abz+\n\t-";
  std::uint64_t state = 88172645463325252ull;
  auto next = [&state]() {   // xorshift64: a test-local stream independent of the library's
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (const auto& [name, difficulty] :
       std::vector<std::pair<std::string, int>>{{"sort", 5}, {"add", 3}, {"reverse", 5}}) {
    auto t = task(name, difficulty, true);
    int partial_seen = 0;
    for (std::int64_t i = 0; i < 2000; ++i) {
      const TaskExample ex = t->example(9, 1, i);
      std::string c = ex.answer;
      switch (next() % 4) {
        case 0: c[next() % c.size()] = alphabet[next() % alphabet.size()]; break;
        case 1: c.insert(next() % (c.size() + 1), 1, alphabet[next() % alphabet.size()]); break;
        case 2: c.erase(next() % c.size(), 1); break;
        default: std::swap(c[next() % c.size()], c[next() % c.size()]); break;
      }
      const double s = t->score(ex, c);
      const bool right = [&] {
        std::string x = c;
        while (!x.empty() && std::string(" \t\r\n\v\f").find(x.back()) != std::string::npos)
          x.pop_back();
        return x == ex.answer;
      }();
      if (right) {
        EXPECT_EQ(s, 1.0) << name << " '" << c << "'";
      } else {
        EXPECT_GE(s, 0.0) << name << " '" << c << "'";
        EXPECT_LT(s, 1.0) << name << " '" << c << "' for '" << ex.answer << "'";
        partial_seen += (s > 0.0);
      }
    }
    EXPECT_GT(partial_seen, 100) << name;   // partial credit is actually given
  }
}

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
      {"", ": no examples"},
      {"\n  \n\r\n", ": no examples"},
  };
  for (const Case& c : cases) {
    const std::string path = write(c.text);
    EXPECT_EQ(input_error_of(options(path)), path + c.message) << c.text;
  }

  // Invalid JSON: the parser's own explanation is kept in parentheses.
  for (const std::string& bad : {std::string("{\"prompt\": \"p\", \"answer\": \"a\""),
                                 std::string("{prompt: 1}"), std::string("{\"a\": 1} x")}) {
    const std::string path = write(good + "\n" + bad + "\n" + good);
    const std::string msg = input_error_of(options(path));
    EXPECT_TRUE(starts_with(msg, path + ":3: not valid JSON (")) << msg;
    EXPECT_EQ(msg.back(), ')') << msg;
    EXPECT_EQ(msg.find("[json.exception"), std::string::npos) << msg;
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
