// The sharded trainer at np 1, 2, 3 and 4 against a single-rank unsharded reference, plus
// micro-batches, the memory formula, use-after-release detection, reshard on/off, clipping,
// the non-finite skip, and the embedding's gradient as rows or as a reduce-scatter.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

#include "config/model_presets.hpp"
#include "core/error.hpp"
#include "fsdp/comm_expert_exchange.hpp"
#include "fsdp/sharded_trainer.hpp"
#include "model/dense_parameters.hpp"

namespace shardrl {
namespace {

constexpr int kGlobalSequences = 24;   // divisible by 1, 2, 3, 4 and 8 ranks
constexpr int kS = 9;

Communicator& comm() {
  static std::unique_ptr<Communicator> c = make_communicator(
      has_backend(CommBackendKind::nccl) ? CommBackendKind::nccl : CommBackendKind::mpi, MPI_COMM_WORLD, 120.0);
  return *c;
}

ModelShape shape(bool tied = false) {
  ModelShape s = resolve_model_shape(ModelConfig{});
  s.tie_embeddings = tied;
  return s;
}

ModelOptions model_opts(const ModelShape& s, int rows, Precision p = Precision::fp32,
                        MoeImpl impl = MoeImpl::grouped) {
  ModelOptions o;
  o.moe_impl = impl;
  o.shape = s;
  o.precision = p;
  o.max_batch = rows;
  o.max_seq_len = kS;
  return o;
}

// The global batch, fixed by the seed: sequence i has tokens, next-token targets and a mask
// (the last two positions of every third sequence are padding).
struct GlobalBatch {
  std::vector<std::int32_t> tokens, targets;
  std::vector<float> mask;
  explicit GlobalBatch(int vocab, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> tok(0, vocab - 1);
    for (int i = 0; i < kGlobalSequences; ++i)
      for (int s = 0; s < kS; ++s) {
        tokens.push_back(tok(gen));
        mask.push_back(i % 3 == 0 && s >= kS - 2 ? 0.0f : 1.0f);
      }
    for (std::size_t n = 0; n < tokens.size(); ++n) targets.push_back((n + 1) % kS == 0 ? tokens[n] : tokens[n + 1]);
  }
  float scale() const { return 1.0f / std::accumulate(mask.begin(), mask.end(), 0.0f); }
};

// Puts sequences [first, first + count) of `b` on the model and returns their mask on the device.
DeviceView<float> load(Transformer& model, const GlobalBatch& b, int first, int count) {
  model.set_batch(b.tokens.data() + first * kS, b.targets.data() + first * kS, count, kS);
  DeviceView<float> mask("mask", count * kS);
  auto h = Kokkos::create_mirror_view(mask);
  for (int i = 0; i < count * kS; ++i) h(i) = b.mask[first * kS + i];
  Kokkos::deep_copy(mask, h);
  return mask;
}

// Whether the optimizer moves `p`: every parameter, or with LoRA the adapters only.
bool trains(const UnitSpec& unit, const ParamSpec& p, const ModelShape& s) {
  return !s.lora.on() || (unit.adapters_begin >= 0 && p.offset >= unit.adapters_begin);
}

// The unsharded reference: all sequences on one rank, whole units, the same optimizer.
std::vector<std::vector<float>> reference_weights(const ModelShape& s, const OptimizerOptions& oo, int steps,
                                                  const std::vector<GlobalBatch>& batches) {
  Transformer model(model_opts(s, kGlobalSequences), ExecSpace());
  DenseParameters p(model, ExecSpace());
  p.initialize(42, 0.02f);
  Optimizer opt(oo, ExecSpace());
  std::vector<DeviceView<float>> m, v;
  for (int u = 0; u < model.unit_count(); ++u) {
    m.emplace_back("m", p.numel(u));
    v.emplace_back("v", p.numel(u));
  }
  DeviceView<float> loss("loss", 1);
  for (int step = 0; step < steps; ++step) {
    const GlobalBatch& b = batches[step % batches.size()];
    auto mask = load(model, b, 0, kGlobalSequences);
    p.zero_grads();
    forward_backward(model, p, mask.data(), b.scale(), loss.data());
    opt.begin_norm();
    for (int u = 0; u < model.unit_count(); ++u) opt.accumulate_sumsq(p.grads(u), p.numel(u));
    opt.prepare_step();
    for (int u = 0; u < model.unit_count(); ++u)
      for (const auto& ps : model.units()[u].params)
        if (trains(model.units()[u], ps, s))
        opt.update(p.main_weights(u) + ps.offset, p.grads(u) + ps.offset, m[u].data() + ps.offset,
                   v[u].data() + ps.offset, ps.numel(), ps.no_decay ? 0.0f : oo.weight_decay);
    p.refresh_compute_weights();
  }
  std::vector<std::vector<float>> out;
  for (int u = 0; u < model.unit_count(); ++u) {
    Kokkos::View<float*, Kokkos::HostSpace> h("h", p.numel(u));
    Kokkos::deep_copy(h, Kokkos::View<float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(p.main_weights(u), p.numel(u)));
    out.emplace_back(h.data(), h.data() + p.numel(u));
  }
  return out;
}

// `steps` sharded steps; each rank trains its share of the global batch in `micro` micro-batches.
std::vector<std::vector<float>> sharded_weights(const ModelShape& s, const FsdpOptions& fo, const OptimizerOptions& oo,
                                                int steps, const std::vector<GlobalBatch>& batches, int micro = 1,
                                                StepMetrics* metrics = nullptr, MoeImpl impl = MoeImpl::grouped,
                                                bool recompute = false, StepProfile* profile = nullptr,
                                                int spare_rows = 0) {
  if (kGlobalSequences % comm().size() != 0 || kGlobalSequences / comm().size() % micro != 0)
    throw std::runtime_error("test_fsdp: the global batch does not split into equal shares at this world size");
  const int per_rank = kGlobalSequences / comm().size(), rows = per_rank / micro;
  ModelOptions mo = model_opts(s, rows + spare_rows, Precision::fp32, impl);   // room for more than the batch
  mo.activation_recompute = recompute;
  std::unique_ptr<CommExpertExchange> exchange;
  if (fo.expert_parallel) {
    exchange = std::make_unique<CommExpertExchange>(comm(), ExecSpace());
    mo.expert_exchange = exchange.get();
  }
  Transformer model(mo, ExecSpace());
  ShardedTrainer trainer(model, comm(), fo, oo);
  trainer.initialize(42, 0.02f);
  DeviceView<float> loss("loss", 1);
  for (int step = 0; step < steps; ++step) {
    const GlobalBatch& b = batches[step % batches.size()];
    for (int k = 0; k < micro; ++k) {
      auto mask = load(model, b, comm().rank() * per_rank + k * rows, rows);
      trainer.forward_backward(mask.data(), b.scale(), loss.data());
    }
    trainer.optimizer_step();
  }
  if (metrics) *metrics = trainer.metrics();
  if (profile) *profile = trainer.profile();
  std::vector<std::vector<float>> out;
  for (int u = 0; u < model.unit_count(); ++u) out.push_back(trainer.gather_main_weights(u));
  return out;
}

// Per unit, the relative error of the whole tensor: ||got - want|| / ||want||. (Element-wise,
// weights that AdamW moved by a gradient near zero differ by rounding relative to themselves.)
void expect_close(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                  double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (std::size_t u = 0; u < got.size(); ++u) {
    ASSERT_EQ(got[u].size(), want[u].size()) << what << " unit " << u;
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < got[u].size(); ++i) {
      diff += (double(got[u][i]) - want[u][i]) * (double(got[u][i]) - want[u][i]);
      norm += double(want[u][i]) * want[u][i];
    }
    EXPECT_LE(std::sqrt(diff), rel * std::sqrt(norm)) << what << ": unit " << u << " relative error "
                                                      << std::sqrt(diff / norm);
    worst = std::max(worst, norm > 0 ? std::sqrt(diff / norm) : 0.0);
  }
  if (comm().rank() == 0) std::printf("%s at np %d: worst relative error %.2e\n", what, comm().size(), worst);
}

FsdpOptions checked() {
  FsdpOptions o;
  o.check_released = true;
  return o;
}

// eps = 1e-4 keeps the comparison well-conditioned. AdamW moves a weight by about
// lr * g / (|g| + eps): where |g| is near eps, d(update)/dg ~ lr / eps, so the rounding
// differences of a different summation order (~1e-10 absolute in a gradient of 1e-3) grow to
// 1e-6 in the weight with eps = 1e-6, and with eps = 1e-8 a gradient that cancels to ~1e-9
// flips its update's sign (both seen at np 2-4). With eps = 1e-4 the worst case is lr * 1e-6.
OptimizerOptions adamw() {
  OptimizerOptions o;
  o.lr = 1e-2f;
  o.eps = 1e-4f;
  o.weight_decay = 0.1f;
  o.clip_grad_norm = 1.0f;
  return o;
}

TEST(Fsdp, FiveStepsEqualTheUnshardedReference) {
  for (bool tied : {false, true}) {
    ModelShape s = shape(tied);
    std::vector<GlobalBatch> batches = {GlobalBatch(s.vocab_size, 1), GlobalBatch(s.vocab_size, 2)};
    auto want = reference_weights(s, adamw(), 5, batches);
    auto got = sharded_weights(s, checked(), adamw(), 5, batches);
    expect_close(got, want, 1e-5, tied ? "tied" : "untied");
  }
}

// The embedding's lookup goes between ranks as rows of the ranks' tokens where all ranks' rows
// are fewer than the vocabulary (a model with room for a row more than each rank's batch:
// 234-252 tokens against 259), and as the table where they are not (against 200): in forward
// each rank's part of every rank's rows from its slice, reduce-scattered, instead of gathering
// the table; in backward the embedding's own gradient, nonzero only in the rows of the batch's
// tokens, as those rows instead of a reduce-scatter of the table's. Either way the training
// equals the unsharded reference's, tied head or not (with released weights poisoned, so a read
// of an embedding never gathered would show); the profile says which ran: a micro-batch
// reduce-scatters each unit (and a tied head's share of the embedding), or with rows the
// forward's rows in place of the embedding's own gradient.
TEST(Fsdp, EmbeddingGradientAsRowsOrReduceScatterEqualsTheReference) {
  for (int vocab : {259, 200})
    for (bool tied : {false, true}) {
      ModelShape s = shape(tied);
      s.vocab_size = vocab;
      const std::vector<GlobalBatch> batches = {GlobalBatch(vocab, 11), GlobalBatch(vocab, 12)};
      const auto want = reference_weights(s, adamw(), 3, batches);
      StepProfile profile;
      const auto got =
          sharded_weights(s, checked(), adamw(), 3, batches, 1, nullptr, MoeImpl::grouped, false, &profile, 1);
      const std::string what = std::to_string(vocab) + (tied ? " tied" : " untied");
      expect_close(got, want, 1e-5, what.c_str());
      const int ranks = comm().size(), units = static_cast<int>(model_units(s).size());
      const bool rows = lookup_as_rows(ranks, (kGlobalSequences / ranks + 1) * kS, vocab);
      EXPECT_EQ(rows, ranks > 1 && vocab == 259) << what;
      if (ranks > 1) {
        // With rows the forward's reduce-scatter takes the place of the embedding's own.
        EXPECT_EQ(profile.reduce_scatters, 3 * (units + (tied ? 1 : 0))) << what;
        const ShardLayout layout(model_units(s), ranks, comm().rank());
        std::int64_t step_bytes = 0;   // fp32 everywhere
        for (int u = 0; u < units; ++u) step_bytes += 4 * layout.unit(u).shard * ranks;
        const std::int64_t embedding = 4 * layout.unit(0).shard * ranks;
        const std::int64_t capacity = (kGlobalSequences / ranks + 1) * kS;   // the model's tokens per forward
        if (tied) step_bytes += embedding;
        if (rows) step_bytes += 4 * ranks * capacity * s.d_model - embedding;
        EXPECT_EQ(profile.reduce_scatter_bytes, 3 * step_bytes) << what;
      }
    }
}

// The embedding looked up from the slices has the gather's bits: two bf16 models that differ
// only in their room for tokens, one with all ranks' room under the vocabulary (rows) and one
// over it (the table gathered), give the same log-probabilities, bit for bit, of the initial
// policy and, after a step, of the reference (each element of the rows' sum has one nonzero
// term). The reference after the step is the initial policy, and differs from the new one.
TEST(Fsdp, EmbeddingLookedUpFromSlicesHasTheGathersBits) {
  const int ranks = comm().size(), rows = kGlobalSequences / ranks;
  if (ranks == 1) GTEST_SKIP() << "one rank: nothing to exchange";
  auto host = [](const float* d, int n) {
    std::vector<float> h(n);
    Kokkos::deep_copy(Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(h.data(), n),
                      Kokkos::View<const float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(d, n));
    return h;
  };
  for (bool tied : {false, true}) {
    ModelShape s = shape(tied);
    s.vocab_size = 259;
    const GlobalBatch b(s.vocab_size, 14);
    // Room for this rank's rows (all ranks': 216 tokens), and for enough that all ranks' reach 259.
    const int table_rows = (s.vocab_size + ranks * kS - 1) / (ranks * kS);
    ASSERT_TRUE(lookup_as_rows(ranks, std::int64_t(rows) * kS, s.vocab_size));
    ASSERT_FALSE(lookup_as_rows(ranks, std::int64_t(table_rows) * kS, s.vocab_size));
    std::vector<float> policy[2], reference[2], stepped[2];
    std::int64_t forward_reduce_bytes[2] = {0, 0}, forward_gather_bytes[2] = {0, 0};
    for (int form = 0; form < 2; ++form) {   // 0: rows, 1: the table
      Transformer model(model_opts(s, form == 0 ? rows : table_rows, Precision::bf16), ExecSpace());
      FsdpOptions fo = checked();
      fo.keep_reference = true;
      ShardedTrainer trainer(model, comm(), fo, adamw());
      trainer.initialize(42, 0.02f);
      trainer.snapshot_reference();
      DeviceView<float> out("logp", rows * kS), loss("loss", 1);
      load(model, b, comm().rank() * rows, rows);
      const StepProfile before = trainer.profile();
      trainer.forward_logp(out.data(), WeightSource::policy);
      forward_reduce_bytes[form] = trainer.profile().reduce_scatter_bytes - before.reduce_scatter_bytes;
      forward_gather_bytes[form] = trainer.profile().all_gather_bytes - before.all_gather_bytes;
      policy[form] = host(out.data(), rows * kS);
      auto mask = load(model, b, comm().rank() * rows, rows);
      trainer.forward_backward(mask.data(), b.scale(), loss.data());
      trainer.optimizer_step();
      load(model, b, comm().rank() * rows, rows);
      trainer.forward_logp(out.data(), WeightSource::reference);
      reference[form] = host(out.data(), rows * kS);
      trainer.forward_logp(out.data(), WeightSource::policy);
      stepped[form] = host(out.data(), rows * kS);
    }
    const char* what = tied ? "tied" : "untied";
    EXPECT_EQ(forward_reduce_bytes[0], std::int64_t(2) * ranks * rows * kS * s.d_model) << what << ": the rows, in bf16";
    EXPECT_EQ(forward_reduce_bytes[1], 0) << what << ": the table gathered, nothing reduced in forward";
    // Every unit gathered once in bf16, the table only for a tied head, or also at the start,
    // where the rows take its place with every rank's token ids.
    const ShardLayout layout(model_units(s), ranks, comm().rank());
    std::int64_t layers_and_head = 0;
    for (int u = 1; u < layout.unit_count(); ++u) layers_and_head += 2 * layout.unit(u).shard * ranks;
    const std::int64_t table = 2 * layout.unit(0).shard * ranks, head_table = tied ? table : 0;
    EXPECT_EQ(forward_gather_bytes[0], layers_and_head + head_table + std::int64_t(4) * ranks * rows * kS) << what;
    EXPECT_EQ(forward_gather_bytes[1], layers_and_head + head_table + table) << what;
    EXPECT_EQ(policy[0], policy[1]) << what << ": the initial policy";
    EXPECT_EQ(reference[0], reference[1]) << what << ": the reference after a step";
    EXPECT_EQ(reference[0], policy[0]) << what << ": the reference is the initial policy";
    EXPECT_NE(stepped[0], policy[0]) << what << ": the step moved the policy";
  }
}

// Reduced in bf16, the embedding's rows are summed in fp32 and rounded once: its gradient slice
// is the fp32 reduction's rounded to bf16, bit for bit (a bf16 reduce-scatter would round each
// rank's share before summing).
TEST(Fsdp, EmbeddingRowsReducedInBf16RoundOnce) {
  ModelShape s = shape();   // untied: the embedding's gradient is its lookup's alone
  const int ranks = comm().size(), rows = kGlobalSequences / ranks;
  if (!lookup_as_rows(ranks, rows * kS, s.vocab_size)) GTEST_SKIP() << "one rank: nothing to exchange";
  const GlobalBatch b(s.vocab_size, 13);
  std::vector<float> slice[2];
  for (GradDtype reduce : {GradDtype::fp32, GradDtype::bf16}) {
    Transformer model(model_opts(s, rows), ExecSpace());
    FsdpOptions fo = checked();
    fo.reduce_dtype = reduce;
    ShardedTrainer trainer(model, comm(), fo, adamw());
    trainer.initialize(42, 0.02f);
    DeviceView<float> loss("loss", 1);
    auto mask = load(model, b, comm().rank() * rows, rows);
    trainer.forward_backward(mask.data(), b.scale(), loss.data());
    slice[reduce == GradDtype::bf16] = trainer.read_gradient_slice(0);
  }
  ASSERT_EQ(slice[0].size(), slice[1].size());
  long nonzero = 0;
  for (std::size_t i = 0; i < slice[0].size(); ++i) {
    ASSERT_EQ(slice[1][i], static_cast<float>(bf16(slice[0][i]))) << "element " << i;
    nonzero += slice[0][i] != 0.0f;
  }
  EXPECT_GT(nonzero, 0) << "this rank's slice holds some of the batch's tokens";
}

// At one rank a unit's slice is the whole unit, so the gather slots are views of the slices: no
// gather memory and no copies. Training, and the reference policy's log-probabilities, give the
// bits of copying into slots of their own (what debug.check_released keeps, so that released
// weights can be poisoned without touching the slices): fp32 and bf16, untied, tied and LoRA.
TEST(Fsdp, OneRankGathersAreViewsOfTheSlices) {
  if (comm().size() != 1) GTEST_SKIP() << "at more than one rank a slice is part of a unit";
  const GlobalBatch b(shape().vocab_size, 9);
  const int rows = kGlobalSequences;
  auto host = [](const float* d, int n) {
    std::vector<float> h(n);
    Kokkos::deep_copy(Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(h.data(), n),
                      Kokkos::View<const float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(d, n));
    return h;
  };
  for (const char* what : {"fp32", "bf16", "bf16 tied", "bf16 LoRA"}) {
    SCOPED_TRACE(what);
    const std::string name = what;
    ModelShape s = shape(name == "bf16 tied");
    if (name == "bf16 LoRA") s.lora = LoraShape{4, 8.0f, 0x7f};
    const Precision p = name == "fp32" ? Precision::fp32 : Precision::bf16;
    std::vector<std::vector<float>> weights[2], logp[2];
    std::int64_t gather_bytes[2] = {0, 0};
    for (int views = 0; views < 2; ++views) {
      FsdpOptions fo;
      fo.check_released = views == 0;   // slots of their own, poisoned when released
      fo.keep_reference = true;
      const std::int64_t before = MemoryLedger::instance().bytes(MemoryCategory::gather);
      Transformer model(model_opts(s, rows, p), ExecSpace());
      ShardedTrainer trainer(model, comm(), fo, adamw());
      gather_bytes[views] = MemoryLedger::instance().bytes(MemoryCategory::gather) - before;
      trainer.initialize(42, 0.02f);
      trainer.snapshot_reference();
      DeviceView<float> loss("loss", 1);
      for (int step = 0; step < 3; ++step) {
        auto mask = load(model, b, 0, rows);
        trainer.forward_backward(mask.data(), b.scale(), loss.data());
        trainer.optimizer_step();
      }
      for (int u = 0; u < model.unit_count(); ++u) weights[views].push_back(trainer.gather_main_weights(u));
      load(model, b, 0, rows);
      DeviceView<float> out("logp", rows * kS);
      for (WeightSource source : {WeightSource::reference, WeightSource::policy}) {
        trainer.forward_logp(out.data(), source);
        logp[views].push_back(host(out.data(), rows * kS));
      }
    }
    EXPECT_GT(gather_bytes[0], 0);
    EXPECT_EQ(gather_bytes[1], 0) << "views own no memory";
    ASSERT_EQ(weights[0].size(), weights[1].size());
    for (std::size_t u = 0; u < weights[0].size(); ++u) EXPECT_EQ(weights[1][u], weights[0][u]) << "unit " << u;
    EXPECT_EQ(logp[1], logp[0]) << "log-probabilities of the reference, then of the policy";
  }
}

// LoRA: every frozen weight ends as it started, bit for bit, and the adapters moved.
void expect_base_frozen_adapters_trained(const std::vector<std::vector<float>>& got,
                                         const std::vector<std::vector<float>>& initial, const ModelShape& s,
                                         const std::string& what) {
  const auto units = model_units(s);
  double moved = 0;
  for (std::size_t u = 0; u < units.size(); ++u)
    for (const auto& p : units[u].params)
      for (std::int64_t i = p.offset; i < p.offset + p.numel(); ++i) {
        if (trains(units[u], p, s)) {
          moved = std::max(moved, double(std::fabs(got[u][i] - initial[u][i])));
        } else if (got[u][i] != initial[u][i]) {
          ADD_FAILURE() << what << ": " << p.name << " is frozen, and element " << i - p.offset << " moved";
          return;
        }
      }
  EXPECT_GT(moved, 1e-3) << what << ": the adapters did not train";
}

// LoRA (rank 4 on every linear layer, untied and tied head): the adapters trained sharded equal
// the unsharded reference's, the base does not move by a bit (its only copy is the compute-type
// slice, no fp32 main weights), and the trainable state is the adapters' alone.
TEST(Fsdp, LoraEqualsTheUnshardedReference) {
  for (bool tied : {false, true}) {
    ModelShape s = shape(tied);
    s.lora = LoraShape{4, 8.0f, 0x7f};
    std::vector<GlobalBatch> batches = {GlobalBatch(s.vocab_size, 1), GlobalBatch(s.vocab_size, 2)};
    const auto initial = reference_weights(s, adamw(), 0, batches);
    auto want = reference_weights(s, adamw(), 5, batches);
    auto got = sharded_weights(s, checked(), adamw(), 5, batches);
    expect_close(got, want, 1e-5, tied ? "LoRA, tied" : "LoRA");
    expect_base_frozen_adapters_trained(got, initial, s, tied ? "LoRA, tied" : "LoRA");
    const auto units = model_units(s);
    // The adapters alone (in the whole units the frozen base dominates the norm).
    std::vector<std::vector<float>> got_adapters, want_adapters;
    for (std::size_t u = 0; u < units.size(); ++u)
      if (units[u].adapters_begin >= 0) {
        got_adapters.emplace_back(got[u].begin() + units[u].adapters_begin, got[u].end());
        want_adapters.emplace_back(want[u].begin() + units[u].adapters_begin, want[u].end());
      }
    expect_close(got_adapters, want_adapters, 1e-5, tied ? "LoRA adapters, tied" : "LoRA adapters");
  }
  // Trainable state per rank: the adapters' share, not the model's.
  ModelShape s = shape();
  s.lora = LoraShape{4, 8.0f, 0x7f};
  const ShardLayout layout(model_units(s), comm().size(), comm().rank(), false, true);
  std::int64_t trainable = 0, slice = 0;
  for (int u = 0; u < layout.unit_count(); ++u) {
    trainable += layout.unit(u).trainable;
    slice += layout.unit(u).shard;
  }
  const std::int64_t quantum = std::int64_t(comm().size()) * kParamAlignElements;
  EXPECT_LE(trainable * comm().size(), s.adapter_count() + s.n_layers * quantum);
  EXPECT_GE(trainable * comm().size(), s.adapter_count());
  EXPECT_GE(slice * comm().size(), s.parameter_count() + s.adapter_count());
}

// LoRA on a mixture-of-experts model (adapters on the attention and on every expert's gate, up
// and down; the router, the experts and the shared expert frozen), its experts sharded with the
// rest (both expert GEMM paths) or by expert parallelism (every rank gathers all the experts'
// adapters and trains its own experts'): equal to the unsharded reference, the base unchanged to
// the bit, the adapters trained.
TEST(Fsdp, LoraOnMixtureOfExpertsEqualsTheUnshardedReference) {
  ModelShape s = shape();
  s.n_experts = 4;
  s.top_k = 2;
  s.d_ff_expert = 24;
  s.shared_expert = true;
  s.lora = LoraShape{4, 8.0f, 0xf, false, /*experts=*/true};
  std::vector<GlobalBatch> batches = {GlobalBatch(s.vocab_size, 5), GlobalBatch(s.vocab_size, 6)};
  const int per_rank = kGlobalSequences / comm().size();
  const int micro = per_rank % 2 == 0 ? 2 : per_rank;
  const auto initial = reference_weights(s, adamw(), 0, batches);
  const auto want = reference_weights(s, adamw(), 3, batches);
  struct Run {
    MoeImpl impl;
    bool expert_parallel, reshard;
    const char* what;
  };
  std::vector<Run> runs{{MoeImpl::grouped, false, true, "LoRA on MoE, grouped"},
                        {MoeImpl::loop, false, true, "LoRA on MoE, loop"}};
  // With expert parallelism (4 experts: 1, 2 or 4 ranks) the adapters follow this rank's experts
  // in a training gather, at a place of their own (UnitShard::adapters_at).
  if (s.n_experts % comm().size() == 0)
    for (bool reshard : {true, false})
      runs.push_back({MoeImpl::grouped, true, reshard, reshard ? "LoRA on MoE, expert parallel" : "LoRA on MoE, expert parallel, kept"});
  for (const Run& r : runs) {
    FsdpOptions fo = checked();
    fo.expert_parallel = r.expert_parallel;
    fo.reshard_after_forward = r.reshard;
    auto got = sharded_weights(s, fo, adamw(), 3, batches, micro, nullptr, r.impl);
    expect_close(got, want, 1e-5, r.what);
    expect_base_frozen_adapters_trained(got, initial, s, r.what);
  }
}

// A mixture-of-experts model (every layer: 4 experts, top 2, a shared expert) sharded, with
// released weights poisoned, resharding after forward and micro-batches, through both expert GEMM
// paths (grouped and the per-expert loop), against the unsharded reference through the grouped
// path. (No load-balancing loss: it is
// not a sum over tokens, so splitting the batch changes it; the model test checks its gradient.)
TEST(Fsdp, MixtureOfExpertsEqualsTheUnshardedReference) {
  ModelShape s = shape();
  s.n_experts = 4;
  s.top_k = 2;
  s.d_ff_expert = 24;
  s.shared_expert = true;
  std::vector<GlobalBatch> batches = {GlobalBatch(s.vocab_size, 5), GlobalBatch(s.vocab_size, 6)};
  const int per_rank = kGlobalSequences / comm().size();
  const int micro = per_rank % 2 == 0 ? 2 : per_rank;
  auto want = reference_weights(s, adamw(), 3, batches);
  for (MoeImpl impl : {MoeImpl::grouped, MoeImpl::loop}) {
    auto got = sharded_weights(s, checked(), adamw(), 3, batches, micro, nullptr, impl);
    expect_close(got, want, 1e-5, impl == MoeImpl::grouped ? "mixture of experts, grouped" : "mixture of experts, loop");
  }
}

// Expert parallelism: each rank keeps 8 / W experts whole and the routed rows travel to them
// (W = 1, 2, 4, 8; not 3). Against the same unsharded reference, with released weights poisoned
// (the other ranks' experts are never gathered), micro-batches, resharding on and off, both GEMM
// paths, activation recompute; and the slices hold exactly this rank's experts.
TEST(Fsdp, ExpertParallelEqualsTheUnshardedReference) {
  ModelShape s = shape();
  s.n_experts = 8;
  s.top_k = 2;
  s.d_ff_expert = 24;
  s.shared_expert = true;
  if (s.n_experts % comm().size() != 0) GTEST_SKIP() << "8 experts do not divide among " << comm().size() << " ranks";
  std::vector<GlobalBatch> batches = {GlobalBatch(s.vocab_size, 7), GlobalBatch(s.vocab_size, 8)};
  const int per_rank = kGlobalSequences / comm().size();
  auto want = reference_weights(s, adamw(), 3, batches);
  for (MoeImpl impl : {MoeImpl::grouped, MoeImpl::loop})
    for (bool reshard : {true, false}) {
      FsdpOptions fo = checked();
      fo.expert_parallel = true;
      fo.reshard_after_forward = reshard;
      auto got = sharded_weights(s, fo, adamw(), 3, batches, per_rank % 2 == 0 ? 2 : 1, nullptr, impl);
      expect_close(got, want, 1e-5, impl == MoeImpl::grouped ? "expert parallel, grouped" : "expert parallel, loop");
    }
  {   // with activation recompute: every layer's forward, exchanges included, runs again in backward
    FsdpOptions fo = checked();
    fo.expert_parallel = true;
    auto got = sharded_weights(s, fo, adamw(), 3, batches, 1, nullptr, MoeImpl::grouped, true);
    expect_close(got, want, 1e-5, "expert parallel, recompute");
  }
  // The layout: a MoE unit's slice is 1 / W of its dense part and this rank's experts whole.
  Transformer model(model_opts(s, 1), ExecSpace());
  const ShardLayout layout(model.units(), comm().size(), comm().rank(), true);
  const UnitSpec& layer = model.units()[1];
  const UnitShard& u = layout.unit(1);
  ASSERT_TRUE(u.expert_parallel());
  EXPECT_EQ(u.dense * comm().size(), layer.experts_begin);
  EXPECT_EQ((u.shard - u.dense) * comm().size(), layer.numel - layer.experts_begin);
  // A gather holds the dense part and this rank's experts only.
  EXPECT_EQ(u.gathered, layer.experts_begin + (layer.numel - layer.experts_begin) / comm().size());
  const int mine = s.n_experts / comm().size();
  for (int e = 0; e < s.n_experts; ++e) {
    const ParamOverlap o = layout.overlap(1, layer.param(".experts." + std::to_string(e) + ".down_proj.weight"));
    const bool own = e / mine == comm().rank();
    EXPECT_EQ(o.count, own ? std::int64_t(s.d_model) * s.d_ff_expert : 0) << "expert " << e;
  }
}

// Each rank's share (24, 12, 8, 6 or 3 sequences at np 1, 2, 3, 4, 8) as
// micro-batches of one sequence equals it as one batch.
TEST(Fsdp, MicroBatchesOfOneEqualOneBatch) {
  ModelShape s = shape();
  std::vector<GlobalBatch> batches = {GlobalBatch(s.vocab_size, 3)};
  const int per_rank = kGlobalSequences / comm().size();
  auto one = sharded_weights(s, checked(), adamw(), 2, batches, 1);
  auto many = sharded_weights(s, checked(), adamw(), 2, batches, per_rank);
  expect_close(many, one, 1e-5, "micro-batches");
}

TEST(Fsdp, ReshardAfterForwardOnAndOffAgree) {
  ModelShape s = shape(true);
  std::vector<GlobalBatch> batches = {GlobalBatch(s.vocab_size, 4)};
  FsdpOptions keep = checked();
  keep.reshard_after_forward = false;
  // The same arithmetic in the same order (the embedding's backward has no atomics): the same bits.
  expect_close(sharded_weights(s, keep, adamw(), 3, batches), sharded_weights(s, checked(), adamw(), 3, batches), 0.0,
               "reshard_after_forward");
}

TEST(Fsdp, ClippingMatchesTheReferenceAndReportsTheNorm) {
  ModelShape s = shape();
  std::vector<GlobalBatch> batches = {GlobalBatch(s.vocab_size, 5)};
  OptimizerOptions tight = adamw();
  tight.clip_grad_norm = 1e-3f;   // far below the gradient norm: every step is clipped
  StepMetrics m;
  auto got = sharded_weights(s, checked(), tight, 2, batches, 1, &m);
  expect_close(got, reference_weights(s, tight, 2, batches), 1e-5, "clipped");
  EXPECT_GT(m.grad_norm, 1e-2f);
  EXPECT_EQ(m.step, 2);
}

TEST(Fsdp, NonFiniteGradientsSkipTheStep) {
  ModelShape s = shape();
  GlobalBatch b(s.vocab_size, 6);
  const int per_rank = kGlobalSequences / comm().size();
  Transformer model(model_opts(s, per_rank), ExecSpace());
  ShardedTrainer trainer(model, comm(), checked(), adamw());
  trainer.initialize(42, 0.02f);
  std::vector<float> before = trainer.gather_main_weights(1);
  DeviceView<float> loss("loss", 1);
  auto mask = load(model, b, comm().rank() * per_rank, per_rank);
  trainer.forward_backward(mask.data(), std::numeric_limits<float>::quiet_NaN(), loss.data());
  trainer.optimizer_step();
  StepMetrics m = trainer.metrics();
  EXPECT_TRUE(m.last_skipped);
  EXPECT_EQ(m.skipped, 1);
  EXPECT_EQ(m.step, 0);
  EXPECT_EQ(trainer.gather_main_weights(1), before);
  // The next, finite step proceeds (gradients were cleared).
  trainer.forward_backward(mask.data(), b.scale(), loss.data());
  trainer.optimizer_step();
  m = trainer.metrics();
  EXPECT_FALSE(m.last_skipped);
  EXPECT_EQ(m.step, 1);
  EXPECT_NE(trainer.gather_main_weights(1), before);
}

// The gradient buffers of backward (full-unit, then reduce-scattered into a slice): two of each,
// the second sized for the largest decoder layer, tied head or not (the vocabulary-sized
// embedding and untied head take the first; a tied head's own gradient, its final norm's, takes
// the second while the embedding's takes the first), a bf16 copy of each where reduced in bf16,
// and a receive slice of each but at one rank, where they receive in place; at one rank with
// fp32 reduction none at all (backward writes the persistent slices). Sized from the layout: the
// same workspace bytes on every device. (FiveStepsEqualTheUnshardedReference holds the tied
// head's buffers, and at np 1 the gradients written into the slices, to the unsharded
// gradients.)
TEST(Fsdp, GradientBuffersAreSizedForTheUnitsThatUseThem) {
  for (GradDtype reduce : {GradDtype::fp32, GradDtype::bf16})
    for (bool tied : {false, true}) {
      ModelShape s = shape(tied);
      s.vocab_size = 4096;   // the embedding well above a layer, as in real models
      const std::int64_t before = MemoryLedger::instance().bytes(MemoryCategory::workspace);
      Transformer model(model_opts(s, 2, Precision::bf16), ExecSpace());
      const std::int64_t model_workspace = MemoryLedger::instance().bytes(MemoryCategory::workspace) - before;
      const std::int64_t optimizer_workspace = [] {   // its device scalars (step, lr, norm, ...)
        const std::int64_t at = MemoryLedger::instance().bytes(MemoryCategory::workspace);
        Optimizer alone(adamw(), ExecSpace());
        return MemoryLedger::instance().bytes(MemoryCategory::workspace) - at;
      }();
      FsdpOptions fo = checked();
      fo.reduce_dtype = reduce;
      ShardedTrainer trainer(model, comm(), fo, adamw());
      const ShardLayout& l = trainer.layout();
      std::int64_t layer = 0;
      for (int u = 1; u < l.unit_count() - 1; ++u) layer = std::max(layer, l.unit(u).padded);
      ASSERT_GT(l.max_padded(), 2 * layer) << "the test needs a vocabulary larger than a layer";
      const int ranks = comm().size();
      const bool bf16_reduce = reduce == GradDtype::bf16;
      const std::int64_t both = l.max_padded() + layer;
      // The full-unit buffers, and their bf16 copies; none at one rank with fp32 reduction.
      const std::int64_t full = ranks == 1 && !bf16_reduce ? 0 : (bf16_reduce ? 4 + 2 : 4) * both;
      // The receive buffers (a slice of each): none at one rank, where the buffers receive in place.
      const std::int64_t receive = ranks > 1 ? (bf16_reduce ? 2 : 4) * both / ranks : 0;
      // The embedding's lookup as every rank's rows (2 x kS tokens each) and their ids.
      const std::int64_t lookup = lookup_as_rows(ranks, 2 * kS, s.vocab_size) ? 4 * ranks * 2 * kS * (s.d_model + 1) : 0;
      EXPECT_EQ(MemoryLedger::instance().bytes(MemoryCategory::workspace) - before - model_workspace - optimizer_workspace,
                full + receive + lookup)
          << (tied ? "tied" : "untied") << (bf16_reduce ? ", bf16 reduction" : ", fp32 reduction");
    }
}

// Persistent bytes per rank are exactly the sharded state: per parameter 4 (fp32 main) + 2
// (bf16 own copy) + 4 (grad) + 4 + 4 (Adam) = 18 bytes, or 4 + 2 + 2 + 2 + 2 = 12 with bf16
// gradients and moments; over the slices, which cover every parameter plus padding.
TEST(Fsdp, PersistentMemoryIsTheShardedStateAndNothingElse) {
  ModelShape s = resolve_model_shape(ModelConfig{});
  for (GradDtype dt : {GradDtype::fp32, GradDtype::bf16}) {
    const std::int64_t before = MemoryLedger::instance().persistent();
    const std::int64_t weights_before = MemoryLedger::instance().bytes(MemoryCategory::weights);
    Transformer model(model_opts(s, 2, Precision::bf16), ExecSpace());
    FsdpOptions fo = checked();
    fo.main_grad_dtype = dt;
    fo.state_dtype = dt;
    ShardedTrainer trainer(model, comm(), fo, adamw());
    const ShardLayout& l = trainer.layout();
    const std::int64_t per_param = dt == GradDtype::fp32 ? 18 : 12;
    EXPECT_EQ(MemoryLedger::instance().persistent() - before, per_param * l.total_shard());
    EXPECT_EQ(MemoryLedger::instance().bytes(MemoryCategory::weights) - weights_before, 6 * l.total_shard())
        << "weights: fp32 main + bf16 own copy of the slice, no other master copy";
    // The slices cover the parameters; the padding is bounded by the alignment rules.
    std::int64_t padded = 0, numel = 0;
    for (int u = 0; u < l.unit_count(); ++u) {
      padded += l.unit(u).padded;
      numel += l.unit(u).numel;
      EXPECT_EQ(l.unit(u).padded % (comm().size() * kParamAlignElements), 0);
      EXPECT_LT(l.unit(u).padded - l.unit(u).numel, comm().size() * kParamAlignElements);
    }
    EXPECT_EQ(l.total_shard() * comm().size(), padded);
    EXPECT_GE(numel, s.parameter_count());
  }
}

// LoRA's KL reference is the frozen base, with no copy of it: after steps that moved the
// adapters, the reference log-probabilities equal a model without adapters on the same base
// weights, the policy's differ from them, and keep_reference allocates nothing.
TEST(Fsdp, LoraReferenceIsTheBaseWithoutACopy) {
  ModelShape s = shape();
  s.lora = LoraShape{4, 8.0f, 0x7f};
  ModelShape base = s;
  base.lora = LoraShape{};
  const int rows = kGlobalSequences / comm().size();
  const GlobalBatch b(s.vocab_size, 3);
  Transformer model(model_opts(s, rows), ExecSpace());
  FsdpOptions fo = checked();
  fo.keep_reference = true;
  const std::int64_t weights_before = MemoryLedger::instance().bytes(MemoryCategory::weights);
  ShardedTrainer trainer(model, comm(), fo, adamw());
  std::int64_t trainable = 0;
  for (int u = 0; u < trainer.layout().unit_count(); ++u) trainable += trainer.layout().unit(u).trainable;
  EXPECT_EQ(MemoryLedger::instance().bytes(MemoryCategory::weights) - weights_before,
            4 * trainer.layout().total_shard() + 4 * trainable)
      << "fp32: the compute slices and the adapters' main weights, no reference copy";
  trainer.initialize(42, 0.02f);
  trainer.snapshot_reference();
  DeviceView<float> loss("loss", 1);
  for (int step = 0; step < 3; ++step) {
    auto mask = load(model, b, comm().rank() * rows, rows);
    trainer.forward_backward(mask.data(), b.scale(), loss.data());
    trainer.optimizer_step();
  }
  load(model, b, comm().rank() * rows, rows);
  DeviceView<float> ref("ref", rows * kS), policy("policy", rows * kS);
  trainer.forward_logp(ref.data(), WeightSource::reference);
  trainer.forward_logp(policy.data());

  Transformer plain(model_opts(base, rows), ExecSpace());
  DenseParameters p(plain, ExecSpace());
  p.initialize(42, 0.02f);
  load(plain, b, comm().rank() * rows, rows);
  for (int u = 0; u < plain.unit_count(); ++u)
    plain.forward_unit(u, p.compute_weights(u), u == plain.head_unit() ? p.compute_weights(0) : nullptr);
  auto host = [](const float* d, int n) {
    std::vector<float> h(n);
    Kokkos::deep_copy(Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(h.data(), n),
                      Kokkos::View<const float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(d, n));
    return h;
  };
  const auto want = host(plain.logp(), rows * kS), got_ref = host(ref.data(), rows * kS),
             got_policy = host(policy.data(), rows * kS);
  double worst = 0, moved = 0;
  for (int i = 0; i < rows * kS; ++i) {
    worst = std::max(worst, double(std::fabs(got_ref[i] - want[i])));
    moved = std::max(moved, double(std::fabs(got_policy[i] - want[i])));
  }
  EXPECT_LT(worst, 1e-5) << "the reference is the base";
  EXPECT_GT(moved, 1e-3) << "the policy's adapters moved it";
}

// At one rank a reduce-scatter is the identity and the gradient buffers receive in place: the
// slices of a micro-batch's gradients reduced in bf16 are those reduced in fp32 rounded to bf16,
// element for element, for every unit (dense and LoRA, whose adapters' gradients start part way
// into a unit's buffer). Two micro-batches: the second adds to the first. No collective runs.
TEST(Fsdp, OneRankReceivesInPlace) {
  if (comm().size() != 1) GTEST_SKIP() << "one rank's reduce-scatter; the np 2-4 runs hold the others to the reference";
  for (bool lora : {false, true}) {
    ModelShape s = shape();   // untied: each unit reduced once a micro-batch (a tied embedding twice)
    if (lora) s.lora = LoraShape{4, 8.0f, 0x7f};
    const GlobalBatch b(s.vocab_size, 5);
    std::vector<std::vector<float>> slices[2];
    for (GradDtype reduce : {GradDtype::fp32, GradDtype::bf16}) {
      Transformer model(model_opts(s, kGlobalSequences, Precision::bf16), ExecSpace());
      FsdpOptions fo = checked();
      fo.reduce_dtype = reduce;
      ShardedTrainer trainer(model, comm(), fo, adamw());
      trainer.initialize(42, 0.02f);
      DeviceView<float> loss("loss", 1);
      auto mask = load(model, b, 0, kGlobalSequences);
      trainer.forward_backward(mask.data(), b.scale(), loss.data());
      if (reduce == GradDtype::bf16) {
        // Against two fp32 reductions' sum, each rounded: the same micro-batch twice here.
        trainer.forward_backward(mask.data(), b.scale(), loss.data());
      }
      for (int u = 0; u < model.unit_count(); ++u)
        slices[reduce == GradDtype::bf16].push_back(trainer.read_gradient_slice(u));
      EXPECT_EQ(trainer.profile().reduce_scatters, 0) << "the profile counts the collectives that ran: none";
    }
    const char* what = lora ? "LoRA" : "dense";
    double largest = 0;
    for (std::size_t u = 0; u < slices[0].size(); ++u) {
      ASSERT_EQ(slices[0][u].size(), slices[1][u].size()) << what << " unit " << u;
      for (std::size_t i = 0; i < slices[0][u].size(); ++i) {
        const float once = static_cast<float>(bf16(slices[0][u][i]));
        ASSERT_EQ(slices[1][u][i], once + once) << what << " unit " << u << " element " << i;
        largest = std::max(largest, double(std::fabs(once)));
      }
    }
    EXPECT_GT(largest, 0.0) << what << ": some gradient";
  }
}

// LoRA in bf16 with bf16 gradient reduction: after steps, every element a gather delivers is
// the bf16 rounding of the weights (the base's only copy, the adapters' fp32 main weights), so the
// optimizer wrote each adapter's compute copy at its place; and the adapters moved.
TEST(Fsdp, LoraBf16GathersTheRoundedAdapterWeights) {
  ModelShape s = shape();
  s.lora = LoraShape{4, 8.0f, 0x7f};
  const int rows = kGlobalSequences / comm().size();
  const GlobalBatch b(s.vocab_size, 5);
  Transformer model(model_opts(s, rows, Precision::bf16), ExecSpace());
  FsdpOptions fo = checked();
  fo.reduce_dtype = GradDtype::bf16;
  ShardedTrainer trainer(model, comm(), fo, adamw());
  trainer.initialize(42, 0.02f);
  std::vector<std::vector<float>> before;
  for (int u = 0; u < model.unit_count(); ++u) before.push_back(trainer.gather_main_weights(u));
  DeviceView<float> loss("loss", 1);
  for (int step = 0; step < 3; ++step) {
    auto mask = load(model, b, comm().rank() * rows, rows);
    trainer.forward_backward(mask.data(), b.scale(), loss.data());
    trainer.optimizer_step();
  }
  std::vector<Kokkos::View<bf16*, MemSpace>> gathered;
  std::vector<void*> out;
  for (int u = 0; u < model.unit_count(); ++u) {
    gathered.emplace_back("gathered", trainer.layout().unit(u).padded);
    out.push_back(gathered.back().data());
  }
  trainer.gather_all_units(out);
  double moved = 0;
  for (int u = 0; u < model.unit_count(); ++u) {
    const std::vector<float> main = trainer.gather_main_weights(u);
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), gathered[u]);
    for (std::size_t i = 0; i < main.size(); ++i) {
      ASSERT_EQ(h(i).bits, bf16(main[i]).bits) << model.units()[u].name << " element " << i;
      moved = std::max(moved, double(std::fabs(main[i] - before[u][i])));
    }
  }
  EXPECT_GT(moved, 1e-3);
}

