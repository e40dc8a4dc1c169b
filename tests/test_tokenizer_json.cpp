// tokenizer.json's streaming reader (text/tokenizer_json.hpp) against json::parse of the same
// text: the DOM of everything else equal, model.vocab and model.merges listed entry by entry in
// the file's order (ids of any type, merges of every form), the last of a key given twice kept,
// a vocab or merges of another type left in the DOM, and parse errors with json::parse's message.
// Then what the model makes of the lists: a token given twice keeps its last id, an id given to
// several tokens is the greatest token's, as from json::parse's map before.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "text/hf_tokenizer.hpp"
#include "text/tokenizer_json.hpp"

namespace shardrl {
namespace {

using nlohmann::json;
using text::BpeMerge;
using text::read_tokenizer_json;

// json::parse's DOM with model.vocab and model.merges taken out.
json without_tables(const std::string& text) {
  json j = json::parse(text);
  j["model"].erase("vocab");
  j["model"].erase("merges");
  return j;
}

TEST(TokenizerJson, StreamsTheVocabularyAndMergesAndKeepsTheRestAsParsed) {
  const std::string text = R"({
    "version": "1.0", "truncation": null, "padding": {"x": [1, 2.5, true, false, null, "\u00e9\ud83d\ude00"]},
    "added_tokens": [{"id": 3, "content": "<s>", "special": true}],
    "model": {"type": "BPE", "dropout": null, "vocab": {"b": 1, "a": 0, "ab": 2, "bad": [1, {"x": 2}], "neg": -1,
                                                      "big": 18446744073709551615, "f": 1.5, "s": "7", "n": null},
              "merges": ["a b", ["a", "b"], 5, ["a"], ["a", "b", "c"], ["a", 1], [["a"], "b"], {"a": "b"}, "ab",
                         null, []],
              "ignore_merges": false},
    "decoder": {"type": "ByteLevel", "list": [[1], [[2]], {}]}
  })";
  const text::TokenizerJson got = read_tokenizer_json(text, "t.json");
  EXPECT_EQ(got.rest, without_tables(text));
  ASSERT_TRUE(got.tables.vocab.has_value());
  // Each id as json::parse has it (its number types too: 1 is unsigned there), in file order.
  const json parsed_vocab = json::parse(text)["model"]["vocab"];
  const std::vector<std::string> order{"b", "a", "ab", "bad", "neg", "big", "f", "s", "n"};
  ASSERT_EQ(got.tables.vocab->size(), order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ((*got.tables.vocab)[i].token, order[i]) << i;
    EXPECT_EQ((*got.tables.vocab)[i].id, parsed_vocab[order[i]]) << i;
    EXPECT_EQ((*got.tables.vocab)[i].id.type(), parsed_vocab[order[i]].type()) << i;
  }
  using F = BpeMerge::Form;
  const std::vector<BpeMerge> want_merges{{F::text, "a b", ""}, {F::pair, "a", "b"}, {}, {}, {}, {}, {}, {},
                                          {F::text, "ab", ""},  {},                  {}};
  ASSERT_TRUE(got.tables.merges.has_value());
  ASSERT_EQ(got.tables.merges->size(), want_merges.size());
  for (std::size_t i = 0; i < want_merges.size(); ++i) {
    const BpeMerge& m = (*got.tables.merges)[i];
    EXPECT_EQ(m.form, want_merges[i].form) << "merge " << i;
    if (m.form != F::other) {
      EXPECT_EQ(m.first, want_merges[i].first) << "merge " << i;
      EXPECT_EQ(m.second, want_merges[i].second) << "merge " << i;
    }
  }
}

