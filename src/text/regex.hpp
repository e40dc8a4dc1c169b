// A tokenizer's regular expression (a Split pre-tokenizer's pattern, a Replace's), compiled once
// with PCRE2 in UTF mode with Unicode properties (\p{L}, \s as Unicode defines them), JIT-compiled
// where the platform allows. Matching is thread-safe: each call takes its own match data.
#pragma once

// PCRE2 is built for several code unit widths; the tokenizer works on UTF-8 bytes.
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace shardrl::text {

class Regex {
 public:
  // An invalid pattern is an InputError naming `origin`, the pattern and PCRE2's message.
  Regex(const std::string& pattern, const std::string& origin);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls found(begin, end) for each successive non-overlapping match in `text` (valid UTF-8),
  // byte offsets, left to right, empty matches included except one where the previous match
  // ended (the onig crate's find_iter, as Hugging Face's tokenizers use it).
  void for_each_match(std::string_view text, const std::function<void(std::size_t, std::size_t)>& found) const;

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

}  // namespace shardrl::text
