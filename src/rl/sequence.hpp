// A training sequence of the RL loop: [BOS] prompt completion (or, in the warm-up, the
// demonstration and EOS), trained only on the tokens after the prompt; a pre-tokenized prompt is
// its dataset's ids as they are (no BOS added). Rows of a micro-batch hold one sequence each,
// right-padded with the pad id; position t of a row predicts id t + 1.
#pragma once

#include <cstdint>
#include <vector>

namespace shardrl {

struct Sequence {
  std::vector<std::int32_t> ids;   // the prompt (with BOS for a text prompt), then the trained part
  int prompt_len = 0;              // ids before the trained part (BOS included)
  int trained() const { return static_cast<int>(ids.size()) - prompt_len; }
  // Row position whose target is trained token k.
  int position_of(int k) const { return prompt_len - 1 + k; }
};

// tokens/targets of `count` rows of S positions: row r holds sequences[first + r] while
// first + r < end, else only `pad` (a rank with fewer sequences still takes part in every
// collective of the step). `pad` must be an id of the model's vocabulary (it is embedded).
// Only the trained positions have targets: the prompt's and the padding's are kUnscoredTarget,
// so the head skips them. row_tokens[r]: the positions before row r's padding
// (Transformer::set_batch's row_tokens).
void fill_rows(const std::vector<Sequence>& sequences, int first, int end, int count, int S, std::int32_t pad,
               std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets,
               std::vector<std::int32_t>& row_tokens);

// Sequences [first, end) laid out in rows of `row_len` positions: packed (first fit in order: each
// goes into the first row with room, every sequence attending only to itself), or one per row.
// A sequence of n ids takes n - 1 positions (its last id is only a target).
struct PackedRows {
  int row_len = 0;
  std::vector<std::vector<int>> rows;   // the sequences of each row, in position order
  std::vector<int> row_of, offset_of;   // per sequence i: row and first position (index i - first)
  // Position in the flat (rows x row_len) batch of sequence i's trained token k, given the batch
  // starts at row `first_row`.
  std::size_t slot(const std::vector<Sequence>& sequences, int first, int i, int k, int first_row) const {
    const int n = i - first;
    return std::size_t(row_of[n] - first_row) * row_len + offset_of[n] + sequences[i].position_of(k);
  }
};
PackedRows pack_rows(const std::vector<Sequence>& sequences, int first, int end, int row_len, bool pack);

// The row length a batch needs: its longest sequence's positions rounded up to a multiple of
// `granule` (few distinct shapes for captured steps), at most max_len; at least 1.
int row_length(const std::vector<Sequence>& sequences, int first, int end, int granule, int max_len);

// tokens/targets/positions of rows [first_row, first_row + count) of `packed` (rows past its last
// are all padding; targets as fill_rows'). Positions restart at 0 for each sequence; a row's
// unused tail is padding that starts a sequence of its own (masked, and after every real token,
// so nothing attends to it); row_tokens[r] counts the positions before it.
void fill_packed_rows(const std::vector<Sequence>& sequences, const PackedRows& packed, int first_row, int count,
                      std::int32_t pad, std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets,
                      std::vector<std::int32_t>& positions, std::vector<std::int32_t>& row_tokens);

}  // namespace shardrl