TEST(TokenizerJson, KeysGivenTwiceAndTablesOfOtherTypesAreAsJsonParseHasThem) {
  // A vocab or merges that is not an object / array stays in the DOM (for the model's error).
  for (const std::string text : {R"({"model": {"vocab": [1, 2], "merges": "x"}})",
                                 R"({"model": {"vocab": {"a": 0}, "merges": [], "vocab": 3, "merges": {}}})"}) {
    const text::TokenizerJson got = read_tokenizer_json(text, "t.json");
    EXPECT_EQ(got.rest, json::parse(text)) << text;
    EXPECT_FALSE(got.tables.vocab.has_value()) << text;
    EXPECT_FALSE(got.tables.merges.has_value()) << text;
  }
  // A DOM value first, then a streamed one for the same key: the streamed one is kept, and the
  // DOM has neither.
  const std::string dom_then_streamed = R"({"model": {"vocab": 3, "merges": 4, "vocab": {"a": 0}, "merges": ["a a"]}})";
  const text::TokenizerJson replaced = read_tokenizer_json(dom_then_streamed, "t.json");
  EXPECT_EQ(replaced.rest, without_tables(dom_then_streamed));
  ASSERT_TRUE(replaced.tables.vocab.has_value());
  EXPECT_EQ(replaced.tables.vocab->size(), 1u);
  ASSERT_TRUE(replaced.tables.merges.has_value());
  EXPECT_EQ(replaced.tables.merges->size(), 1u);
  // The last "vocab" of a model, and the last "model" of the file.
  const std::string twice = R"({"model": {"vocab": {"x": 9}, "merges": ["x y"]}, "k": 1, "k": 2,
                                "model": {"vocab": {"a": 0, "a": 1}, "type": "BPE", "vocab": {"b": 2}}})";
  const text::TokenizerJson got = read_tokenizer_json(twice, "t.json");
  EXPECT_EQ(got.rest, without_tables(twice));
  ASSERT_TRUE(got.tables.vocab.has_value());
  ASSERT_EQ(got.tables.vocab->size(), 1u);
  EXPECT_EQ((*got.tables.vocab)[0].token, "b");
  EXPECT_FALSE(got.tables.merges.has_value()) << "the second model has none";
  // Roots other than an object, and a "model" below the root (not the tokenizer's).
  for (const std::string text : {"[1, {\"model\": {\"vocab\": {}}}]", "7", "\"s\"", "null",
                                 R"({"x": {"model": {"vocab": {"a": 0}, "merges": []}}})"}) {
    const text::TokenizerJson got_other = read_tokenizer_json(text, "t.json");
    EXPECT_EQ(got_other.rest, json::parse(text)) << text;
    EXPECT_FALSE(got_other.tables.vocab.has_value()) << text;
  }
}

TEST(TokenizerJson, ParseErrorsAreJsonParsesNamedWithTheFile) {
  for (const std::string text : {"", "{", R"({"model": {"vocab": {"a": 0,}}})", R"({"model": {"merges": ["a b" 1]}})",
                                 "[tru]", "{\"a\": 1} x", "{\"a\": \"\\ud800\"}"}) {
    std::string want;
    try {
      const json j = json::parse(text);
      ADD_FAILURE() << text << ": json::parse took it: " << j.dump();
    } catch (const json::parse_error& e) {
      want = std::string("t.json: not valid JSON: ") + e.what();
    }
    try {
      (void)read_tokenizer_json(text, "t.json");
      ADD_FAILURE() << text << ": no error";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
  }
  // A number past a double: json::parse's out_of_range (not a parse_error), the file's input error here.
  try {
    (void)read_tokenizer_json(R"({"model": {"vocab": {"a": 1e999}}})", "t.json");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "t.json: not valid JSON: [json.exception.out_of_range.406] number overflow parsing '1e999'");
  }
}

TEST(TokenizerJson, ATokenGivenTwiceKeepsItsLastIdAndAnIdOfSeveralTokensIsTheGreatests) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("shardrl_tokenizer_json_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::create_directories(dir);
  // "c" listed with 5, then 1; "b" first with a bad id, then 0; ids 0 and 1 each given to two tokens.
  const auto with_vocab = [&](const std::string& vocab) {
    std::ofstream(dir / "tokenizer.json") << R"({"normalizer": null, "pre_tokenizer": null, "decoder": null,
      "added_tokens": [], "post_processor": null, "model": {"type": "BPE", "merges": [], "vocab": )" + vocab + "}}";
  };
  with_vocab(R"({"c": 5, "b": "x", "b": 0, "a": 0, "d": 1, "c": 1, "e": 2})");
  const HfTokenizer t(dir);
  EXPECT_EQ(t.token_id("c"), 1);
  EXPECT_EQ(t.token_id("b"), 0);
  EXPECT_EQ(t.token_id("a"), 0);
  EXPECT_EQ(t.decode({0}), "b");
  EXPECT_EQ(t.decode({1}), "d");
  EXPECT_EQ(t.vocab_size(), 3) << "the id 5 of the first \"c\" is gone";
  // Of several bad ids, the smallest token's is named (json::parse's map order), whatever the file's.
  with_vocab(R"({"z": -1, "m": "7", "q": 2.5, "a": 0})");
  try {
    const HfTokenizer bad(dir);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("token m has id \"7\", not an integer"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace shardrl