// LoRA: the frozen base is its bf16 slices only (2 bytes per element of every slice); the fp32
// main weights, gradients and moments (16 bytes) cover the adapters' slices alone.
TEST(Fsdp, LoraPersistentMemoryIsTheBaseInBf16AndTheAdaptersState) {
  ModelShape s = resolve_model_shape(ModelConfig{});
  s.lora = LoraShape{8, 16.0f, 0x7f};
  const std::int64_t before = MemoryLedger::instance().persistent();
  const std::int64_t weights_before = MemoryLedger::instance().bytes(MemoryCategory::weights);
  Transformer model(model_opts(s, 2, Precision::bf16), ExecSpace());
  ShardedTrainer trainer(model, comm(), checked(), adamw());
  const ShardLayout& l = trainer.layout();
  std::int64_t trainable = 0;
  for (int u = 0; u < l.unit_count(); ++u) trainable += l.unit(u).trainable;
  EXPECT_EQ(MemoryLedger::instance().persistent() - before, 2 * l.total_shard() + 16 * trainable);
  EXPECT_EQ(MemoryLedger::instance().bytes(MemoryCategory::weights) - weights_before,
            2 * l.total_shard() + 4 * trainable)
      << "weights: the bf16 slices (base and adapters) and the adapters' fp32 main weights";
  // Against full fine-tuning of the base (18 bytes per element of its slices).
  ModelShape base = s;
  base.lora = LoraShape{};
  const ShardLayout full(model_units(base), comm().size(), comm().rank());
  EXPECT_LT(2 * l.total_shard() + 16 * trainable, 18 * full.total_shard());
}

// A schedule that computes on a unit after releasing it stops with an error (the slot's
// generation moved on; its contents are NaN).
TEST(Fsdp, UseAfterReleaseIsCaught) {
  if (comm().size() != 1) GTEST_SKIP() << "death tests fork; run at np 1";
  ModelShape s = shape();
  GlobalBatch b(s.vocab_size, 7);
  Transformer model(model_opts(s, kGlobalSequences), ExecSpace());
  ShardedTrainer trainer(model, comm(), checked(), adamw());
  trainer.initialize(42, 0.02f);
  DeviceView<float> loss("loss", 1);
  auto mask = load(model, b, 0, kGlobalSequences);
  trainer.forward_backward(mask.data(), b.scale(), loss.data());
  EXPECT_DEATH(
      {
        set_job_abort(nullptr);   // the forked child must not take the MPI job down
        trainer.forward_with_stale_handle_for_test(2);
      },
      "forward of unit 2 uses weights that were released");
}

}  // namespace
}  // namespace shardrl
