// Generation against recomputation: a KV-cache decode step gives the logits that a full forward
// of the whole sequence gives at that position.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "config/model_presets.hpp"
#include "model/dense_parameters.hpp"
#include "kernels/decode_gemv.hpp"
#include "model/kv_cache.hpp"
#include "model/transformer.hpp"
#include "rollout/block_pool.hpp"
#include "rollout/generator.hpp"

namespace shardrl {
namespace {

ModelOptions opts(const ModelShape& s, Precision p, int rows, int len) {
  ModelOptions o;
  o.shape = s;
  o.precision = p;
  o.max_batch = rows;
  o.max_seq_len = len;
  return o;
}

template <class T>
std::vector<float> host_logits(const Transformer& m, int rows) {
  const int V = m.options().shape.vocab_size;
  Kokkos::View<const T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> d(static_cast<const T*>(m.logits()),
                                                                              std::size_t(rows) * V);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d);
  std::vector<float> out(std::size_t(rows) * V);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(h(i));
  return out;
}

// LoRA's B is zero at initialisation (the adapters then change nothing): set every B to a fixed
// pattern, the same for every model of the shape, so that the adapters take part (about as much
// as the base's own products: larger adapters scale the activations, and bf16's absolute
// rounding with them).
void set_lora_b(const Transformer& m, DenseParameters& params) {
  for (int u = 0; u < m.unit_count(); ++u) {
    std::vector<float> w(params.numel(u));
    using Device = Kokkos::View<float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    using Host = Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(Host(w.data(), w.size()), Device(params.main_weights(u), w.size()));
    for (const auto& p : m.units()[u].params)
      if (p.name.find(".lora_B.") != std::string::npos)
        for (std::int64_t i = 0; i < p.numel(); ++i) w[p.offset + i] = 0.01f * std::sin(0.7f * float(i + u));
    Kokkos::deep_copy(Device(params.main_weights(u), w.size()), Host(w.data(), w.size()));
  }
  params.refresh_compute_weights();
}

// Logits of a full forward of (B, L) tokens with the weights of seed 9.
template <class T>
std::vector<float> full_logits(const ModelShape& s, Precision p, const std::vector<std::int32_t>& tokens, int B, int L) {
  std::vector<std::int32_t> targets(tokens.size(), 0);
  Transformer full(opts(s, p, B, L), ExecSpace());
  DenseParameters params(full, ExecSpace());
  params.initialize(9, 0.02f);
  if (s.lora.on()) set_lora_b(full, params);
  full.set_batch(tokens.data(), targets.data(), B, L);
  for (int u = 0; u < full.unit_count(); ++u)
    full.forward_unit(u, params.compute_weights(u), u == full.head_unit() ? params.compute_weights(0) : nullptr);
  return host_logits<T>(full, B * L);
}

// Decode step by step with a KV cache; returns the worst difference from `want` (full forward).
// With `truth` (an fp32 model's logits), both the decode and `want` must also be within
// `tolerance` of it.
template <class T>
void check_decode(Precision p, bool tied, double tolerance, int n_experts = 0, int lora_rank = 0, int d_model = 0,
                  int rows = 3, int length = 11, int head_dim = 0) {
  ModelShape s = resolve_model_shape(ModelConfig{});
  if (d_model > 0) s.d_model = d_model;
  if (head_dim > 0) s.head_dim = head_dim;
  s.lora.rank = lora_rank;   // adapters on every linear layer
  s.lora.alpha = 2.0f * lora_rank;
  s.lora.targets = 0x7f;
  s.lora.experts = n_experts > 0;   // and every expert's projections
  s.n_experts = n_experts;   // mixture-of-experts MLPs: 4 experts, top 2, a shared expert
  s.top_k = n_experts > 0 ? 2 : 0;
  s.d_ff_expert = n_experts > 0 ? 32 : 0;
  s.shared_expert = n_experts > 0;
  s.tie_embeddings = tied;
  s.qk_norm = !tied;
  const int B = rows, L = length, V = s.vocab_size;
  s.max_seq_len = std::max(s.max_seq_len, L);
  std::mt19937 gen(4);
  std::uniform_int_distribution<int> tok(0, V - 1);
  std::vector<std::int32_t> tokens(B * L);
  for (auto& t : tokens) t = tok(gen);
  const std::vector<float> want = full_logits<T>(s, p, tokens, B, L);
  // bf16: decode (a fused per-row kernel) and the full forward (GEMM attention) round
  // differently, each within bf16 rounding of the exact result; so both are held to an fp32
  // model of the same weights as well as to each other.
  const bool bf = p == Precision::bf16;
  const std::vector<float> truth = bf ? full_logits<float>(s, Precision::fp32, tokens, B, L) : want;
  if (s.lora.on()) {
    // The adapters move the logits well past the tolerance: a decode that skipped them fails.
    ModelShape base = s;
    base.lora = LoraShape{};
    const std::vector<float> plain = full_logits<float>(base, Precision::fp32, tokens, B, L);
    double moved = 0;
    for (std::size_t i = 0; i < plain.size(); ++i) moved = std::max(moved, double(std::fabs(plain[i] - truth[i])));
    ASSERT_GT(moved, 5 * tolerance);
  }

  // Built as the generator builds its model (inference_only: decode steps update the residual in
  // place), so the references hold that path too.
  ModelOptions step_options = opts(s, p, B, 1);
  step_options.inference_only = true;
  Transformer step(step_options, ExecSpace());
  DenseParameters params(step, ExecSpace());
  params.initialize(9, 0.02f);
  if (s.lora.on()) set_lora_b(step, params);
  KvCache cache(s, B, L, step.compute_type_size());
  const long gemms_before = step.gemm().counters().calls;
  double worst = 0, worst_decode = 0, worst_full = 0;
  for (int t = 0; t < L; ++t) {
    std::vector<std::int32_t> now(B), pos(B, t);
    for (int b = 0; b < B; ++b) now[b] = tokens[b * L + t];
    step.set_decode_step(now.data(), pos.data(), B);
    for (int u = 0; u < step.unit_count(); ++u)
      step.decode_unit(u, params.compute_weights(u), cache, u == step.head_unit() ? params.compute_weights(0) : nullptr);
    std::vector<float> got = host_logits<T>(step, B);
    for (int b = 0; b < B; ++b)
      for (int v = 0; v < V; ++v) {
        const std::size_t at = (std::size_t(b) * L + t) * V + v;
        const double w = want[at], g = got[std::size_t(b) * V + v], e = truth[at];
        worst = std::max(worst, std::fabs(g - w));
        worst_decode = std::max(worst_decode, std::fabs(g - e));
        worst_full = std::max(worst_full, std::fabs(w - e));
        ASSERT_NEAR(g, w, tolerance) << "row " << b << " position " << t << " token " << v;
        if (bf) {
          ASSERT_NEAR(g, e, tolerance) << "decode against fp32: row " << b << " position " << t << " token " << v;
          ASSERT_NEAR(w, e, tolerance) << "full against fp32: row " << b << " position " << t << " token " << v;
        }
      }
  }
#if defined(KOKKOS_ENABLE_CUDA)
  // bf16 decode steps of a few rows take the matrix-vector kernels on GPU builds: held to the
  // same references here (a layer's q, k, v; o; gate, up and SwiGLU, unless adapters add to
  // gate and up; down; and the head).
  if (bf && B <= kernels::kDecodeGemvMaxRows)
    EXPECT_EQ(step.decode_gemv_calls(), long(L) * ((s.lora.on() ? 3 : 4) * s.n_layers + 1));
#endif
  // Past the matrix-vector kernels' rows a dense layer without adapters runs four GEMMs: q, k
  // and v as one, o, gate and up as one, down; and the head one.
  if (B > kernels::kDecodeGemvMaxRows && n_experts == 0 && lora_rank == 0) {
    EXPECT_EQ(step.gemm().counters().calls - gemms_before, long(L) * (4 * s.n_layers + 1));
  }
  std::printf("decode vs recompute (%s%s): worst logit difference %.2e", bf ? "bf16" : "fp32", tied ? ", tied" : "",
              worst);
  if (bf) std::printf("; against fp32: decode %.2e, full forward %.2e", worst_decode, worst_full);
  std::printf("\n");
}

// fp32: the same arithmetic up to GEMM blocking. bf16: weights and activations rounded to bf16
// make both paths differ from the fp32 model by up to 5.5e-3 (decode) and 4.6e-3 (full forward),
// and from each other by 3.9e-3 (CPU); a wrong cache slot or position shifts logits by O(0.1).
TEST(Decode, KvCacheLogitsEqualFullRecomputeFp32) {
  check_decode<float>(Precision::fp32, false, 1e-5);
  check_decode<float>(Precision::fp32, true, 1e-5);
}
TEST(Decode, KvCacheLogitsEqualFullRecomputeBf16) { check_decode<bf16>(Precision::bf16, false, 8e-3); }
TEST(Decode, KvCacheLogitsEqualFullRecomputeMixtureOfExperts) { check_decode<float>(Precision::fp32, false, 1e-5, 4); }
// A residual row too long for the decode kernels to fold the layer's norms in (d_model 6144 >
// 6136, kernels/decode_gemv.cu): on GPU builds the norms run first and the kernels still take the
// products. bf16 rounding over rows 96 times as long: on the CPU both paths differ from the fp32
// model by up to 0.10 and from each other by 0.078; a decode one position off moved a logit by 1.9
// at this width (0.14 at the default 64). Held to 0.15.
TEST(Decode, KvCacheLogitsEqualFullRecomputeWideRows) {
  check_decode<bf16>(Precision::bf16, false, 0.15, 0, 0, 6144);
}
// Steps past the matrix-vector kernels' rows: q, k and v as one GEMM, gate and up as another,
// read from their rows of (q | k | v) and (g | u).
TEST(Decode, KvCacheLogitsEqualFullRecomputeManyRows) {
  const int rows = kernels::kDecodeGemvMaxRows + 2;
  check_decode<float>(Precision::fp32, false, 1e-5, 0, 0, 0, rows);
  check_decode<float>(Precision::fp32, true, 1e-5, 0, 0, 0, rows);
  check_decode<bf16>(Precision::bf16, false, 8e-3, 0, 0, 0, rows);
  // Adapters on q, k, v and gate, up keep the separate GEMMs they add to; MoE layers their own MLP.
  check_decode<float>(Precision::fp32, false, 1e-5, 0, 4, 0, rows);
  check_decode<float>(Precision::fp32, false, 1e-5, 4, 4, 0, rows);
}
// Caches past one range of the GPU decode attention's split (kernels/attention_decode_cuda.hpp:
// 256 positions), at a head dim its CUDA kernel takes (64): on GPU builds the bf16 steps split
// each row's positions and merge the ranges.
TEST(Decode, KvCacheLogitsEqualFullRecomputeLongRows) {
  check_decode<bf16>(Precision::bf16, false, 8e-3, 0, 0, 0, 3, 300, 64);
}
// Decoding runs the adapters too (the rollout samples from the adapted policy, not the base).
TEST(Decode, KvCacheLogitsEqualFullRecomputeLora) {
  check_decode<float>(Precision::fp32, false, 1e-5, 0, 4);
  check_decode<bf16>(Precision::bf16, false, 8e-3, 0, 4);
  check_decode<float>(Precision::fp32, false, 1e-5, 4, 4);   // MoE: the attention's and the experts' adapters
}

// Rows of prompts with different lengths; the completions are checked against a full forward of
// prompt + completion: each drawn token's recorded log-probability is the model's, and greedy
// tokens are the argmax at the previous position.
// The tiny model with `lora`'s adapters; with adapters on experts, its MLPs MoE (4 experts, top
// 2, a shared expert).
ModelShape with_adapters(LoraShape lora) {
  ModelShape s = resolve_model_shape(ModelConfig{});
  s.lora = lora;
  if (lora.experts) {
    s.n_experts = 4;
    s.top_k = 2;
    s.d_ff_expert = 32;
    s.shared_expert = true;
  }
  return s;
}

struct GenerationRig {
  ModelShape s;
  Transformer full{opts(s, Precision::fp32, 1, 40), ExecSpace()};
  DenseParameters params{full, ExecSpace()};
  std::vector<const void*> weights;
  // The tiny model, with `lora`'s adapters (B set, so that they take part) where it has some.
  explicit GenerationRig(LoraShape lora = {}) : s(with_adapters(lora)) {
    params.initialize(21, 0.3f);   // a larger init than usual, so distributions are far from uniform
    if (lora.on()) set_lora_b(full, params);
    for (int u = 0; u < full.unit_count(); ++u) weights.push_back(params.compute_weights(u));
  }
  std::vector<GenerationRow> rows() const {
    std::vector<GenerationRow> r(3);
    r[0].prompt = {10, 20, 30, 40, 50};
    r[1].prompt = {7};
    r[2].prompt = {1, 2, 3};
    for (int i = 0; i < 3; ++i) {
      r[i].prompt_index = 100 + i;
      r[i].sample_index = i % 2;
    }
    return r;
  }
  // log softmax of the full model at each position of `seq`, (len, V).
  std::vector<double> log_probs(const std::vector<std::int32_t>& seq) {
    const int L = static_cast<int>(seq.size()), V = s.vocab_size;
    std::vector<std::int32_t> targets(L, 0);
    full.set_batch(seq.data(), targets.data(), 1, L);
    for (int u = 0; u < full.unit_count(); ++u) full.forward_unit(u, weights[u], nullptr);
    std::vector<float> logits = host_logits<float>(full, L);
    std::vector<double> out(logits.size());
    for (int t = 0; t < L; ++t) {
      double mx = -1e30, z = 0;
      for (int v = 0; v < V; ++v) mx = std::max(mx, double(logits[t * V + v]));
      for (int v = 0; v < V; ++v) z += std::exp(logits[t * V + v] - mx);
      for (int v = 0; v < V; ++v) out[t * V + v] = logits[t * V + v] - mx - std::log(z);
    }
    return out;
  }
};

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

// ---- The paged engine (rollout.engine = "paged").

// Blocks go out lowest first, come back when their last reference goes, and the peak in use is
// kept; releasing a block twice is a bug the pool refuses.
TEST(BlockPool, ReferencesFreeBlocksAndPeak) {
  BlockPool pool(4);
  EXPECT_EQ(pool.take(), 0);
  EXPECT_EQ(pool.take(), 1);
  EXPECT_EQ(pool.take(), 2);
  pool.share(1);
  EXPECT_EQ(pool.references(1), 2);
  pool.release(1);
  EXPECT_EQ(pool.free_blocks(), 1) << "block 1 still has a reference";
  pool.release(0);
  pool.release(1);
  EXPECT_EQ(pool.free_blocks(), 3);
  EXPECT_EQ(pool.take(), 0) << "lowest first, whatever the order of releases";
  EXPECT_EQ(pool.in_use(), 2);
  EXPECT_EQ(pool.peak_in_use(), 3);
}

// copy_blocks: each target block becomes its source, in every layer's keys and values; every
// other block is untouched. Blocks of 16 bytes of fp32 (8-byte words) and of 6 bytes of bf16
// (2-byte words: one position of 3 dimensions).
TEST(KvCache, CopyBlocksCopiesEveryLayerAndNothingElse) {
  for (const std::size_t element : {std::size_t(4), std::size_t(2)}) {
    ModelShape shape;
    shape.n_layers = 3;
    shape.n_heads = shape.n_kv_heads = 1;
    shape.head_dim = element == 4 ? 2 : 3;
    const int positions = element == 4 ? 2 : 1, blocks = 6;
    KvCache cache(shape, KvCache::Paged{blocks, positions, 4}, 8, element);
    const std::size_t pool_bytes = std::size_t(blocks) * positions * shape.head_dim * element;
    using Bytes = Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    std::vector<std::vector<char>> before;
    for (int l = 0; l < shape.n_layers; ++l)
      for (void* pool : {cache.keys(l), cache.values(l)}) {
        std::vector<char> bytes(pool_bytes);
        for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + l * 31 + before.size());
        Kokkos::deep_copy(Bytes(static_cast<char*>(pool), pool_bytes),
                          Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                              bytes.data(), pool_bytes));
        before.push_back(bytes);
      }
    cache.copy_blocks(ExecSpace(), {{1, 4}, {0, 2}, {5, 3}});
    Kokkos::fence();
    const std::size_t block = pool_bytes / blocks;
    int pool_index = 0;
    for (int l = 0; l < shape.n_layers; ++l)
      for (void* pool : {cache.keys(l), cache.values(l)}) {
        std::vector<char> want = before[pool_index++], got(pool_bytes);
        for (const auto& [from, to] : {std::pair{1, 4}, std::pair{0, 2}, std::pair{5, 3}})
          std::copy_n(want.begin() + from * block, block, want.begin() + to * block);
        Kokkos::deep_copy(Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                              got.data(), pool_bytes),
                          Bytes(static_cast<char*>(pool), pool_bytes));
        EXPECT_EQ(got, want) << "layer " << l << ", element size " << element;
      }
  }
}

