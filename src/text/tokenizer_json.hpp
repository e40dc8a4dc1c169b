// tokenizer.json read with its BPE vocabulary and merges streamed into plain lists (nlohmann's
// SAX interface), the rest of the file as a DOM. nlohmann's DOM of a 150K-token file took about
// 300 ms to build and 100 ms to free on a 2-core machine (Qwen3's 11 MB: a map node for each
// vocabulary entry, a two-element array for each merge), for a job's every rank and every
// `shardrl tokenize`; its SAX parse alone takes about 40.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardrl::text {

// One entry of model.vocab as the file writes it: the token and its id (any JSON value: the
// model checks it).
struct VocabEntry {
  std::string token;
  nlohmann::json id;
};

// One entry of model.merges: ["a", "b"] (pair: first and second), "a b" (text: first, split by
// the model), or anything else (other).
struct BpeMerge {
  enum class Form { pair, text, other };
  Form form = Form::other;
  std::string first, second;
};

// model.vocab and model.merges, where the file has them as an object and an array; nullopt
// otherwise (absent, or of another type, which is then in the DOM for the model's error).
struct BpeTables {
  std::optional<std::vector<VocabEntry>> vocab;   // in file order; a key given twice, each time
  std::optional<std::vector<BpeMerge>> merges;    // in file order
};

struct TokenizerJson {
  nlohmann::json rest;   // the file, without model.vocab and model.merges where they are in `tables`
  BpeTables tables;
};

// Parses `text` (a tokenizer.json); InputError "<origin>: not valid JSON: <nlohmann's message>"
// where it is not JSON.
TokenizerJson read_tokenizer_json(const std::string& text, const std::string& origin);

}  // namespace shardrl::text
