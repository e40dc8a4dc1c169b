// The job layer's one builder (job/policy.hpp), tested through the path every entry point takes
// (np 1 and 2):
// - the flag audit (the first upstream failure, a flag ignored on one build path): every key that
//   changes the model, the trainer or the optimizer is flipped with --set, and the built objects
//   (not the Config) must report the flipped value, while the default build must not, on a fresh
//   policy, on one resumed from a checkpoint and on one started from a Hugging Face directory;
//   keys whose effect shows only when a step runs (fused weight gradients, the MoE GEMM path) are
//   checked by the counters of a warm-up step; model.attention, whose default resolves per build,
//   is checked on the same paths against what it resolves to;
// - persistent memory after three whole RL iterations (not only after construction) is exactly
//   the sharded state's formula (the second upstream failure, a master copy allocated lazily);
// - rl.minibatches larger than any fixed buffer runs (a user value never reaches an internal check).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "config/load.hpp"
#include "config/print.hpp"
#include "core/captured_graph.hpp"
#include "core/memory_ledger.hpp"
#include "device_allocation_counter.hpp"
#include "flash_attention_shape.hpp"
#include "io/checkpoint_dir.hpp"
#include "io/safetensors.hpp"
#include "job/hf_config.hpp"
#include "job/job_checkpoint.hpp"
#include "kernels/cudnn_attention.hpp"
#include "mpi/host_exchange.hpp"
#include "rl_test_job.hpp"

