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
// collective of the step). `pad` must be an id of the model's vocabulary (it is embedded and
// is a target, though every padded position is masked).
void fill_rows(const std::vector<Sequence>& sequences, int first, int end, int count, int S, std::int32_t pad,
               std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets);

}  // namespace shardrl
