// The memory plan (job/memory_plan.hpp) against the memory ledger of real jobs: a lower bound
// (a job it refuses could not have run) that sees most of what the jobs allocate, for dense and
// MoE shapes, both precisions, activation recompute, expert parallelism (training and rollout),
// tensor-parallel rollout, at np 1, 2 and 4; and the refusal's message, which names the numbers and the keys behind the
// largest parts.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "core/captured_graph.hpp"
#include "core/memory_ledger.hpp"
#include "core/kokkos.hpp"
#include "core/memory_capacity.hpp"
#include "job/memory_plan.hpp"
#include "job/options.hpp"
#include "rl_test_job.hpp"
#include "rollout/generator.hpp"
#include "rollout/weight_set.hpp"

namespace shardrl {
namespace {

struct Case {
  const char* name;
  Config config;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({"fp32 dense", small_config()});
  Config bf16 = small_config();
  bf16.model.precision = Precision::bf16;
  bf16.fsdp.main_grad_dtype = GradDtype::bf16;
  bf16.optim.state_dtype = GradDtype::bf16;
  bf16.rl.kl_coef = 0;
  out.push_back({"bf16 dense, bf16 state, no reference", bf16});
  Config recompute = small_config();
  recompute.train.activation_recompute = true;
  recompute.train.micro_batch_size = 8;
  out.push_back({"activation recompute", recompute});
  Config wide = small_config();   // the rollout phase the larger one
  wide.rl.prompts_per_iteration = 16;
  wide.rl.samples_per_prompt = 8;
  out.push_back({"rollout-bound", wide});
  Config deep = small_config();   // the train phase the larger one
  deep.train.micro_batch_size = 32;
  deep.train.seq_len = 64;
  deep.rl.prompts_per_iteration = 2;
  deep.rl.samples_per_prompt = 2;
  deep.rl.minibatches = 1;
  out.push_back({"train-bound", deep});
  Config kept = deep;   // every unit gathered from forward to backward: a slot per unit
  kept.fsdp.reshard_after_forward = false;
  out.push_back({"train-bound, reshard_after_forward = false", kept});
  Config unfused = deep;   // the weight gradients' scratch
  unfused.train.gradient_accumulation_fusion = false;
  out.push_back({"train-bound, gradient_accumulation_fusion = false", unfused});
  out.push_back({"MoE", small_moe_config()});
  Config ep = small_moe_config();
  ep.fsdp.expert_parallel = true;
  out.push_back({"MoE, expert parallel", ep});
  ep.rollout.expert_parallel = true;
  out.push_back({"MoE, expert-parallel rollout", ep});
  Config moe_wide = small_moe_config();   // the rollout phase the larger one, its MoE buffers in it
  moe_wide.rl.prompts_per_iteration = 64;
  moe_wide.rl.samples_per_prompt = 8;
  out.push_back({"MoE, rollout-bound", moe_wide});
  moe_wide.fsdp.expert_parallel = moe_wide.rollout.expert_parallel = true;
  out.push_back({"MoE, rollout-bound, expert-parallel rollout", moe_wide});
  moe_wide.rollout.prefill_tokens = 4 * (moe_wide.train.seq_len + 1);
  out.push_back({"MoE, rollout-bound, expert-parallel rollout, 4 rows per prefill call", moe_wide});
  wide.rollout.prefill_tokens = 3 * (wide.train.seq_len + 1) + 5;
  out.push_back({"rollout-bound, 3 rows per prefill call", wide});
  return out;
}

TEST(MemoryPlan, IsALowerBoundOfTheLedgerThatSeesMostOfIt) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<Case> all = cases();
  if (size % 2 == 0) {   // tensor-parallel rollout: 1/2 of each layer, the group's rows
    Config tp = small_config();
    tp.rollout.tensor_parallel = 2;
    all.push_back({"tensor-parallel rollout", tp});
  }
  for (const Case& c : all) {
    const MemoryPlan plan = plan_memory(c.config, size, /*rl_loop=*/true);
    const std::int64_t before = MemoryLedger::instance().total();
    Job job(c.config, MPI_COMM_WORLD);
    job.warm_up();
    for (int it = 0; it < 2; ++it) job.loop.train(job.loop.rollout(it));
    const double counted = double(MemoryLedger::instance().total() - before);
    std::string parts = " the ledger:";
    for (int k = 0; k < kMemoryCategories; ++k)
      parts += fmt::format(" {} {}", category_name(MemoryCategory(k)), MemoryLedger::instance().bytes(MemoryCategory(k)));
    parts += "; the plan:";
    for (const auto& t : plan.device) parts += fmt::format("\n  {} {}", t.bytes, t.what);
    EXPECT_LE(plan.device_bytes(), counted) << c.name << ": the plan counts more than the job allocates;" << parts;
    EXPECT_GE(plan.device_bytes(), 0.6 * counted) << c.name << ": the plan misses much of what the job allocates;"
                                                  << parts;
    EXPECT_GT(plan.host_bytes(), 0) << c.name;
  }
}

// `evaluate` and `generate` sample a policy and never train it (PolicyUse::sampled_only): it keeps
// no gradients, no Adam moments and no reference slices, its plan drops them too and stays a lower
// bound of what it allocates, and it still gathers the weights the trained build gathers.
TEST(MemoryPlan, ASampledOnlyPolicyKeepsNoGradientsOrMoments) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (const bool lora : {false, true}) {
    Config c = small_config();
    c.model.precision = Precision::bf16;
    c.rl.kl_coef = 0.1;   // the reference slices: the KL term's, kept only to train
    if (lora) c.lora.rank = 4;
    const std::string name = lora ? "LoRA" : "dense";
    MemoryLedger& ledger = MemoryLedger::instance();
    double total[2], state[2], weights[2];
    std::vector<std::vector<float>> gathered[2];
    for (const bool sampled : {false, true}) {
      const std::int64_t before = ledger.total(), grads_before = ledger.bytes(MemoryCategory::grads),
                         optimizer_before = ledger.bytes(MemoryCategory::optimizer),
                         weights_before = ledger.bytes(MemoryCategory::weights);
      auto comm = make_communicator(backend(), MPI_COMM_WORLD, 120.0);
      Policy policy(c, *comm, PolicyUse{true, false, {}, sampled});
      total[sampled] = double(ledger.total() - before);
      state[sampled] = double(ledger.bytes(MemoryCategory::grads) - grads_before +
                              ledger.bytes(MemoryCategory::optimizer) - optimizer_before);
      weights[sampled] = double(ledger.bytes(MemoryCategory::weights) - weights_before);
      for (int u = 0; u < policy.model().unit_count(); ++u)
        gathered[sampled].push_back(policy.trainer().gather_main_weights(u));
      // The plan of what was built (a sampled-only policy's training buffers hold one sequence).
      const MemoryPlan plan =
          plan_memory(policy.config(), size, /*rl_loop=*/true, device_memory_is_separate(), {}, !sampled);
      std::string parts = fmt::format("{}{}: the ledger:", name, sampled ? ", sampled only" : ", trained");
      for (int k = 0; k < kMemoryCategories; ++k)
        parts += fmt::format(" {} {}", category_name(MemoryCategory(k)), ledger.bytes(MemoryCategory(k)));
      parts += "; the plan:";
      for (const auto& t : plan.device) parts += fmt::format("\n  {} {}", t.bytes, t.what);
      EXPECT_LE(plan.device_bytes(), total[sampled]) << parts;
      EXPECT_GE(plan.device_bytes(), 0.6 * total[sampled]) << parts;
    }
    EXPECT_GT(state[false], 0) << name;
    EXPECT_EQ(state[true], 0) << name << ": gradients or Adam moments in a policy that is only sampled";
    if (!lora) {
      EXPECT_LT(weights[true], weights[false]) << name << ": the reference slices kept";
    }
    EXPECT_LE(total[true] + state[false], total[false]) << name;
    EXPECT_EQ(gathered[true], gathered[false]) << name << ": the same seed's weights";
  }
}

