#include "text/utf8.hpp"

#include <utf8proc.h>

namespace shardrl::text {

bool is_whitespace(char32_t c) {
  // White_Space is the separators (categories Zs, Zl, Zp, from utf8proc) and six controls: TAB
  // through CR and NEL (other controls with a separator's bidi class, U+001C..U+001F, are not).
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  if (c == 0x85) return true;
  const auto category = utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->category;
  return category == UTF8PROC_CATEGORY_ZS || category == UTF8PROC_CATEGORY_ZL || category == UTF8PROC_CATEGORY_ZP;
}

bool is_ascii(std::string_view text) {
  for (unsigned char c : text)
    if (c >= 0x80) return false;
  return true;
}

std::string to_valid_utf8(std::string_view bytes) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(bytes.size());
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    // The well-formed sequences of the Unicode standard (Table 3-7): the second byte's range
    // depends on the lead (no overlongs, no surrogates, nothing above U+10FFFF).
    std::size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 2;
    else if (c == 0xED) need = 2, hi = 0x9F;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) need = 3, hi = 0x8F;
    if (need == 0) {   // a byte that never starts a sequence
      out += kReplacement;
      ++i;
      continue;
    }
    // The maximal subpart: the lead and the continuation bytes that still fit; one U+FFFD for
    // all of them when the sequence breaks off.
    std::size_t j = i + 1;
    bool ok = true;
    for (std::size_t k = 0; k < need; ++k, ++j) {
      const unsigned char lower = k == 0 ? lo : 0x80, upper = k == 0 ? hi : 0xBF;
      if (j >= n || s[j] < lower || s[j] > upper) {
        ok = false;
        break;
      }
    }
    if (ok) out.append(bytes.data() + i, need + 1);
    else out += kReplacement;
    i = j;
  }
  return out;
}

}  // namespace shardrl::text
