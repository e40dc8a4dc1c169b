// Internal to src/rl: the per-example random engine, uniform draws that are the same on every
// standard library, whitespace stripping of completions, and the concrete task constructors.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "rl/task.hpp"

namespace shardrl::task_detail {

// Distinct salts keep tasks from sharing random streams for the same (seed, iteration, index).
inline constexpr std::uint32_t kSortSalt = 0x534f5254u;     // "SORT"
inline constexpr std::uint32_t kAddSalt = 0x41444430u;      // "ADD0"
inline constexpr std::uint32_t kReverseSalt = 0x52455653u;  // "REVS"
inline constexpr std::uint32_t kJsonlSalt = 0x4a534f4eu;    // "JSON"
inline constexpr std::uint32_t kTextSalt = 0x54455854u;     // "TEXT"

std::mt19937_64 example_engine(std::uint32_t salt, std::uint64_t seed, std::int64_t iteration,
                               std::int64_t index);

// Uniform in [0, n), n > 0, by rejection on the raw 64-bit output.
std::uint64_t uniform_below(std::mt19937_64& engine, std::uint64_t n);

// `text` without trailing whitespace (space, \t, \r, \n, \v, \f).
std::string strip_trailing_whitespace(const std::string& text);

// Partial credit of a position-wise answer: the fraction of positions where `got` equals
// `want`, or 0 when the lengths differ or `want` is empty.
template <class Seq>
double matching_fraction(const Seq& got, const Seq& want) {
  if (got.size() != want.size() || want.empty()) return 0.0;
  std::size_t right = 0;
  for (std::size_t i = 0; i < want.size(); ++i) right += (got[i] == want[i]) ? 1 : 0;
  return static_cast<double>(right) / static_cast<double>(want.size());
}

std::unique_ptr<Task> make_sort_task(int difficulty, bool partial_credit);
std::unique_ptr<Task> make_add_task(int difficulty, bool partial_credit);
std::unique_ptr<Task> make_reverse_task(int difficulty, bool partial_credit);
// eos_id: rl.eos_id (-1: unset), required by a pre-tokenized dataset.
std::unique_ptr<Task> make_jsonl_task(const std::string& dataset_path, std::int64_t eos_id);
std::unique_ptr<Task> make_text_task(const TaskOptions& options);

}  // namespace shardrl::task_detail