// A policy that is only sampled captures no train step: with train.cuda_graph = "full" (GPU
// builds) the trained policy's loop has its step graphs, the sampled-only one's none.
TEST(MemoryPlan, ASampledOnlyPolicyCapturesNoTrainStep) {
  if (!CapturedGraph::native()) GTEST_SKIP() << "train.cuda_graph = \"full\" needs a GPU build";
  Config c = small_config();
  c.model.precision = Precision::bf16;
  c.train.cuda_graph = TrainGraph::full;
  auto comm = make_communicator(backend(), MPI_COMM_WORLD, 120.0);
  for (const bool sampled : {false, true}) {
    Policy policy(c, *comm, PolicyUse{true, false, {}, sampled});
    EXPECT_EQ(policy.loop().step_graphs() != nullptr, !sampled) << (sampled ? "sampled only" : "trained");
    EXPECT_EQ(policy.config().train.cuda_graph, sampled ? TrainGraph::none : TrainGraph::full);
  }
}

// What storing every layer adds to the train phase (activation recompute off against on): the
// plan's terms and the arena's grow alike. With MoE layers each keeps its router's buffers and
// its routed rows (the plan had only the shared ones, and said "fits" for a job that ran out of
// memory). The difference isolates the per-layer terms from the fixed ones.
TEST(MemoryPlan, StoredLayersGrowThePlanAsTheyGrowTheArena) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (const bool moe : {false, true}) {
    Config c = moe ? small_moe_config() : small_config();
    c.model.preset = "custom";
    c.model.n_layers = 6;
    if (moe) c.model.moe_every = 1;
    double planned[2], arena[2];
    for (const bool recompute : {false, true}) {
      c.train.activation_recompute = recompute;
      planned[recompute] = bytes_of(plan_memory(c, size, /*rl_loop=*/true).train);
      Job job(c, MPI_COMM_WORLD);
      arena[recompute] = double(job.arena.phase_bytes(Phase::train));
    }
    const double grown = arena[0] - arena[1], planned_growth = planned[0] - planned[1];
    EXPECT_GT(grown, 0) << (moe ? "MoE" : "dense");
    // (Within 2%: the plan's terms are formulas, not the arena's allocations one by one.)
    EXPECT_NEAR(planned_growth, grown, 0.02 * grown) << (moe ? "MoE" : "dense");
  }
}

