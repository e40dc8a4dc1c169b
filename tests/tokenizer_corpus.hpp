// The corpus the tokenizer is checked on against Hugging Face's implementation: every kind of
// text a model meets (English, code, numbers, LaTeX, whitespace runs, CRLF and tabs, 14 scripts,
// emoji with ZWJ sequences and skin tones, combining marks, special-token strings, ill-formed
// UTF-8), first as hand-picked lines, then as seeded random mixtures of their fragments. The
// same seed gives the same corpus on every machine (std::mt19937's sequence is standardised;
// only its raw output is used).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace shardrl::test {

inline const std::vector<std::string>& tokenizer_fragments() {
  static const std::vector<std::string> fragments{
      // English, contractions in both cases (the pre-tokenizer's (?i:'s|'t|...)).
      "The quick brown fox jumps over the lazy dog.", "It's what they'd've wanted, isn't it?",
      "DON'T SHOUT, WE'LL HEAR YOU'RE THERE", "Mr. O'Neil's 3rd-quarter report (draft) -- see p. 12!",
      "Hello, world!", "  leading spaces", "trailing spaces   ", "a", " ", "",
      // Code.
      "int main(int argc, char** argv) {\n  return argc > 1 ? 0 : 1;\n}",
      "def f(x):\n\tif x:\n\t\treturn [i**2 for i in range(x)]\n\treturn None",
      "for (auto& [k, v] : m) std::cout << k << \"=\" << v << '\\n';", "x += 1; y -= 2; z *= 3; w /= 4;",
      "<div class=\"a\"><span>&nbsp;</span></div>", "SELECT * FROM t WHERE id = 42 AND name LIKE '%x%';",
      "#include <vector>\r\n#define N 1024\r\n", "    indented four\n        eight\n",
      // Numbers.
      "1", "12", "123", "1234", "12345", "1234567890123", "3.14159", "-0.5", "1,234,567.89", "1e-10", "0x1F",
      "2024-06-30", "10:45:00", "$1,000", "50%", "1/2 + 3/4 = 5/4", "(-7) * 6 = -42",
      // Math and LaTeX.
      "\\frac{a}{b} + \\sqrt{x^2 + y^2}", "$\\sum_{i=1}^{n} i = \\frac{n(n+1)}{2}$", "\\boxed{\\dfrac{3}{4}}",
      "\\left( \\int_0^\\infty e^{-x^2} dx \\right)^2 = \\pi", "x \\le y \\implies f(x) \\ge f(y)",
      "α + β = γ, ∀ε > 0 ∃δ", "∑ ∏ ∫ √ ∞ ≠ ≈ ≤ ≥ → ⇒", "#### 42",
      // Whitespace runs, CRLF, tabs.
      "a  b   c    d", "line one\nline two\n\nline four", "crlf\r\nline\r\n\r\n", "\t\ttabbed\t", "\n\n\n",
      "   \n   \n", " \t \n \r\n ", "end with newline\n", "\r", "word\u00a0nbsp", "ideographic\u3000space",
      // Scripts.
      "你好，世界！这是一个测试。", "日本語のテキストとカタカナ、ひらがな。", "한국어 문장입니다.",
      "مرحبا بالعالم، هذا اختبار.", "नमस्ते दुनिया, यह एक परीक्षण है।", "Привет, мир! Это тест.",
      "สวัสดีชาวโลก นี่คือการทดสอบ", "Γειά σου Κόσμε", "שלום עולם", "Բարեւ աշխարհ", "გამარჯობა მსოფლიო",
      "வணக்கம் உலகம்", "ওহে বিশ্ব", "Xin chào thế giới", "Zürich Straße Ærøskøbing",
      // Emoji: ZWJ sequences, skin tones, flags, keycaps, variation selectors.
      "👨‍👩‍👧‍👦 family", "👍🏽👍🏿👋🏻", "🤷🏽‍♀️ shrug", "🇺🇸🇯🇵🇩🇪 flags", "1️⃣ #️⃣", "❤️ ♥︎", "🏳️‍🌈", "😀😃😄",
      // Combining marks (NFC composes some), zalgo.
      "e\u0301 cafe\u0301", "n\u0303 o\u0308 A\u030a", "Z\u0351\u0352a\u0353l\u0354g\u0355o", "\u0915\u094d\u0937",
      "\u1100\u1161\u11a8", "\u212b \u2126 \ufb01",
      // Special-token strings inside text, and near misses.
      "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>", "<|im_sta", "<|im_end|x",
      "<think>\nreasoning\n</think>\n\nanswer", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
      "<s>[INST] hi [/INST]</s>", "a<|im_start|>b", "<tool_call>{\"name\": \"f\"}</tool_call>",
      // Ill-formed UTF-8: a bad byte, truncated sequences, an overlong, a surrogate, stray continuations.
      "\xff\xfe bad", "trunc\xe4\xbd", "over\xc0\xaflong", "sur\xed\xa0\x80rogate", "cont\x80\x81inuation",
      "\xf0\x9f\x98", "ok \xe2\x82 mid \xe2\x82\xac euro",
  };
  return fragments;
}

// The hand-picked fragments, then seeded mixtures of them up to `lines` records.
inline std::vector<std::string> tokenizer_corpus(std::size_t lines, std::uint32_t seed = 20261123) {
  const auto& f = tokenizer_fragments();
  std::vector<std::string> out(f.begin(), f.end());
  static const char* separators[] = {" ", "", "\n", "  ", "\t", "\r\n", ", ", ". ", "\n\n", "   "};
  std::mt19937 rng(seed);
  while (out.size() < lines) {
    std::string line;
    const std::size_t parts = 1 + rng() % 5;
    for (std::size_t p = 0; p < parts; ++p) {
      if (p > 0) line += separators[rng() % 10];
      std::string piece = f[rng() % f.size()];
      // Sometimes only part of a fragment (cuts may split a UTF-8 sequence: more ill-formed input).
      if (!piece.empty() && rng() % 4 == 0) piece = piece.substr(rng() % piece.size());
      line += piece;
    }
    out.push_back(std::move(line));
  }
  return out;
}

}  // namespace shardrl::test