namespace shardrl {
namespace {

namespace fs = std::filesystem;

// small_config with `overrides` applied through the loader, as --set does on the command line.
Config with_overrides(const Config& base, const std::vector<std::string>& overrides) {
  LoadedConfig loaded = load_config(to_toml(base), "test", overrides, this_build());
  if (!loaded.ok()) {
    std::string all;
    for (const auto& e : loaded.errors) all += e + "\n";
    ADD_FAILURE() << "config did not load:\n" << all;
  }
  return loaded.config;
}

// One key of the audit: the --set that flips it, and what the built policy shows when it took
// effect (false for the default build, true for the flipped one).
struct Flip {
  std::string set;
  std::function<bool(Job&)> took_effect;
  bool moe = false;   // needs MoE layers to show
};

std::vector<Flip> audited_keys() {
  auto model = [](Job& j) -> const ModelOptions& { return j.model.options(); };
  auto fsdp = [](Job& j) -> const FsdpOptions& { return j.trainer.options(); };
  auto optim = [](Job& j) -> const OptimizerOptions& { return j.trainer.optimizer_options(); };
  return {
      {"model.precision=\"bf16\"", [=](Job& j) { return model(j).precision == Precision::bf16 && j.model.compute_type_size() == 2; }},
      {"train.gradient_accumulation_fusion=false",
       [](Job& j) {
         j.loop.warmup_step(0);
         return j.model.wgrad_counters().unfused > 0 && j.model.wgrad_counters().fused == 0;
       }},
      {"train.activation_recompute=true", [=](Job& j) { return model(j).activation_recompute; }},
      {"train.micro_batch_size=3", [=](Job& j) { return model(j).max_batch == 3; }},
      {"train.seq_len=40", [=](Job& j) { return model(j).max_seq_len == 40; }},
      {"model.init_std=0.5",
       [](Job& j) {
         double sumsq = 0;
         std::int64_t n = 0;
         for (float w : j.trainer.read_slice(0, SliceState::main)) sumsq += double(w) * w, ++n;
         return std::sqrt(sumsq / double(n)) > 0.2;   // the default 0.02 gives far less
       }},
      {"fsdp.reshard_after_forward=false", [=](Job& j) { return !fsdp(j).reshard_after_forward; }},
      {"fsdp.reduce_dtype=\"bf16\"", [=](Job& j) { return fsdp(j).reduce_dtype == GradDtype::bf16; }},
      {"fsdp.main_grad_dtype=\"bf16\"", [=](Job& j) { return fsdp(j).main_grad_dtype == GradDtype::bf16; }},
      {"optim.state_dtype=\"bf16\"", [=](Job& j) { return fsdp(j).state_dtype == GradDtype::bf16; }},
      {"optim.decay_norms_and_embeddings=true", [=](Job& j) { return fsdp(j).decay_norms_and_embeddings; }},
      {"debug.check_released=true", [=](Job& j) { return fsdp(j).check_released; }},
      {"rl.kl_coef=0", [](Job& j) { return !j.trainer.keeps_reference(); }},
      {"optim.lr=0.0123", [=](Job& j) { return optim(j).lr == 0.0123f; }},
      {"optim.beta1=0.8", [=](Job& j) { return optim(j).beta1 == 0.8f; }},
      {"optim.beta2=0.9", [=](Job& j) { return optim(j).beta2 == 0.9f; }},
      {"optim.eps=1e-6", [=](Job& j) { return optim(j).eps == 1e-6f; }},
      {"optim.weight_decay=0.2", [=](Job& j) { return optim(j).weight_decay == 0.2f; }},
      {"optim.warmup_steps=7", [=](Job& j) { return optim(j).warmup_steps == 7; }},
      {"optim.min_lr_ratio=0.3", [=](Job& j) { return optim(j).min_lr_ratio == 0.3f; }},
      {"optim.decay_steps=37", [=](Job& j) { return optim(j).decay_steps == 37; }},
      {"optim.clip_grad_norm=0.25", [=](Job& j) { return optim(j).clip_grad_norm == 0.25f; }},
      {"model.moe_impl=\"loop\"",
       [](Job& j) {
         j.loop.warmup_step(0);
         return j.model.moe_calls().loop > 0 && j.model.moe_calls().grouped == 0;
       },
       true},
      {"model.aux_loss_coef=0.25", [=](Job& j) { return model(j).aux_loss_coef == 0.25f; }, true},
  };
}

// The paths that build a policy: fresh weights, resumed from a checkpoint, started from a Hugging
// Face directory (model.init_from; `convert --from-safetensors` takes the same path).
enum class Start { fresh, resumed, init_from };
const char* name_of(Start s) { return s == Start::fresh ? "fresh" : s == Start::resumed ? "resumed" : "init_from"; }

// A directory shared by the ranks, removed at the end.
struct SharedDir {
  fs::path path;
  explicit SharedDir(const std::string& name) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::string p;
    if (rank == 0) {
      p = (fs::temp_directory_path() / ("shardrl_job_build_" + std::to_string(getpid()) + "_" + name)).string();
      fs::remove_all(p);
      fs::create_directories(p);
    }
    broadcast_string(MPI_COMM_WORLD, p, 0);
    path = p;
  }
  ~SharedDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::error_code ec;
    if (rank == 0) fs::remove_all(path, ec);
  }
};

// Builds the job for `config` along `start`, loading what write_starting_points left in `dir`.
std::unique_ptr<Job> start_job(const Config& config, Start start, const fs::path& dir) {
  if (start == Start::fresh) return std::make_unique<Job>(config, MPI_COMM_WORLD);
  if (start == Start::resumed) {
    auto job = std::make_unique<Job>(config, MPI_COMM_WORLD);
    load_job_checkpoint(checkpoint_path(dir / "checkpoints", 0), job->policy, MPI_COMM_WORLD);
    return job;
  }
  Config imported = config;
  imported.model.init_from = (dir / "hf").string();
  auto job = std::make_unique<Job>(imported, MPI_COMM_WORLD);
  job->policy.load_init_from(MPI_COMM_WORLD, /*adapters=*/true);
  return job;
}