TEST(KvCacheDeathTest, OverlappingBlockCopiesAreRefused) {
  ModelShape shape;
  shape.n_layers = 1;
  shape.n_heads = shape.n_kv_heads = 1;
  shape.head_dim = 2;
  KvCache cache(shape, KvCache::Paged{4, 2, 2}, 4, 4);
  EXPECT_DEATH(cache.copy_blocks(ExecSpace(), {{1, 1}}), "KV cache block copy 1 -> 1");
  EXPECT_DEATH(cache.copy_blocks(ExecSpace(), {{0, 1}, {1, 2}, {2, 3}}), "3 KV cache block copies at once");
  EXPECT_DEATH(cache.copy_blocks(ExecSpace(), {{0, 1}, {1, 2}}), "block 1 is a target twice, or also a source");
  EXPECT_DEATH(cache.copy_blocks(ExecSpace(), {{0, 2}, {1, 2}}), "block 2 is a target twice, or also a source");
}

TEST(BlockPoolDeathTest, ReleasingAFreeBlockIsRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        BlockPool pool(2);
        pool.release(pool.take());
        pool.release(0);
      },
      "not in use");
}

// Four prompts (1 to 19 tokens, so blocks of 4 positions are full, partly filled or absent) of
// four samples each: 16 rows.
std::vector<GenerationRow> sampled_rows() {
  const std::vector<std::vector<std::int32_t>> prompts = {
      {10, 20, 30, 40, 50}, {7}, {1, 2, 3}, {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}};
  std::vector<GenerationRow> rows;
  for (std::size_t p = 0; p < prompts.size(); ++p)
    for (int g = 0; g < 4; ++g) rows.push_back(GenerationRow{prompts[p], static_cast<std::int64_t>(200 + p), g});
  return rows;
}