// A fresh policy without the RL loop (generate, convert) plans only the train side.
TEST(MemoryPlan, WithoutTheLoopPlansNoRolloutOrBatches) {
  const Config c = small_config();
  const MemoryPlan with = plan_memory(c, 1, true), without = plan_memory(c, 1, false);
  EXPECT_LT(without.device_bytes(), with.device_bytes());
  EXPECT_EQ(without.host_bytes(), 0);
}

// generate's generator and weight set, outside the arena beside the train phase's buffers
// (app/generate_command.cpp): planned with the policy (they were not planned at all), a lower
// bound of what they allocate that sees most of it, and a refusal that names --n.
TEST(MemoryPlan, GeneratePlansItsGeneratorBesideThePolicy) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Config bf16 = small_config();
  bf16.model.precision = Precision::bf16;
  for (const Config& c : {small_config(), bf16})
    for (const int rows : {1, 64}) {
      const int len = 8 + static_cast<int>(c.rollout.max_new_tokens);
      const GenerateShape shape{rows, len};
      const std::int64_t before = MemoryLedger::instance().total();
      const std::int64_t kv_before = MemoryLedger::instance().bytes(MemoryCategory::kv_cache);
      double counted = 0, counted_kv = 0;
      MemoryPlan plan;
      {
        auto comm = make_communicator(backend(), MPI_COMM_WORLD, 120.0);
        PolicyUse use;   // as generate builds it
        use.generator = shape;
        use.sampled_only = true;
        Policy policy(c, *comm, use);
        // The plan of what was built (a sampled-only policy's training buffers hold one sequence).
        const Config& built = policy.config();
        plan = plan_memory(built, size, false, device_memory_is_separate(), shape, /*trains=*/false);
        EXPECT_GT(plan.device_bytes(),
                  plan_memory(built, size, false, device_memory_is_separate(), {}, false).device_bytes() +
                      bytes_of(plan.rollout) - 1);
        const EngineOptions engine = engine_options(policy.config());
        WeightSet weights(policy.trainer().layout(), policy.model().compute_type_size());
        Generator generator(policy.model().options(), rows, len, ExecSpace(), nullptr, engine);
        weights.materialize(policy.trainer(), generator.model());
        counted = double(MemoryLedger::instance().total() - before);
        counted_kv = double(MemoryLedger::instance().bytes(MemoryCategory::kv_cache) - kv_before);
      }
      // The KV cache as the generator sizes it: a single row's paged pool holds about two
      // sequences (the plan counted one).
      double planned_kv = -1;
      for (const auto& t : plan.rollout)
        if (t.what.rfind("KV cache", 0) == 0) planned_kv = t.bytes;
      EXPECT_EQ(c.rollout.engine, RolloutEngine::paged);
      EXPECT_NEAR(planned_kv, counted_kv, 0.01 * counted_kv) << rows << " rows";
      std::string parts;
      for (const auto& t : plan.device) parts += fmt::format("\n  {} {}", t.bytes, t.what);
      const std::string name = fmt::format("{} rows, {}", rows, c.model.precision == Precision::bf16 ? "bf16" : "fp32");
      EXPECT_LE(plan.device_bytes(), counted) << name << ": the plan counts more than generate allocates;" << parts;
      EXPECT_GE(plan.device_bytes(), 0.6 * counted) << name << ": the plan misses much of it;" << parts;
    }
  MemoryCapacity small;
  small.device_is_host = false;
  small.device_bytes = small.host_bytes = 1 << 20;
  const std::string problem = memory_plan_problem(
      plan_memory(small_config(), size, false, true, GenerateShape{4096, 4096}), small);
  EXPECT_NE(problem.find("4096 rows (generate --n)"), std::string::npos) << problem;
}

