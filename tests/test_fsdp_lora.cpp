// LoRA sharded: adapters equal to the unsharded reference (dense and mixture-of-experts), the
// frozen base unchanged to the bit and the KL reference without a copy, bf16 gathers, memory.
#include <gtest/gtest.h>

#include <string>

#include "fsdp_test_support.hpp"

namespace shardrl {
namespace {

using namespace fsdp_test;

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
  ModelShape s = moe_shape(4);
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

}  // namespace
}  // namespace shardrl
