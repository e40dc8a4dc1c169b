// Encoding speed of the Hugging Face tokenizer (text/hf_tokenizer.hpp) on one core: a text file
// encoded line by line, the first pass (the BPE cache filling) and the best of the next passes,
// in MB/s of input. bench/hf_tokenizer_speed.js times Hugging Face's Rust tokenizers on the same
// file and loop, for the ratio (docs/performance.md).
//   bench_tokenizer --tokenizer DIR --file TEXT [--passes 5]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "text/hf_tokenizer.hpp"

int main(int argc, char** argv) {
  CLI::App app("tokenizer encoding speed");
  std::string dir, file;
  int passes = 5;
  app.add_option("--tokenizer", dir, "a directory with tokenizer.json")->required();
  app.add_option("--file", file, "text to encode, line by line")->required();
  app.add_option("--passes", passes, "timed passes after the first");
  CLI11_PARSE(app, argc, argv);

  std::vector<std::string> lines;
  std::size_t bytes = 0;
  {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      bytes += line.size() + 1;
      lines.push_back(line + "\n");
    }
  }
  const shardrl::HfTokenizer tokenizer(dir);
  auto pass = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    std::size_t ids = 0;
    for (const std::string& line : lines) ids += tokenizer.encode(line).size();
    return std::make_pair(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), ids);
  };
  const auto [first, ids] = pass();
  double best = 1e30;
  for (int p = 0; p < passes; ++p) best = std::min(best, pass().first);
  fmt::print("{} lines, {:.2f} MB, {} ids\nfirst pass {:.2f} MB/s, best of {} passes {:.2f} MB/s (one core)\n",
             lines.size(), bytes / 1e6, ids, bytes / 1e6 / first, passes, bytes / 1e6 / best);
}