TEST(MemoryPlan, ScalesWithTheKeysThatSizeIt) {
  Config c = small_config();
  const double base = plan_memory(c, 1, true).device_bytes();
  c.model.preset = "custom";
  c.model.vocab_size = 2147483647;
  const double vocab = plan_memory(c, 1, true).device_bytes();
  // Embedding, head and their state alone: 2 x V x d_model x 18 bytes.
  EXPECT_GT(vocab, 2.0 * 2147483647.0 * 64 * 18);
  EXPECT_GT(vocab, 1000 * base);
  // The sharded state splits over the ranks; the plan per rank shrinks.
  EXPECT_LT(plan_memory(c, 4, true).device_bytes(), vocab);
  // A slot per unit instead of two (fsdp.reshard_after_forward = false), each of the largest
  // unit (here the embedding, V x d_model), and the unfused gradients' fp32 scratch of the
  // largest weight: both were missing from the plan.
  Config kept = c;
  kept.fsdp.reshard_after_forward = false;
  const double units = double(kept.model.n_layers) + 2, elements = 2147483647.0 * 64;
  EXPECT_GE(plan_memory(kept, 4, true).device_bytes() - plan_memory(c, 4, true).device_bytes(),
            0.999 * (units - 2) * elements * 4);
  Config unfused = c;
  unfused.train.gradient_accumulation_fusion = false;
  EXPECT_GE(plan_memory(unfused, 4, true).device_bytes() - plan_memory(c, 4, true).device_bytes(),
            0.999 * elements * 4);

  // rollout.tensor_parallel = T: the layers' rollout weights / T, the embedding and head whole,
  // plus the staging of the largest layer. A Llama-3-8B shape (7.0e9 layer parameters in 32
  // layers, 1.05e9 in the embedding and head) in bf16 on 8 ranks.
  Config big = small_config();
  big.model.preset = "custom";
  big.model.precision = Precision::bf16;
  big.model.vocab_size = 128256;
  big.model.d_model = 4096;
  big.model.n_layers = 32;
  big.model.n_heads = 32;
  big.model.n_kv_heads = 8;
  big.model.head_dim = 128;
  big.model.d_ff = 14336;
  auto rollout_weights = [&](int T) {
    big.rollout.tensor_parallel = T;
    const MemoryPlan p = plan_memory(big, 8, true);
    EXPECT_NE(p.rollout.front().what.find("rollout weights"), std::string::npos) << p.rollout.front().what;
    return p.rollout.front().bytes;
  };
  // 8030269440 parameters: what the job counts for this shape (q and k norms included).
  const double embedding = 128256.0 * 4096, layers = 8030269440.0 - 2 * embedding - 4096;
  EXPECT_DOUBLE_EQ(rollout_weights(1), 8030269440.0 * 2);
  EXPECT_DOUBLE_EQ(rollout_weights(8), (2 * embedding + 4096 + layers / 8 + layers / 32) * 2);
}

