// Completions of the generator against the full model: drawn tokens and their log-probabilities,
// rows that finish, keyed sampling, decode graphs, and LoRA's adapters folded into the weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "generation_test_support.hpp"

namespace shardrl {
namespace {

using namespace generation_test;

// Rows of prompts with different lengths; the completions are checked against a full forward of
// prompt + completion: each drawn token's recorded log-probability is the model's, and greedy
// tokens are the argmax at the previous position.
TEST(Generate, CompletionsMatchTheFullModel) {
  GenerationRig rig;
  const int V = rig.s.vocab_size;
  for (SamplingOptions o : {SamplingOptions{0.0f, 0, 1.0f}, SamplingOptions{1.0f, 0, 1.0f}}) {
    Generator gen(opts(rig.s, Precision::fp32, 8, 1), 8, 40, ExecSpace());
    auto rows = rig.rows();
    auto out = gen.generate(rig.weights, rows, o, 12, 5, 2, /*eos=*/258);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      ASSERT_FALSE(out[r].tokens.empty());
      std::vector<std::int32_t> seq = rows[r].prompt;
      seq.insert(seq.end(), out[r].tokens.begin(), out[r].tokens.end());
      std::vector<double> lp = rig.log_probs(seq);
      for (std::size_t i = 0; i < out[r].tokens.size(); ++i) {
        const int t = static_cast<int>(rows[r].prompt.size() + i) - 1;   // position predicting token i
        EXPECT_NEAR(out[r].logp[i], lp[t * V + out[r].tokens[i]], 1e-4) << "row " << r << " token " << i;
        if (o.temperature == 0.0f) {
          const auto* row = &lp[t * V];
          EXPECT_EQ(out[r].tokens[i], std::max_element(row, row + V) - row) << "row " << r << " token " << i;
        }
      }
      EXPECT_EQ(out[r].finished, out[r].tokens.back() == 258);
      if (!out[r].finished) {
        EXPECT_EQ(out[r].tokens.size(), 12u);
      }
    }
  }
}

// A row that draws EOS leaves the batch; the others go on exactly as if it had not.
TEST(Generate, FinishedRowsLeaveWithoutDisturbingTheOthers) {
  GenerationRig rig;
  auto rows = rig.rows();
  Generator gen(opts(rig.s, Precision::fp32, 8, 1), 8, 40, ExecSpace());
  const SamplingOptions greedy{0.0f, 0, 1.0f};
  auto open = gen.generate(rig.weights, rows, greedy, 10, 1, 0, /*eos=*/-1);
  const std::int32_t eos = open[1].tokens[0];   // row 1 ends at once
  auto ended = gen.generate(rig.weights, rows, greedy, 10, 1, 0, eos);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    auto stop = std::find(open[r].tokens.begin(), open[r].tokens.end(), eos);
    std::vector<std::int32_t> want(open[r].tokens.begin(), stop == open[r].tokens.end() ? stop : stop + 1);
    EXPECT_EQ(ended[r].tokens, want) << "row " << r;
    EXPECT_EQ(ended[r].finished, stop != open[r].tokens.end()) << "row " << r;
  }
  EXPECT_EQ(ended[1].tokens.size(), 1u);
}

// A row's completion depends on its prompt and key, not on which other rows share the batch.
TEST(Generate, SameKeysSameCompletionsInAnyBatch) {
  GenerationRig rig;
  auto rows = rig.rows();
  Generator gen(opts(rig.s, Precision::fp32, 8, 1), 8, 40, ExecSpace());
  auto together = gen.generate(rig.weights, rows, SamplingOptions{}, 10, 7, 3, 258);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    auto alone = gen.generate(rig.weights, {rows[r]}, SamplingOptions{}, 10, 7, 3, 258);
    EXPECT_EQ(alone[0].tokens, together[r].tokens) << "row " << r;
  }
  auto other_seed = gen.generate(rig.weights, rows, SamplingOptions{}, 10, 8, 3, 258);
  EXPECT_NE(other_seed[0].tokens, together[0].tokens);
}

// rollout.cuda_graph = "decode": the decode step replayed per batch bucket (CUDA graphs on GPU
// builds, host replay on CPU builds) draws what eager decoding draws, while rows finish and the
// active rows shrink through the buckets (4, 2, 1 for 3 rows: padding rows use free' cache
// slots); a second call captures nothing new. With LoRA adapters too (their path is in the graph).
void decode_graphs_draw_what_eager_decoding_draws(LoraShape lora) {
  GenerationRig rig(lora);
  auto rows = rig.rows();
  Generator eager(opts(rig.s, Precision::fp32, 8, 1), 8, 40, ExecSpace());
  Generator graphed(opts(rig.s, Precision::fp32, 8, 1), 8, 40, ExecSpace());
  graphed.use_decode_graphs(!CapturedGraph::native());
  const SamplingOptions sampling{1.0f, 0, 1.0f};
  // An EOS that some rows draw early: the most frequent first token of an open-ended run.
  auto open = eager.generate(rig.weights, rows, sampling, 12, 3, 1, /*eos=*/-1);
  const std::int32_t eos = open[2].tokens[1];
  auto want = eager.generate(rig.weights, rows, sampling, 12, 3, 1, eos);
  std::size_t lengths_differ = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) lengths_differ += want[r].tokens.size() != want[0].tokens.size();
  EXPECT_GT(lengths_differ, 0u) << "rows should finish at different steps";
  // A bucket's first step runs eagerly, its second is captured, later ones replay.
  for (int call = 0; call < 3; ++call) {
    auto got = graphed.generate(rig.weights, rows, sampling, 12, 3, 1, eos);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      ASSERT_EQ(got[r].tokens, want[r].tokens) << "call " << call << " row " << r;
      ASSERT_EQ(got[r].logp.size(), want[r].logp.size());
      for (std::size_t i = 0; i < got[r].logp.size(); ++i)
        EXPECT_NEAR(got[r].logp[i], want[r].logp[i], 1e-5) << "call " << call << " row " << r << " token " << i;
    }
  }
  const int captures = graphed.decode_graph_captures();
  EXPECT_GE(captures, 2);
  EXPECT_LE(captures, 3);
  graphed.generate(rig.weights, rows, sampling, 12, 3, 1, eos);
  EXPECT_EQ(graphed.decode_graph_captures(), captures) << "a known bucket is not captured again";
}

