// What `generate` prints for a completion: one line, every byte either shown as itself (ASCII
// and well-formed UTF-8) or escaped, so invalid UTF-8 never reaches the terminal raw.
#include <gtest/gtest.h>

#include "app/printable_line.hpp"

namespace shardrl {
namespace {

TEST(PrintableLine, EscapesControlBytesNewlinesAndBackslashes) {
  EXPECT_EQ(printable_line("a\nb\\c\td\x7f"), "a\\nb\\\\c\\x09d\\x7f");
}

TEST(PrintableLine, KeepsWellFormedUtf8) {
  const std::string text = "caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80";   // é, 中, 😀
  EXPECT_EQ(printable_line(text), text);
}

TEST(PrintableLine, EscapesBytesThatAreNotWellFormedUtf8) {
  EXPECT_EQ(printable_line("\xff"), "\\xff");                    // never a UTF-8 byte
  EXPECT_EQ(printable_line("\xc3"), "\\xc3");                    // a lead byte cut short
  EXPECT_EQ(printable_line("\xc3("), "\\xc3(");                  // a lead byte without its continuation
  EXPECT_EQ(printable_line("\x80x"), "\\x80x");                  // a lone continuation byte
  EXPECT_EQ(printable_line("\xc0\xaf"), "\\xc0\\xaf");           // an overlong '/'
  EXPECT_EQ(printable_line("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate, U+D800
  EXPECT_EQ(printable_line("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");   // beyond U+10FFFF
  EXPECT_EQ(printable_line("\xe4\xb8"), "\\xe4\\xb8");           // a 3-byte character cut short
}

// A message quoting input: only what is not UTF-8 escaped; newlines, backslashes, characters kept.
TEST(PrintableLine, AMessageKeepsAllButTheBytesThatAreNotUtf8) {
  EXPECT_EQ(with_invalid_utf8_escaped("--set run.dir=r\xff: a\\b\n"), "--set run.dir=r\\xff: a\\b\n");
  EXPECT_EQ(with_invalid_utf8_escaped("caf\xc3\xa9 \xe4\xb8\xad"), "caf\xc3\xa9 \xe4\xb8\xad");
  EXPECT_EQ(with_invalid_utf8_escaped("\xc0\xaf\xed\xa0\x80"), "\\xc0\\xaf\\xed\\xa0\\x80");
}

}  // namespace
}  // namespace shardrl