// `shardrl plan --gpu-memory` on a CPU machine plans a GPU build: cuBLAS's fixed 32 MiB GEMM
// workspace instead of the CPU's bf16 conversion buffers (tokens x vocabulary in fp32), and the
// fused kernels' row sums (and cuDNN's backward workspace) instead of S x S scores where "auto"
// takes them. Issue 24/25's RL command
// (qwen3-0.6b, 128 x 8 completions on 2 ranks) ran in a 41 GiB rollout arena on 2 x H200 prefilling
// every row at once, 30 GiB in calls of 16384 positions; planned for a GPU each must stay below
// that and see most of it, and far below the CPU build's plan of the same job.
TEST(MemoryPlan, ForAGpuBuildPlansItsOwnWorkspaceAndAttention) {
  Config c = small_config();
  c.model.preset = "qwen3-0.6b";
  c.model.precision = Precision::bf16;
  c.rl.prompts_per_iteration = 128;
  c.rl.samples_per_prompt = 8;
  c.rl.minibatches = 2;
  c.rollout.max_new_tokens = 256;
  c.train.seq_len = 512;
  c.train.micro_batch_size = 16;
  // The rollout arenas the job allocated (MiB; 2 x H200, 2026-11-28, `.gpu/run_s29a.sh`, the
  // start-up line "arena ... (train ..., rollout ...)"): prefilling every row at once, and in calls
  // of rollout.prefill_tokens' default 16384 positions.
  for (const auto& [prefill_tokens, arena] : {std::pair{0, 42027.54}, std::pair{16384, 30782.92}}) {
    c.rollout.prefill_tokens = prefill_tokens;
    const MemoryPlan p = plan_memory(c, 2, true, true);
    double rollout = 0;
    for (const MemoryTerm& t : p.rollout) rollout += t.bytes;
    EXPECT_LT(rollout, arena * (1 << 20)) << "rollout.prefill_tokens = " << prefill_tokens;
    EXPECT_GT(rollout, 0.9 * arena * (1 << 20)) << "rollout.prefill_tokens = " << prefill_tokens << ": and most of it";
  }
  c.rollout.prefill_tokens = 0;   // every row at once: the CPU's conversion workspace for all of them
  const MemoryPlan gpu = plan_memory(c, 2, true, true), cpu = plan_memory(c, 2, true, false);
  EXPECT_LT(gpu.device_bytes(), 0.5 * cpu.device_bytes());
  // The fused kernels' row sums and cuDNN's backward workspace: 16 rows of 512 positions,
  // 16 heads x 512 x (2 x 512 + 4 x 128) bytes a row, all 16 within model.cudnn_workspace_mib.
  // They share the logits' buffer with a layer's backward scratch (q, k, v, their raw
  // projections, the attention's output, the MLP's three: 8192 tokens x 18432 bf16), the larger
  // side counted: the logits' 4096 tokens x 151936 bf16 here, and with the logits of one token
  // at a time, the scratch. The GEMM workspace (32 MiB) beside them.
  const double row_sums = 16.0 * 512 * 16 * 4, cudnn = 16 * 16.0 * 512 * (2 * 512 + 4 * 128);
  const double layer_scratch = 8192.0 * 18432 * 2, gemm_workspace = 32.0 * (1 << 20);
  const auto shared_term = [](const MemoryPlan& p) {
    double bytes = -1;
    for (const MemoryTerm& t : p.train)
      if (t.what.find("attention scratch (fused kernels:") != std::string::npos) {
        EXPECT_NE(t.what.find("cuDNN's backward workspace"), std::string::npos) << t.what;
        EXPECT_EQ(bytes, -1) << "one shared term";
        bytes = t.bytes;
      }
    return bytes;
  };
  EXPECT_DOUBLE_EQ(shared_term(gpu), 4096.0 * 151936 * 2 + gemm_workspace);
  c.train.logits_chunk_tokens = 1;
  EXPECT_DOUBLE_EQ(shared_term(plan_memory(c, 2, true, true)), layer_scratch + row_sums + cudnn + gemm_workspace);
  // A budget of 5 rows' workspace runs the backward in calls of 5 rows; under one row (12 MiB),
  // in calls of one row and the most of its 8 kv heads that fit (10 MiB: 4 of them, half a row's
  // workspace); under one kv head's (1.5 MiB), cuDNN leaves the shape to the flash kernels and
  // plans nothing for it.
  for (const auto& [mib, rows] : {std::pair{5 * 12.0, 5.0}, std::pair{10.0, 0.5}, std::pair{1.0, 0.0}}) {
    c.model.cudnn_workspace_mib = static_cast<std::int64_t>(mib);
    EXPECT_DOUBLE_EQ(shared_term(plan_memory(c, 2, true, true)),
                     layer_scratch + row_sums + rows * cudnn / 16 + gemm_workspace)
        << mib << " MiB";
  }
}