TEST(Generate, DecodeGraphsDrawWhatEagerDecodingDraws) { decode_graphs_draw_what_eager_decoding_draws({}); }

// bf16 rows whose caches pass one range of the GPU decode attention's split (256 positions), at a
// head dim its CUDA kernel takes (64): the decode graphs, replaying steps that split and merge the
// ranges, draw what eager decoding draws.
TEST(Generate, DecodeGraphsDrawWhatEagerDecodingDrawsOverLongCachesBf16) {
  ModelShape s = resolve_model_shape(ModelConfig{});
  s.head_dim = 64;
  const int max_len = 320;
  s.max_seq_len = std::max(s.max_seq_len, max_len);
  Generator eager(opts(s, Precision::bf16, 8, 1), 8, max_len, ExecSpace());
  Generator graphed(opts(s, Precision::bf16, 8, 1), 8, max_len, ExecSpace());
  graphed.use_decode_graphs(!CapturedGraph::native());
  DenseParameters params(eager.model(), ExecSpace());
  params.initialize(21, 0.3f);
  std::vector<const void*> weights;
  for (int u = 0; u < eager.model().unit_count(); ++u) weights.push_back(params.compute_weights(u));
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> tok(0, s.vocab_size - 1);
  std::vector<GenerationRow> rows(3);
  const int lengths[3] = {300, 250, 40};   // the second crosses 256 while it decodes
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < lengths[r]; ++i) rows[r].prompt.push_back(tok(gen));
    rows[r].prompt_index = 200 + r;
    rows[r].sample_index = r;
  }
  const SamplingOptions sampling{1.0f, 0, 1.0f};
  const auto want = eager.generate(weights, rows, sampling, 12, 3, 1, /*eos=*/-1);
  for (int call = 0; call < 2; ++call) {
    const auto got = graphed.generate(weights, rows, sampling, 12, 3, 1, -1);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      ASSERT_EQ(got[r].tokens, want[r].tokens) << "call " << call << " row " << r;
      EXPECT_EQ(got[r].logp, want[r].logp) << "call " << call << " row " << r;
    }
  }
}

TEST(Generate, DecodeGraphsDrawWhatEagerDecodingDrawsWithLora) {
  decode_graphs_draw_what_eager_decoding_draws(LoraShape{4, 8.0f, 0x7f, false});
}

// Rollout folds LoRA's adapters into its gathered weights (WeightSet::materialize): decoding with
// W + scale B A and the adapters off draws what the adapter path draws, with the same
// log-probabilities to rounding; the base alone (adapters off, nothing folded) draws otherwise.
void folded_adapters_draw_what_the_adapter_path_draws(LoraShape lora) {
  GenerationRig rig(lora);
  const auto rows = rig.rows();
  const ModelOptions options = opts(rig.s, Precision::fp32, 8, 1);
  Generator adapted(options, 8, 40, ExecSpace()), folded(options, 8, 40, ExecSpace()), base(options, 8, 40, ExecSpace());
  std::vector<DeviceView<float>> copies;
  std::vector<const void*> folded_weights;
  for (int u = 0; u < rig.full.unit_count(); ++u) {
    const std::size_t n = static_cast<std::size_t>(rig.params.numel(u));
    copies.emplace_back("folded", n);
    Kokkos::deep_copy(copies.back(), Kokkos::View<const float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                                         static_cast<const float*>(rig.weights[u]), n));
    folded.model().fold_adapters(u, copies.back().data());
    folded_weights.push_back(copies.back().data());
  }
  folded.model().set_adapters(false);
  base.model().set_adapters(false);
  const SamplingOptions sampling{1.0f, 0, 1.0f};
  const auto want = adapted.generate(rig.weights, rows, sampling, 12, 3, 1, /*eos=*/-1);
  const auto got = folded.generate(folded_weights, rows, sampling, 12, 3, 1, -1);
  const auto plain = base.generate(rig.weights, rows, sampling, 12, 3, 1, -1);
  int base_differs = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    ASSERT_EQ(got[r].tokens, want[r].tokens) << "row " << r;
    for (std::size_t i = 0; i < got[r].logp.size(); ++i)
      EXPECT_NEAR(got[r].logp[i], want[r].logp[i], 1e-5) << "row " << r << " token " << i;
    base_differs += plain[r].tokens != want[r].tokens;
  }
  EXPECT_GT(base_differs, 0) << "the adapters change the draws: otherwise the comparison is blind";
}

TEST(Generate, FoldedAdaptersDrawWhatTheAdapterPathDraws) {
  folded_adapters_draw_what_the_adapter_path_draws(LoraShape{4, 8.0f, 0x7f, false});
}
// MoE: the attention's adapters and every expert's (the MLP targets have no dense layer here).
TEST(Generate, FoldedAdaptersDrawWhatTheAdapterPathDrawsMoeExperts) {
  folded_adapters_draw_what_the_adapter_path_draws(LoraShape{4, 8.0f, 0xf, false, true});
}

}  // namespace
}  // namespace shardrl
