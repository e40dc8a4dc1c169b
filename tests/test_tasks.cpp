// The byte tokenizer and the verifiable tasks: generators checked against answers computed here
// independently, determinism in (seed, iteration, index), pinned examples (a change in the
// random stream would change every run's data), scorers on right, wrong and malformed
// completions with exact partial-credit values. The jsonl task: test_task_jsonl.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/error.hpp"
#include "rl/task.hpp"
#include "rl/task_chat.hpp"
#include "rl/tokenizer.hpp"
#include "task_test_util.hpp"
#include "text/hf_tokenizer.hpp"

namespace shardrl {
namespace {

namespace tok = tokenizer;
using namespace task_test;

// Splits "a b c" on single spaces.
std::vector<std::string> fields(const std::string& s) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == ' ') out.emplace_back(); else out.back().push_back(c);
  }
  return out;
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

// A generated task's longest prompt (what the job checks at start against its rows) is as long
// as the longest it draws: every prompt of sort and reverse, the widest operands of add.
TEST(Tasks, LongestPromptIsTheLongestDrawn) {
  for (const char* name : {"sort", "add", "reverse"})
    for (int difficulty : {2, 5}) {
      const auto t = task(name, difficulty);
      const std::string longest = t->longest_prompt();
      std::size_t drawn = 0;
      for (int i = 0; i < 2000; ++i) drawn = std::max(drawn, t->example(3, 0, i).prompt.size());
      EXPECT_EQ(drawn, longest.size()) << name << " at difficulty " << difficulty << ": " << longest;
    }
}

TEST(TaskFactory, NamesAndErrors) {
  EXPECT_EQ(task_names(), (std::vector<std::string>{"sort", "add", "reverse", "jsonl", "text"}));
  for (const char* n : {"sort", "add", "reverse"}) EXPECT_EQ(task(n, 4)->name(), n);

  TaskOptions o;
  o.name = "multiply";
  EXPECT_EQ(input_error_of(o), "unknown task 'multiply' (known tasks: sort, add, reverse, jsonl, text)");
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

// ---------------------------------------------------------------------------------- text

// The text task's rendering (rl/task_chat.hpp), which generate --chat and tokenize --chat share:
// Qwen3's template with the job's variables and system prompt (the reference is transformers'
// rendering of the same chat, written out), a chat's own system message kept, the contents joined
// without a template, and each refusal named.
TEST(TaskChat, RendersAsTheJobRendersAndNamesEachProblem) {
  namespace fs = std::filesystem;
  const fs::path models = qwen3_models();
  if (models.empty()) GTEST_SKIP() << "the Qwen3 tokenizer files are not installed (scripts/install_test_references.sh)";
  const HfTokenizer qwen3(models);
  TextTaskOptions o;
  o.system_prompt = "Be brief.";
  o.template_variables = R"({"enable_thinking": false})";
  const TaskChat chat(qwen3, o);
  EXPECT_EQ(chat.render_user("What is 6 x 7?"),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 6 x 7?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  const auto own_system = nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "Think."}, {"role": "user", "content": "Hi"}])");
  EXPECT_EQ(chat.render(own_system), "<|im_start|>system\nThink.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                                     "<|im_start|>assistant\n<think>\n\n</think>\n\n");

  TextTaskOptions plain = o;
  plain.chat_template = false;
  const TaskChat joined(qwen3, plain);
  EXPECT_EQ(joined.render_user("What is 6 x 7?"), "Be brief.What is 6 x 7?");
  EXPECT_EQ(joined.render(own_system), "Think.Hi");
  const auto message_of = [](auto run) {
    try {
      run();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(message_of([&] { joined.render(nlohmann::ordered_json::parse(R"([{"role": "user", "content": [1]}])")); }),
            "a message's \"content\" must be a string without a chat template (rl.chat_template = false), got array");
  EXPECT_EQ(message_of([&] { chat.render(nlohmann::ordered_json::array()); }),
            "field \"messages\" must be a non-empty array of messages");
  EXPECT_EQ(message_of([&] { chat.render(nlohmann::ordered_json::parse(R"([{"role": 1, "content": "x"}])")); }),
            "every message needs a string \"role\" and a \"content\"");

  TextTaskOptions bad = o;
  bad.template_variables = "[1]";
  EXPECT_EQ(message_of([&] { TaskChat(qwen3, bad); }), "rl.template_variables must be a JSON object, got array");
  bad.template_variables = "{";
  EXPECT_NE(message_of([&] { TaskChat(qwen3, bad); }).find("rl.template_variables is not valid JSON"),
            std::string::npos);
  const fs::path dir = fs::temp_directory_path() / ("shardrl_task_chat_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(models / "tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|im_end|>"})";
  const HfTokenizer no_template(dir);
  EXPECT_EQ(message_of([&] { TaskChat(no_template, o); }),
            dir.string() + "/tokenizer_config.json has no chat_template (and there is no chat_template.jinja); "
                           "set rl.chat_template = false to encode prompts as they are");
  EXPECT_EQ(TaskChat(no_template, plain).render_user("x"), "Be brief.x");
  fs::remove_all(dir);
}

// The text task ends a completion at every end id the model's generation_config.json lists
// (Qwen3's <|endoftext|> beside its eos token <|im_end|>), as Hugging Face's generate() does,
// and scores the text before it; rl.eos_id names the one id that ends it instead.
TEST(TaskText, ACompletionEndsAtEveryEndIdOfTheModel) {
  namespace fs = std::filesystem;
  const fs::path models = qwen3_models();
  if (models.empty()) GTEST_SKIP() << "the Qwen3 tokenizer files are not installed (scripts/install_test_references.sh)";
  const fs::path dir = fs::temp_directory_path() / ("shardrl_task_text_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(models / file, dir / file, fs::copy_options::overwrite_existing);
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [151645, 151643]})";
  std::ofstream(dir / "data.jsonl") << R"({"prompt": "What is 2 + 2?", "answer": "4"})" << "\n";
  TaskOptions o;
  o.name = "text";
  o.dataset_path = (dir / "data.jsonl").string();
  o.text.tokenizer_dir = dir.string();
  o.text.max_prompt_tokens = 100;
  const HfTokenizer tokenizer(dir);
  std::vector<std::int32_t> completion = tokenizer.encode("The answer is 4.");
  completion.push_back(151643);   // <|endoftext|>
  for (std::int32_t id : tokenizer.encode(" The answer is 5.")) completion.push_back(id);

  const auto task = make_task(o);
  EXPECT_EQ(task->eos_id(), 151645);
  EXPECT_EQ(task->end_ids(), (std::vector<std::int32_t>{151645, 151643}));
  const TaskExample ex = task->example(1, 0, 0);
  EXPECT_EQ(task->score_ids_batch({ex}, {completion}), (std::vector<Scored>{{1.0, true}})) << "scored past <|endoftext|>";
  o.eos_id = 151645;
  const auto one_id = make_task(o);
  EXPECT_EQ(one_id->end_ids(), std::vector<std::int32_t>{151645}) << "rl.eos_id alone";
  EXPECT_EQ(one_id->score_ids_batch({ex}, {completion}), (std::vector<Scored>{{0.0, false}})) << "the last answer, 5, is wrong";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardrl
