#include "text/regex.hpp"

#include <fmt/format.h>

#include <memory>

#include "core/error.hpp"
#include "text/utf8.hpp"

namespace shardrl::text {
namespace {

struct MatchDataDeleter {
  void operator()(pcre2_match_data* d) const { pcre2_match_data_free(d); }
};

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& origin) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &error,
                        &offset, nullptr);
  if (!code_) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw InputError(fmt::format("{}: the regular expression {} does not compile at offset {}: {}", origin,
                                 excerpt(pattern, 200), offset, reinterpret_cast<const char*>(message)));
  }
  // Without JIT (some platforms) the interpreter gives the same matches, only slower.
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(code_); }

void Regex::for_each_match(std::string_view text, const std::function<void(std::size_t, std::size_t)>& found) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(pcre2_match_data_create_from_pattern(code_, nullptr));
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  if (text.empty()) return;   // Hugging Face's find_matches: an empty text has no match, even an empty one
  std::size_t start = 0;
  bool matched = false;        // a match was reported, ending at last_end
  std::size_t last_end = 0;
  while (start <= text.size()) {
    // The text was made valid UTF-8 before it got here: PCRE2 need not check it again.
    const int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.get(), nullptr)
                        : pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      throw InputError(fmt::format("regular expression match failed: {}", reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.get());
    const std::size_t b = ov[0], e = ov[1];
    // As the onig crate's find_iter, which Hugging Face's patterns run through: an empty match
    // is a match (a split or replace point), except right where the previous match ended; there
    // the search steps over one character.
    if (e == b && matched && e == last_end) {
      if (start >= text.size()) return;
      start += utf8_length(static_cast<unsigned char>(text[start]));
      continue;
    }
    found(b, e);
    matched = true;
    start = last_end = e;
  }
}

}  // namespace shardrl::text
