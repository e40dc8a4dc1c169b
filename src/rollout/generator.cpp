#include "rollout/generator.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"

namespace shardrl {
namespace {

ModelOptions decode_options(ModelOptions o, int rows) {
  o.max_batch = rows;
  o.max_seq_len = 1;   // one new token per row and step
  o.activation_recompute = false;
  return o;
}

}  // namespace

Generator::Generator(const ModelOptions& model, int rows, int max_len, const ExecSpace& space)
    : model_(decode_options(model, rows), space),
      cache_(model.shape, rows, max_len, model.precision == Precision::bf16 ? sizeof(bf16) : sizeof(float)),
      max_rows_(rows), max_len_(max_len), keys_("draw_keys", rows), drawn_("drawn", rows),
      drawn_logp_("drawn_logp", rows) {
  SHARDRL_CHECK(max_len <= model.shape.max_seq_len, "generation length beyond the model's max_seq_len");
}

std::vector<Completion> Generator::generate(const std::vector<const void*>& weights,
                                            const std::vector<GenerationRow>& rows, const SamplingOptions& sampling,
                                            int max_new_tokens, std::uint64_t seed, std::int64_t iteration,
                                            std::int32_t eos) {
  const int R = static_cast<int>(rows.size());
  SHARDRL_CHECK(R >= 1 && R <= max_rows_, fmt::format("{} rows for a generator of {}", R, max_rows_));
  std::size_t longest = 0;
  for (const auto& r : rows) {
    SHARDRL_CHECK(!r.prompt.empty(), "an empty prompt");
    longest = std::max(longest, r.prompt.size());
  }
  SHARDRL_CHECK(static_cast<int>(longest) + max_new_tokens <= max_len_,
                fmt::format("prompt of {} tokens + {} new tokens exceed the generator's {} positions", longest,
                            max_new_tokens, max_len_));
  const bool half = model_.options().precision == Precision::bf16;
  const int V = model_.options().shape.vocab_size, head = model_.head_unit();
  const void* tied = model_.options().shape.tie_embeddings ? weights[0] : nullptr;

  std::vector<Completion> out(R);
  std::vector<std::int32_t> input(R), position(R, 0), drawn(R);
  std::vector<float> drawn_logp(R);
  auto keys_h = Kokkos::create_mirror_view(keys_);
  auto drawn_h = Kokkos::create_mirror_view(drawn_);
  auto logp_h = Kokkos::create_mirror_view(drawn_logp_);
  for (int r = 0; r < R; ++r) input[r] = rows[r].prompt[0];

  // Every row advances one position per step: through its prompt, then through its completion.
  // A finished row keeps stepping on its last token (its results are not used) until all end.
  for (int t = 0;; ++t) {
    bool any_active = false;
    for (int r = 0; r < R; ++r) {
      position[r] = t;
      keys_h(r) = draw_key(seed, iteration, rows[r].prompt_index, rows[r].sample_index,
                           static_cast<std::int64_t>(out[r].tokens.size()));
    }
    model_.set_decode_step(input.data(), position.data(), R);
    for (int u = 0; u < model_.unit_count(); ++u) model_.decode_unit(u, weights[u], cache_, u == head ? tied : nullptr);
    Kokkos::deep_copy(keys_, keys_h);
    if (half)
      sample_tokens(model_.space(), static_cast<const bf16*>(model_.logits()), keys_.data(), sampling, drawn_.data(),
                    drawn_logp_.data(), R, V);
    else
      sample_tokens(model_.space(), static_cast<const float*>(model_.logits()), keys_.data(), sampling, drawn_.data(),
                    drawn_logp_.data(), R, V);
    Kokkos::deep_copy(drawn_h, drawn_);
    Kokkos::deep_copy(logp_h, drawn_logp_);
    for (int r = 0; r < R; ++r) {
      const int len = static_cast<int>(rows[r].prompt.size());
      Completion& c = out[r];
      if (t + 1 < len) {
        input[r] = rows[r].prompt[t + 1];   // still reading the prompt
        any_active = true;
      } else if (!c.finished && static_cast<int>(c.tokens.size()) < max_new_tokens) {
        c.tokens.push_back(drawn_h(r));
        c.logp.push_back(logp_h(r));
        c.finished = drawn_h(r) == eos;
        input[r] = drawn_h(r);
        any_active = any_active || (!c.finished && static_cast<int>(c.tokens.size()) < max_new_tokens);
      }
    }
    if (!any_active) break;
  }
  return out;
}

}  // namespace shardrl