EngineOptions paged(std::int64_t kv_cache_tokens = 0) {
  EngineOptions e;
  e.engine = RolloutEngine::paged;
  e.block_positions = 4;
  e.kv_cache_tokens = kv_cache_tokens;
  return e;
}

void expect_same_completions(const std::vector<Completion>& got, const std::vector<Completion>& want,
                             const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t r = 0; r < want.size(); ++r) {
    ASSERT_EQ(got[r].tokens, want[r].tokens) << what << " row " << r;
    EXPECT_EQ(got[r].finished, want[r].finished) << what << " row " << r;
    ASSERT_EQ(got[r].logp.size(), want[r].logp.size()) << what << " row " << r;
    for (std::size_t i = 0; i < want[r].logp.size(); ++i) {
      EXPECT_NEAR(got[r].logp[i], want[r].logp[i], 1e-5) << what << " row " << r << " token " << i;
      EXPECT_NEAR(got[r].entropy[i], want[r].entropy[i], 1e-5) << what << " row " << r << " token " << i;
    }
  }
}

// The paged engine draws what the static one draws for the same keys: with a prompt prefilled
// once for its samples (which share its full blocks and copy its last, partly filled one), with
// 16 rows through 4 decode slots (a finished row's slot goes to the next waiting row), and with
// a pool too small for the 4 slots' rows at once (rows are preempted and recomputed). Prefill
// runs each prompt's tokens once, not once per sample.
TEST(Generate, PagedEngineDrawsWhatTheStaticEngineDraws) {
  GenerationRig rig;
  const auto rows = sampled_rows();
  const SamplingOptions sampling{1.0f, 0, 1.0f};
  Generator fixed(opts(rig.s, Precision::fp32, 16, 1), 16, 40, ExecSpace());
  auto open = fixed.generate(rig.weights, rows, sampling, 20, 9, 4, /*eos=*/-1);
  const std::int32_t eos = open[3].tokens[2];   // some rows end early, so lengths differ
  const auto want = fixed.generate(rig.weights, rows, sampling, 20, 9, 4, eos);
  std::int64_t prompt_tokens = 0, row_tokens = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    row_tokens += static_cast<std::int64_t>(rows[r].prompt.size()) - 1;
    if (r % 4 == 0) prompt_tokens += static_cast<std::int64_t>(rows[r].prompt.size()) - 1;
  }
  EXPECT_EQ(fixed.last_stats().prefill_tokens, row_tokens);

  Generator all_at_once(opts(rig.s, Precision::fp32, 16, 1), 16, 40, ExecSpace(), nullptr, paged());
  expect_same_completions(all_at_once.generate(rig.weights, rows, sampling, 20, 9, 4, eos), want, "16 slots");
  EXPECT_EQ(all_at_once.last_stats().prefill_tokens, prompt_tokens);
  EXPECT_EQ(all_at_once.last_stats().preemptions, 0);
  // Shared prompts and blocks taken as rows grow: about half the static cache here, where rows
  // each holding their prompt and every position up to their end would need three quarters.
  EXPECT_LT(all_at_once.last_stats().kv_peak_bytes, fixed.last_stats().kv_bytes * 6 / 10);

  Generator refilled(opts(rig.s, Precision::fp32, 4, 1), 4, 40, ExecSpace(), nullptr, paged());
  expect_same_completions(refilled.generate(rig.weights, rows, sampling, 20, 9, 4, eos), want, "4 slots");
  EXPECT_EQ(refilled.last_stats().prefill_tokens, prompt_tokens);
  std::int64_t drawn = 0;
  for (const auto& c : want) drawn += static_cast<std::int64_t>(c.tokens.size());
  EXPECT_EQ(refilled.last_stats().decode_row_steps, drawn);

  // The smallest pool: one sequence of 40 positions and a prompt's, in blocks of 4.
  Generator small(opts(rig.s, Precision::fp32, 4, 1), 4, 40, ExecSpace(), nullptr, paged(1));
  expect_same_completions(small.generate(rig.weights, rows, sampling, 20, 9, 4, eos), want, "small pool");
  EXPECT_GT(small.last_stats().preemptions, 0);
  // 21 blocks and the scratch block, of 4 positions, against 16 rows of 40 positions.
  EXPECT_EQ(small.last_stats().kv_bytes * (16 * 40), fixed.last_stats().kv_bytes * (22 * 4));
}

