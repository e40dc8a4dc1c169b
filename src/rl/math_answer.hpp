// Final answers of math completions: finding the answer a completion commits to, bringing it and
// the reference to one canonical form, and comparing the two. Numbers compare as exact values
// (0.75 == 3/4 == \frac{3}{4}, 1/3 != 0.333); nothing overflows silently. Host-only, no state.
//
// Extraction (find_final_answer), from the text after the last `</think>` when there is one (a
// reasoning model's scratch work is not its answer; with a `<think>` after it, or without one,
// never closed, there is no answer), first rule that yields a non-empty answer:
//   1. boxed         the last complete \boxed{...} or \fbox{...} (nested braces; `\{` `\}` are not
//                    braces), or `\boxed x` (up to the next space or `$`). An unclosed one after
//                    the last complete one (a completion cut inside it) gives no answer at all.
//   2. hashes        the text after the last `####` (GSM8K), to the end of its line, when it has no
//                    letter outside a LaTeX command name: "#### 72", "#### \frac{1}{2}" count, a
//                    markdown heading ("#### Step 2: add", "#### 1. Totals") does not.
//   3. answer_phrase the text after the last "answer is" / "answer:" (any case, markdown `**`
//                    around allowed), to the end of its line (the next non-empty line when that is
//                    empty), cut at the first `.` `,` `;` followed by a space or the end (not a
//                    `,` followed by a number or a joining word: a list or a hedge), outside
//                    brackets and `$...$` (pandoc's rule: a `$` that closes nothing is a price,
//                    text): "The answer is 42." -> "42", "The answer is $18, which ..." -> "$18";
//                    a verdict ("the answer is correct", "... is indeed correct": no digit, only
//                    verdicts and the words qualifying them) is passed over for a phrase before
//                    it, and is the answer where there is none.
//   4. last_number   the last number in the text: digits, `1,234` groups, decimals, `1e3`, `a/b`,
//                    with a sign when `-` (or U+2212) does not follow a letter, digit or `)`; none
//                    when the word before it joins it to another ("3 or 5").
// Rules 1-3 are a well-formed answer (TextReward's format bonus); rule 4 is a fallback.
//
// Normalisation (normalize_answer), for the extracted answer and the reference alike:
//   - surrounding `$...$`, `$$...$$`, `\(...\)`, `\[...\]`, `\boxed{...}`; a trailing `.`
//   - `\left` `\right` `\displaystyle` `\! \, \; \:` dropped; `\dfrac` `\tfrac` -> `\frac`;
//     `\frac12` -> `\frac{1}{2}`, `\sqrt2` -> `\sqrt{2}`; `$` `\$` `%` `\%` dropped;
//     `^\circ` `^{\circ}` `\degree` `°` dropped; `\-` and U+2212 -> `-`
//   - `\text{}` `\textbf{}` `\mbox{}` `\mathrm{}` ... unwrapped: `\text{yes}` -> yes
//   - a leading `x =` / `answer =` / `\theta =` (only when it is the one `=`)
//   - words after a number, after a space: `5 apples`, `5\text{ cm}`, `10 m/s` -> the number;
//     not when they are part of the value: a joining word (`5 or 6`, `2 or more`, `2 and 3`: a
//     hedge is wrong), a scale or addition (`7 and a half`, `5 million`, `4 pi`, `3 remainder 2`,
//     `5 sqrt(2)`), a variable (`5 x`, `3 i`), a second number after words that give no reason
//     or rate (`12 hours 30 min`); `42 because 6 times 7 is 42`, `100 m in 10 s`, `5 mol of CO2`
//     are still 42, 100 and 5
//   - a multiple-choice letter in brackets, `(B)`, is the letter
//   - thousands separators when the whole answer is one number: `1,234`, `1{,}234`, `1\,234`,
//     `1 234`
//   - all whitespace, except one space between two digits (`1 2` is not 12)
//   - an arithmetic chain (`3+4=7`, `3 \times 5 = 15`: only digits, operators and `\times`
//     `\cdot` `\div` `\frac` `\sqrt` before the last `=`) becomes its last side's value; the
//     chain itself is not checked (`3+3=7` is 7)
//   - a number (integer, decimal, `1e3`, `1.5\times10^{3}`, `a/b`, `\frac{a}{b}`, an integer power
//     `2^{10}` `10^{-3}` (-2^2 is -4), a mixed number `3\frac{1}{2}` (an integer and a proper
//     fraction of integers: 7/2), signed) becomes
//     its exact value: "p" or "p/q" reduced (in 128-bit integers, overflow-checked); a decimal
//     too large for that becomes its shortest exact decimal (`0.333...` with all its digits), so
//     big integers still compare exactly; a fraction too large stays text.
//   - a tuple, interval or list (`(1, 2)`, `[0,\infty)`, `\{1,2\}`, `1, 2`) is normalised element
//     by element and joined with ", "
//   - anything else is compared as text; text without a `\` is lower-cased (`Yes` == `yes`).
// Choices: percent is dropped, so "50%" equals 50 and does not equal 0.5 (as most verifiers do);
// units and words after a number are ignored, so "5 apples" equals "5 pears".
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace shardrl {

enum class AnswerMarker { boxed, hashes, answer_phrase, last_number };

struct FinalAnswer {
  std::string text;     // as written (trimmed), before normalisation
  AnswerMarker marker;  // which extraction rule found it
};

// True for an answer the completion marked as final (rules 1-3), false for the last-number fallback.
bool is_well_formed(AnswerMarker marker);

// The completion's final answer, or nullopt when it has none (not even a number).
std::optional<FinalAnswer> find_final_answer(std::string_view completion);

// find_final_answer's text alone.
std::optional<std::string> extract_final_answer(std::string_view completion);

// The final answer inside a reference: the text after its last `####` when it has one (a whole
// GSM8K solution), else the reference itself.
std::string_view reference_final_answer(std::string_view reference);

// The canonical form described above; "" for an answer that normalises to nothing.
std::string normalize_answer(std::string_view answer);

// Both normalised and equal (numbers by exact value); never true for an empty reference.
bool answers_equal(std::string_view given, std::string_view reference);

// The completion's final answer equals the reference's (reference_final_answer).
bool math_answer_correct(std::string_view completion, std::string_view reference);

}  // namespace shardrl
