// The math answer verifier: a table of (completion, reference, correct?) cases covering every
// extraction and normalisation rule of rl/math_answer.hpp, with the near-misses that must not
// match next to the matches; then extraction and normalisation on their own.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "rl/math_answer.hpp"

namespace shardrl {
namespace {

struct VerifierCase {
  const char* label;
  std::string completion;
  std::string reference;
  bool correct;
};

const std::string kBig45 = "123456789012345678901234567890123456789012345";      // 45 digits, > 2^127
const std::string kBig45Plus1 = "123456789012345678901234567890123456789012346";
const std::string kTwoTo64 = "18446744073709551616";
const std::string kTwoTo127Minus1 = "170141183460469231731687303715884105727";        // the largest __int128
const std::string kTwoTo127 = "170141183460469231731687303715884105728";
const std::string kLongThird = "0.333333333333333333333333333333333333333333333";   // 45 digits

std::vector<VerifierCase> verifier_cases() {
  return {
      // ---- extraction: \boxed and \fbox
      {"boxed integer", "So we get \\boxed{42}.", "42", true},
      {"boxed wrong integer", "So we get \\boxed{41}.", "42", false},
      {"boxed nested braces frac", "\\boxed{\\frac{1}{2}}", "1/2", true},
      {"boxed nested braces frac vs decimal", "\\boxed{\\frac{1}{2}}", "0.5", true},
      {"boxed later overrides earlier", "First \\boxed{3}, no wait: \\boxed{5}", "5", true},
      {"boxed earlier is not the answer", "First \\boxed{3}, no wait: \\boxed{5}", "3", false},
      // A revision cut inside its box (max_new_tokens) is no answer: the earlier box was being replaced.
      {"a revision cut inside its box is no answer", "\\boxed{7} hmm, maybe \\boxed{8", "7", false},
      {"boxed space form", "so $\\boxed 9$ it is", "9", true},
      {"fbox", "\\fbox{12}", "12", true},
      {"boxed tuple with spaces vs without", "\\boxed{(1, 2)}", "(1,2)", true},
      {"boxed tuple in other order", "\\boxed{(2, 1)}", "(1,2)", false},
      {"boxed doubly nested braces", "\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", true},
      {"boxed escaped braces set", "\\boxed{\\{1, 2\\}}", "\\{1,2\\}", true},
      {"boxed inside inline math", "Thus $\\boxed{x = 3}$.", "3", true},
      {"boxed beats a later ####", "\\boxed{4}\n#### 5", "4", true},
      {"boxed beats a later answer phrase", "\\boxed{4}. The answer is 5", "4", true},
      {"boxed empty is no answer", "\\boxed{} The answer is 6", "6", true},
      {"boxed with unit text", "\\boxed{5 \\text{ apples}}", "5", true},
      {"boxed with escaped dollar", "\\boxed{\\$18}", "18", true},
      {"boxed sqrt product", "\\boxed{2\\sqrt{2}}", "2 \\sqrt 2", true},
      {"boxed sqrt of another number", "\\boxed{\\sqrt{2}}", "\\sqrt{3}", false},
      {"boxed interval", "\\boxed{[0, \\infty)}", "[0,\\infty)", true},
      {"boxed open vs closed interval", "\\boxed{(0, \\infty)}", "[0,\\infty)", false},
      {"boxed text yes vs yes", "\\boxed{\\text{Yes}}", "yes", true},
      {"boxed text no vs yes", "\\boxed{\\text{No}}", "yes", false},
      {"boxed inside boxed", "\\boxed{\\boxed{11}}", "11", true},

      // ---- extraction: #### (GSM8K)
      {"hashes gsm8k", "16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\n#### 18", "18", true},
      {"hashes wrong", "#### 17", "18", false},
      {"hashes thousands", "#### 1,234", "1234", true},
      {"hashes dollar thousands", "#### $1,000", "1000", true},
      {"hashes last wins", "#### 3\nno, recount\n#### 4", "4", true},
      {"hashes first is not the answer", "#### 3\nno, recount\n#### 4", "3", false},
      {"hashes markdown heading ignored", "#### Step 1: add\n3 + 4 = 7\nThe answer is 7.", "7", true},
      {"hashes numbered heading ignored", "#### 1. Totals\nThe answer is 12, done", "12", true},
      {"hashes trailing period", "#### 42.", "42", true},
      {"hashes fraction", "#### \\frac{3}{4}", "0.75", true},
      {"hashes gsm8k reference", "#### 72", "Natalia sold 48/2 = 24 clips in May.\n48+24 = 72\n#### 72", true},
      {"hashes gsm8k reference wrong", "#### 71", "Natalia sold 48/2 = 24 clips in May.\n48+24 = 72\n#### 72", false},

      // ---- extraction: "the answer is" / "answer:"
      {"phrase with period", "Therefore, the answer is 42.", "42", true},
      {"phrase 12 is not 1.2", "The answer is 12.", "1.2", false},
      {"phrase upper case", "THE ANSWER IS 7", "7", true},
      {"phrase answer colon", "Answer: 15", "15", true},
      {"phrase markdown final answer", "**Final Answer:** 3/4", "0.75", true},
      {"phrase markdown bold then colon", "**Final Answer**: $\\frac{3}{4}$", "0.75", true},
      {"phrase cut at comma clause", "The answer is 5, because 10 / 2 is 5 and not 6", "5", true},
      {"phrase on the next line", "The answer is:\n\n$24$", "24", true},
      {"phrase last wins", "I think the answer is 5. Wait: the answer is 6.", "6", true},
      {"phrase earlier is not the answer", "I think the answer is 5. Wait: the answer is 6.", "5", false},
      {"phrase words after number", "The answer is 42 apples.", "42", true},
      {"phrase leading x =", "So the answer is x = -3.", "-3", true},
      {"phrase decimal kept whole", "The answer is 3.14.", "3.14", true},
      {"phrase decimal not cut at its point", "The answer is 3.14.", "3", false},
      {"phrase tuple", "The answer is (1, 2).", "(1,2)", true},
      {"phrase dollar amount", "The answer is $5.", "5", true},
      // A `$` that closes nothing is a price, not math: the sentence still ends at its comma.
      {"phrase price then clause", "The answer is $18, which is what she makes every day.", "18", true},
      {"phrase escaped price then clause", "The answer is \\$18; she keeps it.", "18", true},
      {"phrase two prices", "The answer is $18, which is $2 more than before.", "18", true},
      {"phrase inline math keeps its comma", "The answer is $1, 2$, as shown.", "1, 2", true},
      {"phrase isn't is no phrase", "The answer isn't 4; it is 8", "8", true},
      {"phrase answerer is no phrase", "the answerer said 4; total 9", "9", true},

      // ---- extraction: the last number
      {"last number", "3 + 4 = 7", "7", true},
      {"last number not an earlier one", "3 + 4 = 7", "4", false},
      {"last number negative", "the temperature drops to -5 degrees", "-5", true},
      {"last number -5 vs 5", "the temperature drops to -5 degrees", "5", false},
      {"last number after a difference", "10-5", "5", true},
      {"last number thousands", "She earns 1,234 dollars", "1234", true},
      {"last number 1,234 vs 1234.5", "She earns 1,234 dollars", "1234.5", false},
      {"last number decimal", "it costs 2.50 in total", "2.5", true},
      {"last number fraction", "half is 1/2", "0.5", true},
      {"last number scientific", "the distance is 3.0e2 m", "300", true},
      {"last number unicode minus", "x = \xE2\x88\x92" "7", "-7", true},
      {"no number at all", "I don't know.", "5", false},
      {"empty completion", "", "5", false},

      // ---- thousands separators
      {"thousands comma", "\\boxed{1,234}", "1234", true},
      {"thousands thin space", "\\boxed{1\\,234}", "1234", true},
      {"thousands braced comma", "\\boxed{1{,}234}", "1234", true},
      {"thousands millions", "\\boxed{1,000,000}", "1000000", true},
      {"thousands 1,234 vs 1234.5", "\\boxed{1,234}", "1234.5", false},
      {"thousands with decimals", "\\boxed{1,234.50}", "1234.5", true},
      {"thousands in reference", "\\boxed{5000}", "5,000", true},
      {"list with space is not thousands", "\\boxed{1, 234}", "1234", false},
      {"comma group of two is not thousands", "\\boxed{1,23}", "123", false},
      {"thousands spaced as SI", "\\boxed{1 234 567}", "1234567", true},
      // Digits apart are not one number (all whitespace went, and "1 2" was 12).
      {"spaced digits are not a number", "\\boxed{1 2}", "12", false},
      {"spaced group of two is not thousands", "\\boxed{1 23}", "123", false},

      // ---- units and words after a number
      {"units word", "\\boxed{5 apples}", "5", true},
      {"units text cm", "\\boxed{12\\text{ cm}}", "12", true},
      {"units mbox squared", "\\boxed{12\\mbox{ cm}^2}", "12", true},
      {"units mathrm with thin space", "\\boxed{9.8\\,\\mathrm{m/s^2}}", "9.8", true},
      {"units in reference", "\\boxed{5}", "5 apples", true},
      {"units wrong number", "\\boxed{6 apples}", "5 apples", false},
      {"units after fraction", "\\boxed{\\frac{1}{2} cup}", "0.5", true},
      {"units degrees word", "\\boxed{90 degrees}", "90", true},
      {"list of number and word is no unit", "\\boxed{3, x}", "3", false},
      // An expression is not a number with words after it: it was cut to its leading number.
      {"expression after a number is no unit", "\\boxed{3 x^2 - 5}", "3", false},
      {"spaced expression", "\\boxed{2 x + 1}", "2x+1", true},
      {"spaced expression in reference", "\\boxed{2}", "2 x + 1", false},
      {"spaced expression with a product", "\\boxed{4 n * 2}", "4n*2", true},
      {"spaced equation", "\\boxed{2 x = 6}", "2", false},
      {"power of a variable", "\\boxed{3 x^2}", "3", false},
      {"power of a variable matches", "\\boxed{3 x^2}", "3x^2", true},
      // ... but hyphens and braces of units keep them units.
      {"hyphenated unit", "\\boxed{12 \\text{ ft-lb}}", "12", true},
      {"hyphenated unit words", "\\boxed{6 \\text{ two-digit numbers}}", "6", true},
      {"unit squared in braces", "\\boxed{5 \\text{ cm}^{2}}", "5", true},
      // A second number after the words is a hedge, not a unit: it was cut to the first number.
      {"hedge with or", "The answer is 5 or 6.", "5", false},
      {"hedge with text or", "\\boxed{5 \\text{ or } 6}", "5", false},
      {"hedge with and", "\\boxed{2 and 3}", "2", false},
      {"hedge with a sign", "The answer is 3 or -3.", "3", false},
      {"hedge with not", "The answer is 5 not 6", "5", false},
      {"hedge in the reference", "\\boxed{5}", "5 or 6", false},
      // ... but words with a number that do not join a second answer are a unit or a reason.
      {"a reason after the answer", "The answer is 42 because 6 times 7 is 42.", "42", true},
      {"a unit with a number in it", "\\boxed{5 mol of CO2}", "5", true},
      {"a unit squared as cm2", "The answer is 5 km2.", "5", true},
      {"a rate", "\\boxed{100 m in 10 s}", "100", true},
      // Words that make the value more than its first number: graded as the number, these padded
      // answers scored 1 (review, 2026-11-28).
      {"a half after the number", "\\boxed{7 \\text{ and a half}}", "7", false},
      {"hours and minutes", "\\boxed{12 \\text{ hours } 30 \\text{ min}}", "12", false},
      {"a remainder", "\\boxed{3 \\text{ remainder } 2}", "3", false},
      {"a remainder as R", "\\boxed{3 R 2}", "3", false},
      {"a multiplier word", "\\boxed{5 million}", "5", false},
      {"a multiplier in text", "\\boxed{5\\text{ thousand}}", "5", false},
      {"pi after the number", "\\boxed{4 pi}", "4", false},
      {"the imaginary unit after the number", "\\boxed{3 i}", "3", false},
      {"a variable after the number", "\\boxed{5 x}", "5", false},
      {"a root after the number", "\\boxed{5 sqrt(2)}", "5", false},
      {"or more", "\\boxed{2 \\text{ or more}}", "2", false},
      // A comma followed by another number or a joining word continues the answer.
      {"a list after the phrase", "The answer is 2, 3", "2", false},
      {"a hedge after a comma", "The answer is 5, or maybe 6.", "5", false},
      {"a list answer after the phrase", "The answer is 1, 2.", "1, 2", true},
      {"two quantities after the phrase", "The answer is: 4 apples, 5 pears", "4", false},
      // A multiple-choice letter in brackets is the letter.
      {"a choice in parentheses", "The answer is (B).", "B", true},
      {"a choice against parentheses", "\\boxed{B}", "(B)", true},
      {"another choice in parentheses", "\\boxed{(C)}", "B", false},
      // A last number that ends a hedge is no answer.
      {"a hedged last number", "It could be 3 or 5", "5", false},
      {"an unhedged last number", "It is 3 plus 2, so 5", "5", true},

      // ---- an arithmetic chain ends in its value; a verdict is not an answer
      {"arithmetic chain", "The answer is 3 + 4 = 7.", "7", true},
      {"arithmetic chain wrong value", "The answer is 3 + 4 = 8.", "7", false},
      {"arithmetic chain's first side is not the value", "The answer is 7 = 3 + 4.", "7", false},
      {"equation with a variable is no value", "\\boxed{2x = 6}", "6", false},
      {"written product chain", "The answer is $3 \\times 5 = 15$.", "15", true},
      {"dot product chain", "\\boxed{3 \\cdot 5 = 15}", "15", true},
      {"fraction and root chains", "\\boxed{\\frac{30}{2} = \\sqrt{225} = 15}", "15", true},
      {"written chain wrong value", "The answer is $3 \\times 5 = 16$.", "15", false},
      {"a command that is no arithmetic", "\\boxed{\\pi \\times 5 = 15}", "15", false},
      {"a check after the answer", "The answer is 5. Let me verify the answer: 2 + 3 = 5.", "5", true},
      {"a verdict after the answer", "So x = 5, the answer is 5. I checked and the answer is correct.", "5", true},
      {"a qualified verdict after the answer", "The answer is 5. So the answer is indeed correct!", "5", true},
      {"a verdict with a negation after the answer", "The answer is 5. The answer is not right.", "5", true},
      {"words beside a verdict make an answer", "The answer is 5. The answer is a right angle.", "a right angle",
       true},
      {"a number beside a verdict makes an answer", "The answer is 5. The answer is 6, correct.", "6", true},
      {"a verdict alone is the answer", "The answer is right.", "right", true},
      {"a verdict alone is the answer, not the last number", "Angles 30, 60 and 90, so the answer is right.", "right",
       true},

      // ---- a reasoning model's <think> block: the answer after it counts
      {"think box outranked by the answer after", "<think>\\boxed{5}</think> The answer is 6", "6", true},
      {"think box is not the answer", "<think>\\boxed{5}</think> The answer is 6", "5", false},
      {"answer after think", "<think>try 4, then 7</think>\n\\boxed{7}", "7", true},
      {"reasoning never closed", "<think>so it is \\boxed{7} maybe", "7", false},
      {"reasoning opened again", "<think>a</think> \\boxed{5} <think> wait \\boxed{42}", "42", false},
      {"empty think block", "<think>\n\n</think>\n\nThe answer is 7.", "7", true},

      // ---- dollars and math delimiters
      {"dollar escaped with cents", "\\boxed{\\$5.00}", "5", true},
      {"dollar in reference", "\\boxed{5}", "\\$5", true},
      {"dollar math reference", "\\boxed{2/3}", "$\\frac{2}{3}$", true},
      {"display dollars reference", "\\boxed{2/3}", "$$\\frac{2}{3}$$", true},
      {"paren math reference", "\\boxed{\\frac23}", "\\(\\frac{2}{3}\\)", true},
      {"bracket math reference", "\\boxed{7}", "\\[7\\]", true},
      {"boxed reference", "\\boxed{7}", "\\boxed{7}", true},
      {"dollar wrapped wrong", "\\boxed{8}", "$7$", false},

      // ---- percent: 50% equals 50, not 0.5
      {"percent latex", "\\boxed{50\\%}", "50", true},
      {"percent plain", "\\boxed{50%}", "50", true},
      {"percent both sides", "\\boxed{50\\%}", "50%", true},
      {"percent is not a fraction", "\\boxed{50\\%}", "0.5", false},
      {"fraction is not a percent", "\\boxed{0.5}", "50%", false},
      {"percent with decimals", "\\boxed{12.5\\%}", "12.50", true},

      // ---- decimals
      {"decimal trailing zero", "\\boxed{2.50}", "2.5", true},
      {"decimal .0 vs integer", "\\boxed{2.0}", "2", true},
      {"decimal .000 vs integer", "\\boxed{7.000}", "7", true},
      {"decimal 12 vs 1.2", "\\boxed{12}", "1.2", false},
      {"decimal 0.75 vs frac", "\\boxed{0.75}", "\\frac{3}{4}", true},
      {"decimal 0.75 vs slash", "\\boxed{0.75}", "3/4", true},
      {"decimal 0.33 vs 1/3", "\\boxed{0.33}", "1/3", false},
      {"decimal 0.333 vs frac 1/3", "\\boxed{0.333}", "\\frac{1}{3}", false},
      {"decimal 0.1 vs 0.10000", "\\boxed{0.1}", "0.10000", true},
      {"decimal 0.1 vs 0.01", "\\boxed{0.1}", "0.01", false},
      {"decimal trailing point", "\\boxed{5.}", "5", true},

      // ---- fractions
      {"frac reduced", "\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", true},
      {"dfrac", "\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", true},
      {"tfrac", "\\boxed{\\tfrac{1}{2}}", "0.5", true},
      {"frac shorthand", "\\boxed{\\frac12}", "1/2", true},
      {"frac shorthand half braced", "\\boxed{\\frac1{3}}", "\\frac{1}{3}", true},
      {"frac shorthand spaced", "\\boxed{\\frac 3 4}", "0.75", true},
      {"frac wrong denominator", "\\boxed{\\frac{1}{2}}", "\\frac{1}{3}", false},
      {"frac sign outside vs inside", "\\boxed{-\\frac{1}{2}}", "\\frac{-1}{2}", true},
      {"frac negative vs positive", "\\boxed{-\\frac{1}{2}}", "\\frac{1}{2}", false},
      {"frac improper vs decimal", "\\boxed{\\frac{7}{2}}", "3.5", true},
      {"frac of decimals", "\\boxed{\\frac{1.5}{3}}", "0.5", true},
      {"slash fraction reduced", "\\boxed{6/8}", "3/4", true},
      {"slash vs inverted", "\\boxed{4/3}", "3/4", false},
      {"frac symbolic", "\\boxed{\\frac{\\pi}{2}}", "\\frac\\pi2", true},
      {"frac symbolic other", "\\boxed{\\frac{\\pi}{2}}", "\\frac{\\pi}{3}", false},
      {"frac integer value", "\\boxed{\\frac{8}{4}}", "2", true},
      {"division by zero is text", "\\boxed{1/0}", "1/0", true},
      {"division by zero is not zero", "\\boxed{1/0}", "0", false},

      // ---- signs, zeros, spacing
      {"minus latex", "\\boxed{\\-5}", "-5", true},
      {"minus unicode", "\\boxed{\xE2\x88\x92" "5}", "-5", true},
      {"minus -5 vs 5", "\\boxed{-5}", "5", false},
      {"minus spaced", "\\boxed{- 5}", "-5", true},
      {"plus sign", "\\boxed{+5}", "5", true},
      {"leading zeros", "\\boxed{007}", "7", true},
      {"leading point", "\\boxed{.5}", "0.5", true},
      {"negative zero", "\\boxed{-0}", "0", true},
      {"left right", "\\boxed{\\left( 3, 4 \\right)}", "(3,4)", true},
      {"negative thin space", "\\boxed{2\\!\\sqrt{3}}", "2\\sqrt{3}", true},
      {"spaces in expression", "\\boxed{x^2 + 1}", "x^2+1", true},
      {"displaystyle", "\\boxed{\\displaystyle\\frac{1}{4}}", "0.25", true},
      {"quad spacing", "\\boxed{1,\\quad 2}", "1, 2", true},

      // ---- degrees
      {"degrees circ", "\\boxed{30^\\circ}", "30", true},
      {"degrees braced circ", "\\boxed{30^{\\circ}}", "30", true},
      {"degrees unicode", "\\boxed{45\xC2\xB0}", "45", true},
      {"degrees wrong", "\\boxed{30^\\circ}", "60", false},

      // ---- text wrapping and case
      {"text wrapper", "\\boxed{\\text{even}}", "even", true},
      {"textbf wrapper", "\\boxed{\\textbf{B}}", "B", true},
      {"plain word case", "\\boxed{YES}", "yes", true},
      {"multiple choice letter case", "\\boxed{C}", "c", true},
      {"multiple choice other letter", "\\boxed{B}", "C", false},
      {"latex keeps case", "\\boxed{\\Delta}", "\\delta", false},

      // ---- leading assignment
      {"x equals", "\\boxed{x = 4}", "4", true},
      {"answer equals in text", "\\boxed{\\text{answer} = 4}", "4", true},
      {"x equals wrong", "\\boxed{x = 4}", "5", false},
      {"two equals signs kept", "\\boxed{x = y = 4}", "4", false},
      {"theta equals degrees", "\\boxed{\\theta = 30^\\circ}", "30", true},
      {"subscript equals", "\\boxed{x_1 = 2}", "2", true},
      {"assignments in a tuple", "\\boxed{x = 1, y = 2}", "1, 2", true},

      // ---- scientific notation
      {"scientific e", "\\boxed{1e3}", "1000", true},
      {"scientific times braced", "\\boxed{1.5\\times10^{3}}", "1500", true},
      {"scientific times spaced", "\\boxed{1.5 \\times 10^3}", "1500", true},
      {"scientific negative exponent", "\\boxed{2.5E-2}", "1/40", true},
      {"scientific 1500 vs 150", "\\boxed{1.5\\times10^{3}}", "150", false},
      {"scientific unicode times", "\\boxed{2 \xC3\x97 10^{2}}", "200", true},
      {"scientific cdot", "\\boxed{3\\cdot10^{-1}}", "0.3", true},
      // An integer power is its value (it was text: a right 2^{10} scored only the format reward).
      {"a power of ten", "\\boxed{10^3}", "1000", true},
      {"a power in braces", "\\boxed{2^{10}}", "1024", true},
      {"a negative power", "\\boxed{10^{-3}}", "0.001", true},
      {"a power is not its base", "\\boxed{2^{10}}", "2", false},
      {"a power is not another", "\\boxed{2^{10}}", "1000", false},
      {"a sign before a power is the power's", "\\boxed{-2^2}", "-4", true},
      {"a power past 128 bits is text", "\\boxed{10^{60}}", "10^{60}", true},
      // A mixed number is its value (it was text: a right 3\frac{1}{2} scored only the format reward).
      {"a mixed number", "\\boxed{3\\frac{1}{2}}", "3.5", true},
      {"a mixed number, short form", "\\boxed{3\\frac12}", "7/2", true},
      {"a mixed number, spaced", "\\boxed{3 \\dfrac{1}{2}}", "\\frac{7}{2}", true},
      {"a negative mixed number", "\\boxed{-2\\frac{1}{3}}", "-7/3", true},
      {"a reference as a mixed number", "\\boxed{\\frac{7}{2}}", "3\\frac{1}{2}", true},
      {"a mixed number with a unit", "\\boxed{3\\frac{1}{2}\\text{ cups}}", "3.5", true},
      {"a mixed number is not its fraction times the integer", "\\boxed{3\\frac{1}{2}}", "1.5", false},
      {"an improper fraction after an integer is no mixed number", "\\boxed{2\\frac{3}{2}}", "3.5", false},
      {"a decimal before a fraction is no mixed number", "\\boxed{1.5\\frac{1}{2}}", "2", false},

      // ---- big numbers: exact, never wrapped around
      {"big integer equal", "\\boxed{" + kBig45 + "}", kBig45, true},
      {"big integer trailing .0", "\\boxed{" + kBig45 + ".0}", kBig45, true},
      {"big integer off by one", "\\boxed{" + kBig45Plus1 + "}", kBig45, false},
      {"big integer thousands", "\\boxed{123,456,789,012,345,678,901,234,567,890,123,456,789,012,345}", kBig45, true},
      {"2^64 vs 2^64.000", "\\boxed{" + kTwoTo64 + "}", kTwoTo64 + ".000", true},
      {"2^64 vs 2^64 - 1", "\\boxed{" + kTwoTo64 + "}", "18446744073709551615", false},
      {"2^127 - 1 equal", "\\boxed{" + kTwoTo127Minus1 + "}", kTwoTo127Minus1, true},
      {"2^127 equal past int128", "\\boxed{" + kTwoTo127 + "}", kTwoTo127 + ".0", true},
      {"2^127 vs 2^127 - 1", "\\boxed{" + kTwoTo127 + "}", kTwoTo127Minus1, false},
      {"long decimal equal", "\\boxed{" + kLongThird + "}", kLongThird + "000", true},
      {"long decimal is not 1/3", "\\boxed{" + kLongThird + "}", "1/3", false},
      {"1e40 vs digits", "\\boxed{1e40}", "1" + std::string(40, '0'), true},
      {"huge fraction as text", "\\boxed{\\frac{1}{1" + std::string(40, '0') + "}}",
       "\\dfrac{1}{1" + std::string(40, '0') + "}", true},

      // ---- tuples, intervals, lists, expressions
      {"tuple elementwise numbers", "\\boxed{(0.5, 1)}", "(\\frac{1}{2}, 1)", true},
      {"tuple different length", "\\boxed{(1, 2, 3)}", "(1,2)", false},
      {"list bare", "\\boxed{1, 2, 3}", "1,2,3", true},
      {"list order matters", "\\boxed{3, 2, 1}", "1,2,3", false},
      {"interval half open", "\\boxed{(-2, 5]}", "(-2,5]", true},
      {"pi expression", "\\boxed{2\\pi}", "2 \\pi", true},
      {"sqrt shorthand", "\\boxed{\\sqrt2}", "\\sqrt{2}", true},
      {"cube root", "\\boxed{\\sqrt[3]{2}}", "\\sqrt[3]{2}", true},
      {"cube root vs square root", "\\boxed{\\sqrt[3]{2}}", "\\sqrt{2}", false},
      {"complex number", "\\boxed{3 + 4i}", "3+4i", true},
      {"complex number conjugate", "\\boxed{3 - 4i}", "3+4i", false},

      // ---- references that cannot be matched
      {"empty reference", "\\boxed{5}", "", false},
      {"blank reference", "The answer is", "  ", false},
  };
}

TEST(MathVerifier, Table) {
  const std::vector<VerifierCase> cases = verifier_cases();
  EXPECT_GE(cases.size(), 150u);
  for (const VerifierCase& c : cases) {
    EXPECT_EQ(math_answer_correct(c.completion, c.reference), c.correct)
        << "case \"" << c.label << "\": completion \"" << c.completion << "\", reference \"" << c.reference
        << "\", extracted \"" << extract_final_answer(c.completion).value_or("<none>") << "\" -> \""
        << normalize_answer(extract_final_answer(c.completion).value_or("")) << "\", reference -> \""
        << normalize_answer(reference_final_answer(c.reference)) << "\"";
  }
}

// ---------------------------------------------------------------------------------- extraction

void expect_extracted(std::string_view completion, const std::string& text, AnswerMarker marker) {
  const std::optional<FinalAnswer> got = find_final_answer(completion);
  ASSERT_TRUE(got.has_value()) << completion;
  EXPECT_EQ(got->text, text) << completion;
  EXPECT_EQ(got->marker, marker) << completion;
}

TEST(MathAnswerExtraction, EachRuleAndItsMarker) {
  expect_extracted("so \\boxed{\\frac{1}{2}} done", "\\frac{1}{2}", AnswerMarker::boxed);
  expect_extracted("\\boxed{1} then \\fbox{ 2 }", "2", AnswerMarker::boxed);
  expect_extracted("$\\boxed 9$", "9", AnswerMarker::boxed);
  expect_extracted("\\boxed{\\{a\\}}", "\\{a\\}", AnswerMarker::boxed);
  expect_extracted("reasoning\n#### 72", "72", AnswerMarker::hashes);
  expect_extracted("#### -3.5.\n", "-3.5", AnswerMarker::hashes);
  expect_extracted("The answer is 42.", "42", AnswerMarker::answer_phrase);
  expect_extracted("**Answer:** $x = 3$", "$x = 3$", AnswerMarker::answer_phrase);
  expect_extracted("The final answer is (1, 2), as shown.", "(1, 2)", AnswerMarker::answer_phrase);
  expect_extracted("2 and 3", "3", AnswerMarker::last_number);
  expect_extracted("total: 1,234,567.89 units", "1,234,567.89", AnswerMarker::last_number);
  expect_extracted("a list 1,2345", "2345", AnswerMarker::last_number);
  expect_extracted("from (-4)", "-4", AnswerMarker::last_number);
  expect_extracted("x-4", "4", AnswerMarker::last_number);
  expect_extracted("ratio 3/4.", "3/4", AnswerMarker::last_number);
  expect_extracted("a distance of 3.0e2 m", "3.0e2", AnswerMarker::last_number);
  expect_extracted("2 equations", "2", AnswerMarker::last_number);
}

TEST(MathAnswerExtraction, NoAnswer) {
  EXPECT_FALSE(find_final_answer("").has_value());
  EXPECT_FALSE(find_final_answer("no digits here").has_value());
  EXPECT_FALSE(find_final_answer("\\boxed{}").has_value());
  EXPECT_FALSE(find_final_answer("#### Summary").has_value());
  EXPECT_FALSE(extract_final_answer("The answer is").has_value());
  EXPECT_FALSE(find_final_answer("<think>\\boxed{3} 4 5").has_value()) << "reasoning cut before its end";
  EXPECT_FALSE(find_final_answer("<think>\\boxed{3}</think>").has_value()) << "nothing after the reasoning";
}

TEST(MathAnswerExtraction, TruncatedBoxIsNoAnswer) {
  // A box opened after the last one closed (generation cut at max tokens inside it) gave no
  // answer: its number was the last-number fallback, so "\\boxed{5" scored 5 whatever followed.
  EXPECT_FALSE(find_final_answer("\\boxed{5").has_value());
  EXPECT_FALSE(find_final_answer("first \\boxed{4}, then \\boxed{5").has_value());
  EXPECT_FALSE(find_final_answer("\\boxed{4} then \\fbox{5").has_value());
  expect_extracted("\\boxed{4} and then 5", "4", AnswerMarker::boxed);
  EXPECT_FALSE(is_well_formed(AnswerMarker::last_number));
  EXPECT_TRUE(is_well_formed(AnswerMarker::boxed));
  EXPECT_TRUE(is_well_formed(AnswerMarker::hashes));
  EXPECT_TRUE(is_well_formed(AnswerMarker::answer_phrase));
}

TEST(MathAnswerExtraction, DegenerateCompletionIsFast) {
  // A policy stuck repeating an unclosed box: 600 KB must not take quadratic time.
  std::string completion;
  for (int i = 0; i < 100000; ++i) completion += "\\boxed{";
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(math_answer_correct(completion, "5"));
  std::string closed = completion + "5" + std::string(100000, '}');
  EXPECT_TRUE(math_answer_correct(closed, "5"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0);
}

TEST(MathAnswerExtraction, ReferenceFinalAnswer) {
  EXPECT_EQ(reference_final_answer("48/2 = 24\n#### 72"), "72");
  EXPECT_EQ(reference_final_answer("\\frac{1}{2}"), "\\frac{1}{2}");
}

// ---------------------------------------------------------------------------------- normalisation

TEST(MathAnswerNormalization, Numbers) {
  EXPECT_EQ(normalize_answer("1,234"), "1234");
  EXPECT_EQ(normalize_answer("1{,}234"), "1234");
  EXPECT_EQ(normalize_answer("1\\,234"), "1234");
  EXPECT_EQ(normalize_answer("\\frac{3}{4}"), "3/4");
  EXPECT_EQ(normalize_answer("0.750"), "3/4");
  EXPECT_EQ(normalize_answer("-\\dfrac{6}{4}"), "-3/2");
  EXPECT_EQ(normalize_answer("\\frac12"), "1/2");
  EXPECT_EQ(normalize_answer("6/-8"), "-3/4");
  EXPECT_EQ(normalize_answer("007"), "7");
  EXPECT_EQ(normalize_answer("5.000"), "5");
  EXPECT_EQ(normalize_answer("-0.0"), "0");
  EXPECT_EQ(normalize_answer("\xE2\x88\x92" "2"), "-2");
  EXPECT_EQ(normalize_answer("50\\%"), "50");
  EXPECT_EQ(normalize_answer("\\$1,000.50"), "2001/2");
  EXPECT_EQ(normalize_answer("30^{\\circ}"), "30");
  EXPECT_EQ(normalize_answer("1.5\\times10^{3}"), "1500");
  EXPECT_EQ(normalize_answer("1e-3"), "1/1000");
}

TEST(MathAnswerNormalization, BigNumbersStayExact) {
  EXPECT_EQ(normalize_answer(kTwoTo127Minus1), kTwoTo127Minus1);   // still a 128-bit rational
  EXPECT_EQ(normalize_answer(kTwoTo127), kTwoTo127);               // exact decimal from here on
  EXPECT_EQ(normalize_answer("-" + kBig45 + ".500"), "-" + kBig45 + ".5");
  EXPECT_EQ(normalize_answer(kLongThird + "0"), kLongThird);
  EXPECT_EQ(normalize_answer("1e40"), "1" + std::string(40, '0'));
  EXPECT_EQ(normalize_answer("1e-40"), "0." + std::string(39, '0') + "1");
  // An exponent too large to write out is not a number: compared as text.
  EXPECT_EQ(normalize_answer("1e99999"), "1e99999");
}

TEST(MathAnswerNormalization, Text) {
  EXPECT_EQ(normalize_answer("\\text{Yes}"), "yes");
  EXPECT_EQ(normalize_answer("\\left( 1,2 \\right)"), "(1, 2)");
  EXPECT_EQ(normalize_answer("[0,\\infty)"), "[0, \\infty)");
  EXPECT_EQ(normalize_answer("\\{3, 1\\}"), "\\{3, 1\\}");
  EXPECT_EQ(normalize_answer("(0.5, \\frac{3}{6})"), "(1/2, 1/2)");
  EXPECT_EQ(normalize_answer("5\\text{ cm}"), "5");
  EXPECT_EQ(normalize_answer("5 apples"), "5");
  EXPECT_EQ(normalize_answer("x = 5"), "5");
  EXPECT_EQ(normalize_answer("$x^2 + 1$."), "x^2+1");
  EXPECT_EQ(normalize_answer("\\frac{\\sqrt3}{2}"), "\\frac{\\sqrt{3}}{2}");
  EXPECT_EQ(normalize_answer("\\boxed{\\dfrac12}"), "1/2");
  EXPECT_EQ(normalize_answer("\\sqrt[3]{2}"), "\\sqrt[3]{2}");
  EXPECT_EQ(normalize_answer("2x"), "2x");
  EXPECT_EQ(normalize_answer(""), "");
  EXPECT_EQ(normalize_answer("  $ $ "), "");
  EXPECT_EQ(normalize_answer("\\text{ }"), "");
}

TEST(MathAnswerNormalization, Idempotent) {
  for (const char* answer : {"1,234", "1, 234", "\\left( 0.5, 2 \\right)", "\\text{Yes}", "5\\text{ cm}", "x = -3",
                             "\\frac{\\sqrt3}{2}", "[0, \\infty)", "1e40", "50\\%", "\\{1, \\frac12\\}", "3 + 4i"}) {
    const std::string once = normalize_answer(answer);
    EXPECT_EQ(normalize_answer(once), once) << answer;
  }
}

TEST(MathAnswerNormalization, OverlongAnswerIsComparedVerbatim) {
  const std::string long_answer = "  " + std::string(5000, '1') + "  ";
  EXPECT_EQ(normalize_answer(long_answer), std::string(5000, '1'));
}

TEST(MathAnswerEquality, SymmetricAndNeverEmpty) {
  EXPECT_TRUE(answers_equal("0.75", "\\frac34"));
  EXPECT_TRUE(answers_equal("\\frac34", "0.75"));
  EXPECT_FALSE(answers_equal("", ""));
  EXPECT_FALSE(answers_equal("$$", "\\text{}"));
}

}  // namespace
}  // namespace shardrl