TEST(MemoryPlan, RefusalNamesTheNumbersAndTheKeys) {
  Config c = small_config();
  c.train.micro_batch_size = 2147483647;
  const MemoryPlan plan = plan_memory(c, 2, true);
  MemoryCapacity cpu;
  cpu.device_is_host = true;
  cpu.host_bytes = cpu.device_bytes = 64.0 * (1 << 30);
  cpu.ranks_on_host = 2;
  const std::string problem = memory_plan_problem(plan, cpu);
  EXPECT_NE(problem.find("the job does not fit in memory"), std::string::npos) << problem;
  EXPECT_NE(problem.find("2 rank(s) share this host's 64 GiB available"), std::string::npos) << problem;
  EXPECT_NE(problem.find("train.micro_batch_size x train.seq_len = 6.872e+10 tokens"), std::string::npos) << problem;
  // On a GPU build the device and the host are measured apart.
  MemoryCapacity gpu;
  gpu.device_is_host = false;
  gpu.device_bytes = 80.0 * (1 << 30);
  gpu.host_bytes = 1e15;
  EXPECT_NE(memory_plan_problem(plan, gpu).find("this rank's GPU has 80 GiB free"), std::string::npos)
      << memory_plan_problem(plan, gpu);
  Config demos = small_config();
  demos.rl.sft_batch_size = 2147483647;
  gpu.host_bytes = 16.0 * (1 << 30);
  const std::string host = memory_plan_problem(plan_memory(demos, 2, true), gpu);
  EXPECT_NE(host.find("of host memory per rank"), std::string::npos) << host;
  EXPECT_NE(host.find("rl.sft_batch_size / ranks = 1.074e+09 demonstrations"), std::string::npos) << host;
  // What fits is not refused.
  EXPECT_EQ(memory_plan_problem(plan_memory(small_config(), 2, true), cpu), "");
}

// The check itself agrees over the ranks: every rank throws the same InputError.
TEST(MemoryPlan, CheckStopsEveryRankWithOneMessage) {
  Config c = small_config();
  c.rl.samples_per_prompt = 2147483647;
  try {
    check_memory_plan(c, true, MPI_COMM_WORLD);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("rl.samples_per_prompt"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_memory_plan(small_config(), true, MPI_COMM_WORLD));
}

}  // namespace
}  // namespace shardrl
