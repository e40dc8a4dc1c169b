// The head: computed in chunks of tokens, it equals the whole batch's head; logits it does not
// hold (a chunked forward's, or any once a layer has run again) are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model_test_support.hpp"

namespace shardrl {
namespace {

using namespace model_test;

// The head in chunks of 5 tokens (18 tokens: 5, 5, 5, 3; backward recomputes all but the last)
// computes what it computes over the whole batch at once: per-token log-probabilities, the loss
// and every gradient, to rounding: a GEMM of 5 rows may sum in another order than one of 18
// (cuBLAS picks kernels by shape, and so does OpenBLAS for the rows past its kernels' unroll:
// single-threaded on a 2-core CI machine, 5 rows and 18 gave logits a bit apart), which moves a
// logit by its last bit (bf16: 2^-8 relative of logits of size ~0.2), and the head's weight
// gradient sums its chunks' GEMMs instead of one. Its logits buffer holds 5 tokens, not 18.
TEST(Model, ChunkedHeadEqualsWholeBatchHead) {
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(p == Precision::fp32 ? "fp32" : "bf16");
    ModelShape s = tiny_shape();
    // A vocabulary whose logits, even 5 tokens' of them, outweigh the layer scratch that shares
    // their memory (Activations::shared), in whole 256-byte blocks: the memory saved is then the
    // logits' alone.
    s.vocab_size = 4096;
    Batch b(2, 9, s.vocab_size, 31);
    ModelOptions whole_options = options(s, p, 2, 9), chunked_options = whole_options;
    chunked_options.logits_chunk_tokens = 5;
    Rig whole(whole_options, 17), chunked(chunked_options, 17);
    whole.set(b);
    chunked.set(b);
    const double whole_loss = whole.step(1.0f / b.count()), chunked_loss = chunked.step(1.0f / b.count());
    const bool fp32 = p == Precision::fp32;
    EXPECT_NEAR(chunked_loss, whole_loss, (fp32 ? 1e-6 : 1e-3) * std::fabs(whole_loss));
    const std::vector<float> whole_logp = whole.host(whole.model.logp(), 18);
    const std::vector<float> chunked_logp = chunked.host(chunked.model.logp(), 18);
    for (int t = 0; t < 18; ++t) {
      EXPECT_NEAR(chunked_logp[t], whole_logp[t], (fp32 ? 1e-5 : 2e-3) * std::max(1.0f, std::fabs(whole_logp[t])))
          << "token " << t;
    }
    EXPECT_EQ(whole.model.activation_bytes() - chunked.model.activation_bytes(),
              std::size_t(18 - 5) * s.vocab_size * whole.model.compute_type_size());
    const double rtol = p == Precision::fp32 ? 1e-5 : 2e-2;
    for (int u = 0; u < whole.model.unit_count(); ++u) {
      const auto w = whole.host(whole.params.grads(u), whole.params.numel(u));
      const auto c = chunked.host(chunked.params.grads(u), chunked.params.numel(u));
      double scale = 0;
      for (float x : w) scale = std::max(scale, double(std::fabs(x)));
      for (std::size_t i = 0; i < w.size(); ++i)
        ASSERT_NEAR(c[i], w[i], rtol * scale) << "unit " << u << " element " << i;
    }
  }
}

// The logits of a chunked forward are not the batch's: asking for them is a caller's bug.
TEST(ModelDeathTest, LogitsOfAChunkedForwardAreRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        ModelShape s = tiny_shape();
        ModelOptions o = options(s, Precision::fp32, 2, 9);
        o.logits_chunk_tokens = 5;
        Rig rig(o, 17);
        Batch b(2, 9, s.vocab_size, 31);
        rig.set(b);
        rig.nll_sum(b);
        rig.model.logits();
      },
      "computed in chunks");
}

// A layer's forward writes scratch that shares the logits' memory (Activations::shared): the
// logits of the forward before it are gone, and asking for them is refused.
TEST(ModelDeathTest, LogitsAreGoneOnceALayerRunsAgain) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ModelShape s = tiny_shape();
  ModelOptions o = options(s, Precision::fp32, 2, 9);
  Rig rig(o, 17);
  Batch b(2, 9, s.vocab_size, 31);
  rig.set(b);
  rig.nll_sum(b);
  EXPECT_NE(rig.model.logits(), nullptr);   // held: the whole batch's, no layer since
  EXPECT_DEATH(
      {
        rig.model.forward_unit(1, rig.params.compute_weights(1));
        rig.model.logits();
      },
      "a layer's scratch");
}


}  // namespace
}  // namespace shardrl
