#include "rl/sequence.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"
#include "model/scored_tokens.hpp"

namespace shardrl {

namespace {
// The target of position t of sequence s: the next id where it is trained, else none.
std::int32_t scored_target(const Sequence& s, std::size_t t) {
  return static_cast<int>(t) >= s.position_of(0) ? s.ids[t + 1] : kUnscoredTarget;
}
}  // namespace

void fill_rows(const std::vector<Sequence>& sequences, int first, int end, int count, int S, std::int32_t pad,
               std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets,
               std::vector<std::int32_t>& row_tokens) {
  tokens.assign(std::size_t(count) * S, pad);
  targets.assign(tokens.size(), kUnscoredTarget);
  row_tokens.assign(count, 0);
  for (int r = 0; r < count; ++r) {
    const int i = first + r;
    if (i >= end) continue;
    const auto& ids = sequences[i].ids;
    SHARDRL_CHECK(static_cast<int>(ids.size()) <= S + 1,
                  fmt::format("a sequence of {} ids does not fit {} positions", ids.size(), S));
    row_tokens[r] = static_cast<std::int32_t>(ids.size()) - 1;
    for (std::size_t t = 0; t + 1 < ids.size(); ++t) {
      tokens[std::size_t(r) * S + t] = ids[t];
      targets[std::size_t(r) * S + t] = scored_target(sequences[i], t);
    }
  }
}

PackedRows pack_rows(const std::vector<Sequence>& sequences, int first, int end, int row_len, bool pack) {
  PackedRows p;
  p.row_len = row_len;
  std::vector<int> used;   // positions taken in each row
  for (int i = first; i < end; ++i) {
    const int need = static_cast<int>(sequences[i].ids.size()) - 1;
    SHARDRL_CHECK(need >= 1 && need <= row_len,
                  fmt::format("a sequence of {} ids does not fit rows of {} positions", need + 1, row_len));
    int row = static_cast<int>(p.rows.size());
    if (pack)
      for (int r = 0; r < static_cast<int>(used.size()); ++r)
        if (used[r] + need <= row_len) {
          row = r;
          break;
        }
    if (row == static_cast<int>(p.rows.size())) {
      p.rows.emplace_back();
      used.push_back(0);
    }
    p.rows[row].push_back(i);
    p.row_of.push_back(row);
    p.offset_of.push_back(used[row]);
    used[row] += need;
  }
  return p;
}

int row_length(const std::vector<Sequence>& sequences, int first, int end, int granule, int max_len) {
  int longest = 1;
  for (int i = first; i < end; ++i) longest = std::max(longest, static_cast<int>(sequences[i].ids.size()) - 1);
  return std::min(max_len, (longest + granule - 1) / granule * granule);
}

void fill_packed_rows(const std::vector<Sequence>& sequences, const PackedRows& packed, int first_row, int count,
                      std::int32_t pad, std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets,
                      std::vector<std::int32_t>& positions, std::vector<std::int32_t>& row_tokens) {
  const int S = packed.row_len;
  tokens.assign(std::size_t(count) * S, pad);
  targets.assign(tokens.size(), kUnscoredTarget);
  positions.resize(tokens.size());
  row_tokens.resize(count);
  for (int r = 0; r < count; ++r) {
    const std::size_t row = std::size_t(r) * S;
    int at = 0;
    if (first_row + r < static_cast<int>(packed.rows.size()))
      for (int i : packed.rows[first_row + r]) {
        const auto& ids = sequences[i].ids;
        for (std::size_t t = 0; t + 1 < ids.size(); ++t, ++at) {
          tokens[row + at] = ids[t];
          targets[row + at] = scored_target(sequences[i], t);
          positions[row + at] = static_cast<std::int32_t>(t);
        }
      }
    row_tokens[r] = at;
    for (int k = 0; at < S; ++at, ++k) positions[row + at] = k;   // the tail: a padding sequence
  }
}

}  // namespace shardrl
