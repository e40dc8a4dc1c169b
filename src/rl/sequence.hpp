// A training sequence of the RL loop: [BOS] prompt completion (or, in the warm-up, the
// demonstration and EOS), trained only on the tokens after the prompt. Rows of a micro-batch
// hold one sequence each, right-padded with PAD; position t of a row predicts id t + 1.
#pragma once

#include <cstdint>
#include <vector>

namespace shardrl {

struct Sequence {
  std::vector<std::int32_t> ids;   // BOS, prompt, then the trained part
  int prompt_len = 0;              // ids before the trained part (BOS included)
  int trained() const { return static_cast<int>(ids.size()) - prompt_len; }
  // Row position whose target is trained token k.
  int position_of(int k) const { return prompt_len - 1 + k; }
};

// tokens/targets of `count` rows of S positions: row r holds sequences[first + r] while
// first + r < end, else only PAD (a rank with fewer sequences still takes part in every
// collective of the step).
void fill_rows(const std::vector<Sequence>& sequences, int first, int end, int count, int S,
               std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets);

}  // namespace shardrl