// rollout.prefill_tokens: prefills in calls of a few rows draw what one call of every row
// draws, with both engines (the static one's 16 rows in calls of 3 rows, 120 positions; the paged
// one's 4 prompts admitted together in calls of 1 row), with the same prefill counts; and the
// decoder's activations hold one call's tokens, not every row's.
TEST(Generate, PrefillInCallsDrawsWhatOneCallDraws) {
  GenerationRig rig;
  const auto rows = sampled_rows();
  const SamplingOptions sampling{1.0f, 0, 1.0f};
  for (const RolloutEngine engine : {RolloutEngine::static_batch, RolloutEngine::paged}) {
    const std::string what = engine == RolloutEngine::paged ? "paged" : "static";
    EngineOptions whole = paged();
    whole.engine = engine;
    EngineOptions calls = whole;
    calls.prefill_tokens = engine == RolloutEngine::paged ? 40 : 120;
    Generator one(opts(rig.s, Precision::fp32, 16, 1), 16, 40, ExecSpace(), nullptr, whole);
    Generator several(opts(rig.s, Precision::fp32, 16, 1), 16, 40, ExecSpace(), nullptr, calls);
    EXPECT_EQ(one.model().tokens_per_forward(), 16u * 40) << what;
    EXPECT_EQ(several.model().tokens_per_forward(), engine == RolloutEngine::paged ? 40u : 120u) << what;
    EXPECT_LT(several.model().activation_bytes(), one.model().activation_bytes() / 4) << what;
    const auto want = one.generate(rig.weights, rows, sampling, 20, 9, 4, /*eos=*/17);
    expect_same_completions(several.generate(rig.weights, rows, sampling, 20, 9, 4, 17), want, what);
    EXPECT_EQ(several.last_stats().prefill_tokens, one.last_stats().prefill_tokens) << what;
  }
}

// Decode graphs with the paged engine: the block table is read from the same device buffer by
// every replay, rewritten between steps; the draws are the eager engine's.
TEST(Generate, PagedEngineDecodeGraphsDrawWhatEagerDecodingDraws) {
  GenerationRig rig;
  const auto rows = sampled_rows();
  const SamplingOptions sampling{1.0f, 0, 1.0f};
  Generator eager(opts(rig.s, Precision::fp32, 4, 1), 4, 40, ExecSpace(), nullptr, paged());
  const auto want = eager.generate(rig.weights, rows, sampling, 10, 11, 2, /*eos=*/17);
  Generator graphed(opts(rig.s, Precision::fp32, 4, 1), 4, 40, ExecSpace(), nullptr, paged());
  graphed.use_decode_graphs(!CapturedGraph::native());
  for (int call = 0; call < 2; ++call)
    expect_same_completions(graphed.generate(rig.weights, rows, sampling, 10, 11, 2, 17), want,
                            "call " + std::to_string(call));
  EXPECT_GE(graphed.decode_graph_captures(), 1);
}

}  // namespace
}  // namespace shardrl