// What the resumed and imported starts load: the default job's weights, as a checkpoint and as
// a Hugging Face directory.
void write_starting_points(const Config& base, const fs::path& dir) {
  Job job(base, MPI_COMM_WORLD);
  save_job_checkpoint(dir / "checkpoints", JobPosition{}, job.policy, "[run]\n", MPI_COMM_WORLD);
  std::vector<std::vector<float>> whole;
  for (int u = 0; u < job.model.unit_count(); ++u) whole.push_back(job.trainer.gather_main_weights(u));
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    fs::create_directories(dir / "hf");
    std::vector<StWrite> tensors;
    for (int u = 0; u < job.model.unit_count(); ++u)
      for (const ParamSpec& p : job.model.units()[u].params)
        tensors.push_back({p.name, p.shape, StDtype::f32, whole[u].data() + p.offset});
    write_safetensors(dir / "hf" / "model.safetensors", tensors, {});
    std::ofstream(dir / "hf" / "config.json") << hf_config_json(job.model.options().shape, "float32");
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

void audit(const Config& base, bool moe) {
  SharedDir dir(moe ? "moe" : "dense");
  write_starting_points(base, dir.path);
  for (const Flip& f : audited_keys()) {
    if (f.moe != moe) continue;
    const Config flipped = with_overrides(base, {f.set});
    for (Start start : {Start::fresh, Start::resumed, Start::init_from}) {
      if (f.set.rfind("model.init_std", 0) == 0 && start != Start::fresh) continue;   // loaded weights replace it
      auto plain = start_job(base, start, dir.path);
      EXPECT_FALSE(f.took_effect(*plain)) << f.set << ": the default build already shows it (" << name_of(start)
                                          << "), so this check cannot fail";
      plain.reset();
      auto job = start_job(flipped, start, dir.path);
      EXPECT_TRUE(f.took_effect(*job)) << f.set << " did not reach the built objects on the " << name_of(start)
                                       << " path";
    }
  }
}

Config dense_base() {
  Config c = small_config();
  c.model.precision = Precision::fp32;
  c.rl.sft_batch_size = 8;
  c.optim.schedule = LrSchedule::cosine;   // which reads decay_steps and min_lr_ratio
  c.optim.decay_steps = 100;
  return c;
}

TEST(JobBuild, EveryModelTrainerAndOptimizerKeyReachesTheBuiltObjects) { audit(dense_base(), false); }

TEST(JobBuild, MixtureOfExpertsKeysReachTheBuiltObjects) {
  Config c = small_moe_config();
  c.model.shared_expert = false;   // a shape a Hugging Face directory (Qwen3-MoE) can hold
  c.rl.sft_batch_size = 8;
  audit(c, true);
}

// model.attention: "auto" resolves per build, so the key cannot join the audit's pairs of a
// default build that must not show the flip and a flipped one that must. Here every path builds
// what the key resolves to, reported by the model and the build report: on GPU builds a bf16
// model of head_dim 64 takes the flash kernels by default and "gemm" turns them off; on CPU
// builds everything, the default included, is the batched GEMMs. A warm-up step on each path
// runs the chosen kernels, and its loss must be the gemm build's (bf16 tolerance where flash ran).
Config attention_base() {
  Config c = small_config();
  c.model.precision = Precision::bf16;
  use_flash_attention_shape(c);
  c.model.d_model = 128;
  c.rl.sft_batch_size = 8;
  return c;
}

// The attention the job built, as its report shows it.
AttentionImpl built_attention(Job& j) {
  const AttentionImpl impl = j.model.options().attention;
  const std::string report = j.policy.build_report();
  EXPECT_NE(report.find(impl == AttentionImpl::flash   ? "attention                flash (tensor cores, no S x S scores)"
                        : impl == AttentionImpl::cudnn ? "attention                cudnn (fused, right-padded rows; flash "
                                                         "otherwise)"
                                                       : "attention                batched GEMMs (scores materialised "
                                                         "per block)"),
            std::string::npos)
      << report;
  return impl;
}

TEST(JobBuild, AttentionKeyReachesTheBuiltModel) {
  const Config base = attention_base();
  SharedDir dir("attention");
  write_starting_points(base, dir.path);
  struct Case {
    std::string set;
    AttentionImpl impl;   // what it must build on this build
  };
  // "auto" takes cuDNN where the build has it, else the flash kernels, on a GPU.
  const AttentionImpl fused = kernels::cudnn_attention_available() ? AttentionImpl::cudnn : AttentionImpl::flash;
  const AttentionImpl automatic = kDeviceIsGpu ? fused : AttentionImpl::gemm;
  std::vector<Case> cases{{"model.attention=\"gemm\"", AttentionImpl::gemm}, {"model.attention=\"auto\"", automatic}};
  if (kDeviceIsGpu) cases.push_back({"model.attention=\"flash\"", AttentionImpl::flash});
  if (kernels::cudnn_attention_available()) cases.push_back({"model.attention=\"cudnn\"", AttentionImpl::cudnn});
  for (Start start : {Start::fresh, Start::resumed, Start::init_from}) {
    double gemm_loss = 0;
    for (const Case& c : cases) {
      auto job = start_job(with_overrides(base, {c.set}), start, dir.path);
      EXPECT_EQ(built_attention(*job), c.impl) << c.set << " on the " << name_of(start) << " path";
      const double loss = job->loop.warmup_step(0).loss;
      ASSERT_TRUE(std::isfinite(loss)) << c.set << " on the " << name_of(start) << " path";
      // The warm-up's batches are set without positions: where cuDNN was built, it ran them.
      EXPECT_EQ(job->model.cudnn_attention_calls() > 0, c.impl == AttentionImpl::cudnn)
          << c.set << " on the " << name_of(start) << " path";
      if (&c == &cases.front()) gemm_loss = loss;   // the reference: "gemm"
      EXPECT_NEAR(loss, gemm_loss, c.impl != AttentionImpl::gemm ? 2e-2 * std::abs(gemm_loss) : 0.0)
          << c.set << " on the " << name_of(start) << " path";
    }
  }
  // The default config: the fused kernels only where they run.
  EXPECT_EQ(built_attention(*start_job(base, Start::fresh, dir.path)), automatic);
  // fp32, or a head_dim the kernels do not take, keeps "auto" on the GEMMs on every build.
  EXPECT_EQ(built_attention(*start_job(with_overrides(base, {"model.precision=\"fp32\""}), Start::fresh, dir.path)),
            AttentionImpl::gemm);
  EXPECT_EQ(built_attention(*start_job(with_overrides(base, {"model.head_dim=32"}), Start::fresh, dir.path)),
            AttentionImpl::gemm);
}

// The report the binary prints at start (and `--print-build`) reads the built objects.
TEST(JobBuild, BuildReportShowsThePathsTaken) {
  const Config plain = dense_base();
  const Config flipped = with_overrides(plain, {"train.gradient_accumulation_fusion=false",
                                                "fsdp.main_grad_dtype=\"bf16\"", "optim.state_dtype=\"bf16\""});
  const std::string a = Job(plain, MPI_COMM_WORLD).policy.build_report();
  const std::string b = Job(flipped, MPI_COMM_WORLD).policy.build_report();
  EXPECT_NE(a.find("weight gradients         fused"), std::string::npos) << a;
  EXPECT_NE(b.find("weight gradients         unfused"), std::string::npos) << b;
  EXPECT_NE(a.find("main gradient dtype      fp32"), std::string::npos) << a;
  EXPECT_NE(b.find("main gradient dtype      bf16"), std::string::npos) << b;
  EXPECT_NE(b.find("Adam moment dtype        bf16"), std::string::npos) << b;
}

// Per rank, after the warm-up and three RL iterations: fp32 main weights + the bf16 copy of the
// own slice (bf16 mode) + gradients + two Adam moments (+ the frozen reference with KL), each
// over the rank's slices, and nothing else.
TEST(JobBuild, PersistentMemoryAfterThreeIterationsIsTheShardedState) {
  for (GradDtype dt : {GradDtype::fp32, GradDtype::bf16}) {
    Config c = small_config();
    c.model.precision = Precision::bf16;
    c.fsdp.main_grad_dtype = dt;
    c.optim.state_dtype = dt;
    c.rl.sft_steps = 2;
    c.rl.kl_coef = 0.1;
    const std::int64_t before = MemoryLedger::instance().persistent();
    {
      Job job(c, MPI_COMM_WORLD);
      job.warm_up();
      for (int it = 0; it < 3; ++it) job.loop.train(job.loop.rollout(it));
      const std::int64_t shard = job.trainer.layout().total_shard();
      const std::int64_t grad = dt == GradDtype::fp32 ? 4 : 2;
      const std::int64_t per_param = 4 + 2 + grad + 2 * grad + 2;   // main, own bf16 copy, grad, m and v, reference
      EXPECT_EQ(MemoryLedger::instance().persistent() - before, per_param * shard)
          << (dt == GradDtype::fp32 ? "fp32" : "bf16") << " gradients and moments";
      EXPECT_EQ(MemoryLedger::instance().bytes(MemoryCategory::weights), (4 + 2 + 2) * shard)
          << "weights: fp32 main + bf16 own slice + bf16 reference slice, no other copy";
    }
    EXPECT_EQ(MemoryLedger::instance().persistent(), before) << "the job's state is released with it";
  }
}

// Every device allocation of a job goes through the memory ledger: over start-up, the warm-up and
// three RL iterations the device bytes alive (seen by Kokkos' allocation hooks, plus what the
// communicator holds outside Kokkos: a few bytes, and at more than one GPU the arena's symmetric
// memory) equal the ledger's total, and nothing is allocated
// after the first iteration.
TEST(JobBuild, EveryDeviceAllocationIsInTheLedger) {
  for (bool graphs : {false, true}) {
    Config c = small_config();
    c.model.precision = Precision::bf16;
    c.rl.sft_steps = 2;
    c.rl.kl_coef = 0.1;
    if (graphs && CapturedGraph::native()) c.train.cuda_graph = TrainGraph::full;
    const std::int64_t ledger_before = MemoryLedger::instance().total();
    test::DeviceAllocationCounter allocations;
    Job job(c, MPI_COMM_WORLD);
    job.warm_up();
    for (int it = 0; it < 3; ++it) {
      job.loop.train(job.loop.rollout(it));
      if (it == 0) allocations.reset();
    }
    EXPECT_EQ(allocations.count(), 0u) << "allocated after the first iteration: " << allocations.describe();
    EXPECT_EQ(allocations.live_bytes() + job.comm->device_bytes_outside_kokkos(),
              MemoryLedger::instance().total() - ledger_before)
        << "device allocations alive: " << allocations.describe_live();
  }
}

// The rollout's per-minibatch sums travel in one reduction: more minibatches than any fixed
// buffer would hold still run, and count every minibatch's tokens.
TEST(JobBuild, ManyMinibatchesRun) {
  Config c = small_config();
  c.rl.prompts_per_iteration = 70;
  c.rl.samples_per_prompt = 2;
  c.rl.minibatches = 70;
  c.rl.sft_steps = 0;
  c.train.micro_batch_size = 2;
  Job job(c, MPI_COMM_WORLD);
  RolloutBatch b = job.loop.rollout(0);
  ASSERT_EQ(b.minibatch_tokens.size(), 70u);
  double sum = 0;
  for (double t : b.minibatch_tokens) {
    EXPECT_GT(t, 0.0);
    sum += t;
  }
  EXPECT_EQ(sum, b.tokens);
  const TrainStats t = job.loop.train(b);
  EXPECT_TRUE(std::isfinite(t.loss));
  EXPECT_EQ(job.trainer.metrics().step, 70);
}

}  // namespace
}  // namespace shardrl
