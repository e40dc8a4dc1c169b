// The config loader in-process: defaults, precedence of --set over the file, where each value
// came from, quoting (the resolved TOML and table: test_config_print.cpp).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sstream>

#include <fstream>

#include <filesystem>

#include <algorithm>

#include "config/load.hpp"
#include "config/model_presets.hpp"
#include "config/print.hpp"
#include "config/schema.hpp"
#include "config_test_builds.hpp"

namespace shardrl {
namespace {

const BuildInfo kGpuCudnn{true, true};

TEST(ConfigLoad, EmptyFileGivesDefaults) {
  LoadedConfig l = load_config("", "empty.toml", {}, kCpu);
  ASSERT_TRUE(l.ok());
  Config d;
  EXPECT_EQ(l.config.run.name, d.run.name);
  EXPECT_EQ(l.config.run.seed, d.run.seed);
  EXPECT_EQ(l.config.model.precision, Precision::bf16);
  EXPECT_TRUE(l.config.train.gradient_accumulation_fusion);
  EXPECT_EQ(l.origin.at("run.seed"), "default");
}

TEST(ConfigLoad, FileValuesAndOrigins) {
  LoadedConfig l = load_config(
      "[run]\nname = \"r1\"\nseed = 9\n[model]\nprecision = \"fp32\"\n[train]\n"
      "gradient_accumulation_fusion = false\n[comm]\ntimeout_s = 2\n",
      "f.toml", {}, kCpu);
  ASSERT_TRUE(l.ok()) << l.errors.front();
  EXPECT_EQ(l.config.run.name, "r1");
  EXPECT_EQ(l.config.run.seed, 9);
  EXPECT_EQ(l.config.model.precision, Precision::fp32);
  EXPECT_FALSE(l.config.train.gradient_accumulation_fusion);
  EXPECT_DOUBLE_EQ(l.config.comm.timeout_s, 2.0);   // an integer is a valid float
  EXPECT_EQ(l.origin.at("run.seed"), "f.toml:3:8");
}

TEST(ConfigLoad, OverridesWinInOrder) {
  LoadedConfig l = load_config("[run]\nseed = 9\n", "f.toml",
                               {"run.seed=10", "run.seed=11", "run.name=\"quoted name\"",
                                "train.gradient_accumulation_fusion=false", "model.preset=llama-1b"},
                               kCpu);
  ASSERT_FALSE(l.ok());   // "quoted name" contains a space: not a plain name
  ASSERT_EQ(l.errors.size(), 1u);
  EXPECT_EQ(l.errors[0],
            "--set run.name=\"quoted name\": run.name: must contain only letters, digits, '-', '_' "
            "and '.', got \"quoted name\"");
  l = load_config("[run]\nseed = 9\n", "f.toml",
                  {"run.seed=10", "run.seed=11", "run.name='x.y'", "model.preset=llama-1b"}, kCpu);
  ASSERT_TRUE(l.ok()) << l.errors.front();
  EXPECT_EQ(l.config.run.seed, 11);
  EXPECT_EQ(l.config.run.name, "x.y");
  EXPECT_EQ(l.config.model.preset, "llama-1b");
  EXPECT_EQ(l.origin.at("run.seed"), "--set run.seed=11");
}

TEST(ConfigLoad, BackendMustBeCompiledIn) {
  EXPECT_TRUE(load_config("[comm]\nbackend = \"mpi\"\n", "f", {}, kCpu).ok());
  EXPECT_FALSE(load_config("[comm]\nbackend = \"nccl\"\n", "f", {}, kCpu).ok());
  EXPECT_TRUE(load_config("[comm]\nbackend = \"nccl\"\n", "f", {}, kGpu).ok());
  LoadedConfig l = load_config("", "f", {"comm.backend=mpi"}, kGpu);
  ASSERT_EQ(l.errors.size(), 1u);
  EXPECT_EQ(l.errors[0],
            "--set comm.backend=mpi: comm.backend = \"mpi\" moves host buffers, but this CUDA build keeps tensors on "
            "the GPU (use \"auto\" or \"nccl\")");
  // A saved config is read as any build's (BuildInfo::any): a CPU run's comm.backend = "mpi" and a
  // GPU run's NCCL both load (the CPU run's was refused as a CUDA build's, and a resume then
  // skipped its check of config changes).
  BuildInfo any = kGpu;
  any.any = true;
  EXPECT_TRUE(load_config("[comm]\nbackend = \"mpi\"\n", "saved", {}, any).ok());
  EXPECT_TRUE(load_config("[comm]\nbackend = \"nccl\"\n", "saved", {}, any).ok());
}

// Reals are used in single precision: values that would become 0 or inf there are refused,
// naming the key (optim.eps = 1e-50 passed "> 0" and became a zero epsilon).
TEST(ConfigLoad, RealsMustFitSinglePrecision) {
  for (const char* set : {"optim.eps=1e-50", "optim.lr=1e39", "model.norm_eps=1e-45"}) {
    LoadedConfig l = load_config("", "f", {set, "model.preset=\"custom\""}, kCpu);
    ASSERT_FALSE(l.ok()) << set;
    EXPECT_NE(l.errors[0].find("must lie within single precision's range"), std::string::npos) << l.errors[0];
    EXPECT_NE(l.errors[0].find(std::string("--set ") + set), std::string::npos) << l.errors[0];
  }
  EXPECT_TRUE(load_config("", "f", {"optim.eps=1e-30", "optim.weight_decay=0.0"}, kCpu).ok());
  // A --set real is a decimal number, as in the file: strtod's hex and leading blanks are not.
  for (const char* set : {"optim.lr=0x10", "optim.lr= 1e-3"}) {
    LoadedConfig l = load_config("", "f", {set}, kCpu);
    ASSERT_EQ(l.errors.size(), 1u) << set;
    EXPECT_EQ(l.errors[0], fmt::format("--set {}: optim.lr: expected a number, got '{}'", set, set + 9));
  }
}

TEST(ConfigLoad, CudaGraphsNeedACudaBuild) {
  EXPECT_TRUE(load_config("[train]\ncuda_graph = \"full\"\n[rollout]\ncuda_graph = \"decode\"\n", "f", {}, kGpu).ok());
  LoadedConfig l = load_config("[train]\ncuda_graph = \"full\"\n", "job.toml", {"rollout.cuda_graph=decode"}, kCpu);
  ASSERT_EQ(l.errors.size(), 2u);
  EXPECT_EQ(l.errors[0],
            "job.toml:2:14: train.cuda_graph = \"full\" captures CUDA graphs, but this shardrl was built for CPU (use "
            "\"none\")");
  EXPECT_EQ(l.errors[1],
            "--set rollout.cuda_graph=decode: rollout.cuda_graph = \"decode\" captures CUDA graphs, but this shardrl "
            "was built for CPU (use \"none\")");
  EXPECT_FALSE(load_config("[train]\ncuda_graph = \"partial\"\n", "f", {}, kGpu).ok());
}

// Copy-engine all-gathers are a GPU build's; "auto" and "sm" load on every build.
TEST(ConfigLoad, CopyEngineGathersNeedACudaBuild) {
  for (const char* engine : {"auto", "sm", "copy"})
    EXPECT_TRUE(load_config(std::string("[comm]\ngather_engine = \"") + engine + "\"\n", "f", {}, kGpu).ok()) << engine;
  EXPECT_TRUE(load_config("[comm]\ngather_engine = \"sm\"\n", "f", {}, kCpu).ok());
  EXPECT_TRUE(load_config("", "f", {}, kCpu).ok());
  LoadedConfig l = load_config("", "f", {"comm.gather_engine=copy"}, kCpu);
  ASSERT_EQ(l.errors.size(), 1u);
  EXPECT_EQ(l.errors[0],
            "--set comm.gather_engine=copy: comm.gather_engine = \"copy\" runs the all-gathers on the GPUs' copy "
            "engines, but this shardrl was built for CPU (use \"auto\" or \"sm\")");
  EXPECT_FALSE(load_config("[comm]\ngather_engine = \"dma\"\n", "f", {}, kGpu).ok());
}

// "flash" insists on the tensor-core kernels: refused, naming the key and every unmet
// requirement, where they cannot run; "auto" and "gemm" load on every build.
TEST(ConfigLoad, FlashAttentionNeedsCudaBf16AndItsHeadDims) {
  LoadedConfig cpu = load_config("[model]\npreset = \"llama-1b\"\nattention = \"flash\"\n", "job.toml", {}, kCpu);
  ASSERT_EQ(cpu.errors.size(), 1u);
  EXPECT_EQ(cpu.errors[0],
            "job.toml:3:13: model.attention = \"flash\" runs the tensor-core kernels, which need a CUDA build, but "
            "this shardrl was built for CPU (use \"auto\" or \"gemm\")");

  LoadedConfig fp32 = load_config("[model]\npreset = \"llama-1b\"\n", "f", {"model.attention=flash",
                                                                         "model.precision=fp32"}, kGpu);
  ASSERT_EQ(fp32.errors.size(), 1u);
  EXPECT_EQ(fp32.errors[0],
            "--set model.attention=flash: model.attention = \"flash\" runs the tensor-core kernels, which need "
            "model.precision = \"bf16\", not \"fp32\" (use \"auto\" or \"gemm\")");

  const std::string head_dim_32 = "[model]\npreset = \"custom\"\nhead_dim = 32\n";
  LoadedConfig narrow = load_config(head_dim_32, "f", {"model.attention=flash"}, kGpu);
  ASSERT_EQ(narrow.errors.size(), 1u);
  EXPECT_EQ(narrow.errors[0],
            "--set model.attention=flash: model.attention = \"flash\" runs the tensor-core kernels, which need "
            "model.head_dim = 64 or 128, not 32 (use \"auto\" or \"gemm\")");

  // Every unmet requirement in the one message.
  LoadedConfig all = load_config(head_dim_32, "f", {"model.attention=flash", "model.precision=fp32"}, kCpu);
  ASSERT_EQ(all.errors.size(), 1u);
  EXPECT_NE(all.errors[0].find("a CUDA build, but this shardrl was built for CPU; and model.precision = \"bf16\", "
                               "not \"fp32\"; and model.head_dim = 64 or 128, not 32"),
            std::string::npos)
      << all.errors[0];

  LoadedConfig gpu = load_config("[model]\npreset = \"llama-1b\"\nattention = \"flash\"\n", "f", {}, kGpu);
  ASSERT_TRUE(gpu.ok()) << gpu.errors.front();
  EXPECT_EQ(gpu.config.model.attention, AttentionChoice::flash);
  EXPECT_TRUE(load_config("[model]\npreset = \"qwen3-0.6b\"\n", "f", {"model.attention=flash"}, kGpu).ok());

  EXPECT_EQ(load_config("", "f", {}, kCpu).config.model.attention, AttentionChoice::automatic);

  // "cudnn" needs cuDNN in the build, and what the flash kernels need (they take packed rows
  // and prefill).
  LoadedConfig no_cudnn = load_config("[model]\npreset = \"llama-1b\"\nattention = \"cudnn\"\n", "job.toml", {}, kGpu);
  ASSERT_EQ(no_cudnn.errors.size(), 1u);
  EXPECT_EQ(no_cudnn.errors[0],
            "job.toml:3:13: model.attention = \"cudnn\" runs cuDNN's fused attention, which needs a GPU build "
            "configured with cuDNN 9, but this one has none (CUDNN_ROOT) (use \"auto\", \"flash\" or \"gemm\")");
  LoadedConfig cudnn_cpu = load_config(head_dim_32, "f", {"model.attention=cudnn", "model.precision=fp32"}, kCpu);
  ASSERT_EQ(cudnn_cpu.errors.size(), 1u);
  EXPECT_NE(cudnn_cpu.errors[0].find("a CUDA build, but this shardrl was built for CPU; and model.precision = "
                                     "\"bf16\", not \"fp32\"; and model.head_dim = 64 or 128, not 32"),
            std::string::npos)
      << cudnn_cpu.errors[0];
  LoadedConfig cudnn = load_config("[model]\npreset = \"llama-1b\"\nattention = \"cudnn\"\n", "f", {}, kGpuCudnn);
  ASSERT_TRUE(cudnn.ok()) << cudnn.errors.front();
  EXPECT_EQ(cudnn.config.model.attention, AttentionChoice::cudnn);
  EXPECT_EQ(cudnn.config.model.cudnn_workspace_mib, 1024);
  EXPECT_FALSE(load_config("", "f", {"model.cudnn_workspace_mib=0"}, kGpuCudnn).ok());
  for (const BuildInfo& build : {kCpu, kGpu})
    for (const char* choice : {"auto", "gemm"})
      for (const std::string& toml : {std::string(), std::string("[model]\nprecision = \"fp32\"\n"), head_dim_32}) {
        LoadedConfig l = load_config(toml, "f", {std::string("model.attention=") + choice}, build);
        EXPECT_TRUE(l.ok()) << choice << " on " << (build.has_cuda ? "GPU" : "CPU") << ": " << l.errors.front();
      }
  LoadedConfig gemm = load_config("", "f", {"model.attention=gemm"}, kCpu);
  EXPECT_EQ(gemm.config.model.attention, AttentionChoice::gemm);
  EXPECT_FALSE(load_config("", "f", {"model.attention=fused"}, kGpu).ok());
}

TEST(ConfigLoad, MixtureOfExpertsKeys) {
  const std::string moe = "[model]\npreset = \"custom\"\nn_experts = 8\ntop_k = 2\nmoe_every = 2\n";
  LoadedConfig ok = load_config(moe, "moe.toml", {"model.moe_impl=loop", "model.shared_expert=true"}, kCpu);
  ASSERT_TRUE(ok.ok()) << ok.errors.front();
  const ModelShape s = resolve_model_shape(ok.config.model);
  EXPECT_EQ(s.n_experts, 8);
  EXPECT_FALSE(s.moe_layer(0));
  EXPECT_TRUE(s.moe_layer(1));
  EXPECT_EQ(ok.config.model.moe_impl, MoeImpl::loop);

  LoadedConfig too_many = load_config(moe, "moe.toml", {"model.top_k=9"}, kCpu);
  ASSERT_EQ(too_many.errors.size(), 1u);
  EXPECT_EQ(too_many.errors[0], "--set model.top_k=9: model.top_k = 9 exceeds model.n_experts = 8");

  LoadedConfig dense = load_config("[model]\naux_loss_coef = 0.1\n", "dense.toml", {}, kCpu);
  ASSERT_EQ(dense.errors.size(), 1u);
  EXPECT_EQ(dense.errors[0],
            "dense.toml:2:17: model.aux_loss_coef applies to mixture-of-experts layers, but model.n_experts = 0");

  // Expert parallelism: only with experts, and only where the ranks divide them.
  LoadedConfig ep_dense = load_config("[fsdp]\nexpert_parallel = true\n", "dense.toml", {}, kCpu);
  ASSERT_EQ(ep_dense.errors.size(), 1u);
  EXPECT_EQ(ep_dense.errors[0],
            "dense.toml:2:19: fsdp.expert_parallel applies to mixture-of-experts layers, but model.n_experts = 0");
  LoadedConfig ep = load_config(moe, "moe.toml", {"fsdp.expert_parallel=true"}, kCpu);
  ASSERT_TRUE(ep.ok()) << ep.errors.front();
  EXPECT_TRUE(check_for_job(ep, 4).empty());
  EXPECT_TRUE(check_for_job(ep, 8).empty());
  const auto three = check_for_job(ep, 3);
  ASSERT_EQ(three.size(), 1u);
  EXPECT_EQ(three[0], "--set fsdp.expert_parallel=true: fsdp.expert_parallel gives each rank n_experts / ranks "
                      "experts, but model.n_experts = 8 does not divide among 3 ranks");

  // rollout.expert_parallel decodes with the training's spread experts: it needs both.
  LoadedConfig rollout_ep = load_config(moe, "moe.toml", {"fsdp.expert_parallel=true", "rollout.expert_parallel=true"}, kCpu);
  ASSERT_TRUE(rollout_ep.ok()) << rollout_ep.errors.front();
  LoadedConfig rollout_only = load_config(moe, "moe.toml", {"rollout.expert_parallel=true"}, kCpu);
  ASSERT_EQ(rollout_only.errors.size(), 1u);
  EXPECT_EQ(rollout_only.errors[0], "--set rollout.expert_parallel=true: rollout.expert_parallel decodes with the "
                                    "experts fsdp.expert_parallel spreads over the ranks; it needs "
                                    "fsdp.expert_parallel = true");
  LoadedConfig rollout_dense = load_config("[rollout]\nexpert_parallel = true\n", "dense.toml", {}, kCpu);
  ASSERT_EQ(rollout_dense.errors.size(), 1u);
  EXPECT_EQ(rollout_dense.errors[0], "dense.toml:2:19: rollout.expert_parallel decodes with the experts "
                                     "fsdp.expert_parallel spreads over the ranks; it needs a mixture-of-experts "
                                     "model (model.n_experts > 0)");

  LoadedConfig graphs = load_config(moe, "moe.toml", {"train.cuda_graph=full"}, kGpu);
  ASSERT_EQ(graphs.errors.size(), 1u);
  EXPECT_NE(graphs.errors[0].find("cannot capture mixture-of-experts layers"), std::string::npos) << graphs.errors[0];
}

// [lora]: the job's shape carries the adapters; an unknown target, the experts, an init_from
// base, a mixture-of-experts model, and adapter settings without a rank are refused by name.
TEST(ConfigLoad, LoraKeys) {
  LoadedConfig ok = load_config("[lora]\nrank = 8\nalpha = 32\ntargets = [\"q\", \"v\", \"down\"]\ninit = \"kaiming\"\n",
                                "lora.toml", {}, kCpu);
  ASSERT_TRUE(ok.ok()) << ok.errors.front();
  const ModelShape s = job_model_shape(ok.config);
  EXPECT_EQ(s.lora.rank, 8);
  EXPECT_FLOAT_EQ(s.lora.scale(), 4.0f);
  EXPECT_TRUE(s.lora.kaiming);
  EXPECT_TRUE(s.lora.adapts(LoraTarget::q) && s.lora.adapts(LoraTarget::v) && s.lora.adapts(LoraTarget::down));
  EXPECT_FALSE(s.lora.adapts(LoraTarget::k) || s.lora.adapts(LoraTarget::gate));
  EXPECT_FALSE(job_model_shape(load_config("", "none.toml", {}, kCpu).config).lora.on());

  auto one_error = [](const std::string& toml, const std::vector<std::string>& sets) {
    LoadedConfig l = load_config(toml, "l.toml", sets, kCpu);
    return l.errors.size() == 1 ? l.errors[0] : std::to_string(l.errors.size()) + " errors";
  };
  EXPECT_NE(one_error("[lora]\nrank = 4\ntargets = [\"q\", \"qkv\"]\n", {}).find("unknown target \"qkv\""),
            std::string::npos);
  EXPECT_EQ(one_error("[lora]\nrank = 4\ntargets = [\"experts\"]\n", {}),
            "l.toml:3:11: lora.targets has \"experts\", which applies to mixture-of-experts models, but "
            "model.n_experts = 0");
  EXPECT_EQ(one_error("[lora]\nrank = 4\ntargets = []\n", {}),
            "l.toml:3:11: lora.rank = 4 needs at least one of lora.targets");
  EXPECT_TRUE(load_config("[lora]\nrank = 4\n", "l.toml", {"model.init_from=/some/dir"}, kCpu).ok())
      << "adapters over a pretrained base";
  EXPECT_EQ(one_error("[lora]\nrank = 4\ninit_from = \"peft\"\n", {}),
            "l.toml:3:13: lora.init_from = \"peft\" continues adapters trained over a pretrained base: set "
            "model.init_from to that base's directory");
  EXPECT_EQ(one_error("[lora]\ninit_from = \"peft\"\n", {}), "l.toml:2:13: lora.init_from applies to lora.rank > 0");
  // MoE: the attention carries adapters; the MLP targets only where dense layers exist.
  const std::string moe = "[model]\npreset = \"custom\"\nn_experts = 4\n[lora]\nrank = 4\n";
  EXPECT_EQ(one_error(moe, {}),
            "default: lora.targets has \"gate\", but every layer of this model is mixture-of-experts, "
            "which has no dense MLP: \"experts\" adapts every expert's gate, up and down projections");
  EXPECT_TRUE(load_config(moe + "targets = [\"q\", \"v\", \"experts\"]\n", "l.toml", {}, kCpu).ok());
  EXPECT_TRUE(job_model_shape(load_config(moe + "targets = [\"experts\"]\n", "l.toml", {}, kCpu).config).lora.experts);
  EXPECT_TRUE(load_config(moe + "targets = [\"q\", \"k\", \"v\", \"o\"]\n", "l.toml", {}, kCpu).ok());
  EXPECT_TRUE(load_config(moe, "l.toml", {"model.moe_every=2"}, kCpu).ok()) << "the dense layers' MLPs adapt";
  EXPECT_TRUE(load_config(moe + "targets = [\"q\"]\n", "l.toml", {"fsdp.expert_parallel=true"}, kCpu).ok());
  // Targets matching no layer of the shape (custom's 2 layers, MoE every 3rd: none): refused, the
  // job trained nothing.
  EXPECT_EQ(one_error(moe + "targets = [\"experts\"]\n", {"model.moe_every=3"}),
            "l.toml:6:11: lora.targets adapt no layer of this model (2 layers, mixture-of-experts every 3 with "
            "model.n_experts = 4): the job would train nothing");
  EXPECT_EQ(one_error("[lora]\nalpha = 8\n", {}), "l.toml:2:9: lora.alpha applies to lora.rank > 0");
}

// The configs shipped in configs/ load without a problem (a key renamed or a value tightened
// would otherwise leave an example users copy broken). One that takes its shape from
// model.init_from's config.json gets, as the job would, a shape's overrides: Qwen3-30B-A3B's.
TEST(ConfigLoad, ShippedConfigsLoad) {
  ModelShape qwen3_moe;
  qwen3_moe.vocab_size = 151936;
  qwen3_moe.d_model = 2048;
  qwen3_moe.n_layers = 48;
  qwen3_moe.n_heads = 32;
  qwen3_moe.n_kv_heads = 4;
  qwen3_moe.head_dim = 128;
  qwen3_moe.d_ff = 6144;
  qwen3_moe.rope_theta = 1e6f;
  qwen3_moe.norm_eps = 1e-6f;
  qwen3_moe.qk_norm = true;
  qwen3_moe.max_seq_len = 40960;
  qwen3_moe.n_experts = 128;
  qwen3_moe.top_k = 8;
  qwen3_moe.d_ff_expert = 768;
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(SHARDRL_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".toml") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const bool from_dir = text.str().find("init_from") != std::string::npos;
    const LoadedConfig l = load_config(text.str(), entry.path().filename().string(),
                                       from_dir ? shape_overrides(qwen3_moe) : std::vector<std::string>{}, kGpu);
    EXPECT_TRUE(l.ok()) << entry.path() << ": " << (l.errors.empty() ? "" : l.errors.front());
    if (from_dir) {
      EXPECT_TRUE(check_for_job(l, 8).empty()) << entry.path() << " on 8 ranks";
    }
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

TEST(ConfigLoad, DerivedValuesNeverRewriteTheConfig) {
  LoadedConfig l = load_config("[run]\nname = \"n\"\ndir = \"out\"\n", "f", {}, kCpu);
  ASSERT_TRUE(l.ok());
  DerivedConfig d = derive(l.config, kCpu);
  EXPECT_EQ(d.run_dir, std::filesystem::path("out/n"));
  EXPECT_EQ(d.comm_backend, CommBackend::mpi);
  EXPECT_EQ(l.config.comm.backend, CommBackend::automatic);   // the user's "auto" stays
  EXPECT_EQ(derive(l.config, kGpu).comm_backend, CommBackend::nccl);
}

// rl.eos_id: -1 (the byte tokenizer's EOS) by default; otherwise an id of the model's
// vocabulary, whichever preset or custom shape decides its size. Whether a dataset needs it is
// known only once the dataset is read, so the jsonl task refuses a pre-tokenized dataset
// without it (tests/test_tasks.cpp, PreTokenizedErrors), not the config.
// The RL objective's keys: each option loads, and a key its estimator, aggregation or mode would
// not read is an error naming the key and where it was set, with what to do instead.
TEST(ConfigLoad, TextTaskKeysAreReadOnlyWhereTheyApply) {
  const struct {
    std::vector<std::string> sets;
    const char* message;
  } ignored[] = {
      {{"rl.task=\"jsonl\"", "rl.dataset=d.jsonl", "rl.max_prompt_tokens=100"},
       "--set rl.max_prompt_tokens=100: rl.max_prompt_tokens applies to rl.task = \"text\", not \"jsonl\""},
      {{"rl.task=\"jsonl\"", "rl.dataset=d.jsonl", "rl.answer_key=\"target\""},
       "--set rl.answer_key=\"target\": rl.answer_key applies to rl.task = \"text\", not \"jsonl\""},
      {{"rl.chat_template=false"}, "--set rl.chat_template=false: rl.chat_template applies to rl.task = \"text\""},
      {{"rl.task=\"text\"", "rl.dataset=d.jsonl", "model.tokenizer=tok", "rl.eval_dataset=e.jsonl"},
       "--set rl.eval_dataset=e.jsonl: rl.eval_dataset is evaluated every rl.eval_interval iterations, which is 0"},
      {{"rl.task=\"text\"", "rl.dataset=d.jsonl", "model.tokenizer=tok", "rl.reward=\"command\"",
        "rl.reward_command=[\"python3\", \"r.py\"]", "rl.format_reward=0.5"},
       "--set rl.format_reward=0.5: rl.format_reward applies to rl.reward = \"math\" or \"regex\""},
  };
  for (const auto& k : ignored) {
    const LoadedConfig l = load_config("", "f", k.sets, kCpu);
    ASSERT_FALSE(l.ok()) << k.message;
    std::string all;
    for (const std::string& e : l.errors) all += e + "\n";
    EXPECT_NE(all.find(k.message), std::string::npos) << all;
  }
}

TEST(ConfigLoad, ObjectiveKeysAreReadOnlyWhereTheyApply) {
  LoadedConfig l = load_config(
      "[rl]\nadvantage_estimator = \"dr_grpo\"\nloss_aggregation = \"constant\"\nloss_tokens = 12\n"
      "kl_coef = 0.1\nkl_estimator = \"low_var_kl\"\nkl_in_reward = true\ndynamic_sampling = true\n"
      "max_sampling_rounds = 3\noverlong = \"soft\"\noverlong_buffer = 8\ntis_cap = 2.0\nentropy_coef = 0.001\n",
      "f", {}, kCpu);
  ASSERT_TRUE(l.ok()) << l.errors.front();
  EXPECT_EQ(l.config.rl.advantage_estimator, AdvantageEstimator::dr_grpo);
  EXPECT_EQ(l.config.rl.loss_aggregation, LossAggregation::constant);
  EXPECT_EQ(l.config.rl.loss_tokens, 12);
  EXPECT_EQ(l.config.rl.kl_estimator, KlEstimator::low_var_kl);
  EXPECT_TRUE(l.config.rl.kl_in_reward);
  EXPECT_TRUE(l.config.rl.dynamic_sampling);
  EXPECT_EQ(l.config.rl.max_sampling_rounds, 3);
  EXPECT_EQ(l.config.rl.overlong, Overlong::soft);
  EXPECT_EQ(l.config.rl.overlong_buffer, 8);
  EXPECT_EQ(l.config.rl.tis_cap, 2.0);
  EXPECT_EQ(l.config.rl.entropy_coef, 0.001);
  const LoadedConfig back = load_config(to_toml(l.config), "resolved", {}, kCpu);
  ASSERT_TRUE(back.ok()) << back.errors.front();
  EXPECT_EQ(to_toml(back.config), to_toml(l.config)) << "the resolved config reads back";

  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"rl.advantage_estimator=\"rloo\"", "rl.scale_by_std=false"},
       "--set rl.scale_by_std=false: rl.scale_by_std is read only by rl.advantage_estimator = \"grpo\" (dr_grpo is "
       "grpo without the division)"},
      {{"rl.advantage_estimator=\"dr_grpo\""},
       "--set rl.advantage_estimator=\"dr_grpo\": rl.advantage_estimator = \"dr_grpo\" normalises the loss by a "
       "constant number of tokens: set rl.loss_aggregation = \"constant\" (and rl.loss_tokens, or leave it 0 for "
       "rollout.max_new_tokens)"},
      {{"rl.loss_tokens=8"}, "--set rl.loss_tokens=8: rl.loss_tokens is read only by rl.loss_aggregation = \"constant\""},
      {{"rl.kl_estimator=\"k1\""}, "--set rl.kl_estimator=\"k1\": rl.kl_estimator is read only when rl.kl_coef > 0"},
      {{"rl.kl_in_reward=true"}, "--set rl.kl_in_reward=true: rl.kl_in_reward is read only when rl.kl_coef > 0"},
      {{"rl.advantage_estimator=\"reinforce_plus_plus\"", "rl.kl_coef=0.1"},
       "--set rl.advantage_estimator=\"reinforce_plus_plus\": rl.advantage_estimator = \"reinforce_plus_plus\" takes "
       "the KL in the reward: set rl.kl_in_reward = true"},
      {{"rl.max_sampling_rounds=2"},
       "--set rl.max_sampling_rounds=2: rl.max_sampling_rounds is read only when rl.dynamic_sampling = true"},
      {{"rl.dynamic_sampling=true", "rl.samples_per_prompt=1"},
       "--set rl.dynamic_sampling=true: rl.dynamic_sampling keeps groups whose rewards differ, which needs "
       "rl.samples_per_prompt >= 2"},
      {{"rl.overlong_buffer=4"}, "--set rl.overlong_buffer=4: rl.overlong_buffer is read only by rl.overlong = \"soft\""},
      {{"optim.decay_steps=100"},
       "--set optim.decay_steps=100: optim.decay_steps is read only by optim.schedule = \"cosine\" (the schedule is "
       "\"constant\")"},
      {{"optim.min_lr_ratio=0.5"},
       "--set optim.min_lr_ratio=0.5: optim.min_lr_ratio is read only by optim.schedule = \"cosine\" (the schedule "
       "is \"constant\")"},
      {{"rl.overlong=\"soft\""},
       "default: rl.overlong = \"soft\" needs 0 < rl.overlong_buffer <= rollout.max_new_tokens = 64 (now 0)"},
      {{"rl.overlong=\"soft\"", "rl.overlong_buffer=65"},
       "--set rl.overlong_buffer=65: rl.overlong = \"soft\" needs 0 < rl.overlong_buffer <= rollout.max_new_tokens = "
       "64 (now 65)"},
      {{"rl.tis_cap=2", "rl.old_logp=\"rollout\""},
       "--set rl.tis_cap=2: rl.tis_cap weighs tokens by the training forward's probability over the sampler's, which "
       "needs rl.old_logp = \"recompute\" (with \"rollout\" the two are the same numbers)"},
      // Settings without effect (check_settings_without_effect).
      {{"rl.samples_per_prompt=1"},
       "--set rl.samples_per_prompt=1: rl.samples_per_prompt = 1: rl.advantage_estimator = \"grpo\", \"dr_grpo\" and "
       "\"rloo\" compare each prompt's samples with each other, so every advantage would be 0 and nothing trained "
       "(use >= 2, or \"reinforce_plus_plus\", which whitens over the batch)"},
      {{"rollout.engine=\"static\"", "rollout.kv_cache_tokens=4096"},
       "--set rollout.kv_cache_tokens=4096: rollout.kv_cache_tokens is not read with rollout.engine = \"static\" (it "
       "sizes the paged engine's pool)"},
      {{"rl.adv_eps=0.1", "rl.advantage_estimator=\"rloo\""},
       "--set rl.adv_eps=0.1: rl.adv_eps is not read with anything but rl.advantage_estimator = \"grpo\" with "
       "rl.scale_by_std = true (it guards the division by the group's standard deviation)"},
      {{"rl.difficulty=7", "rl.task=\"jsonl\"", "rl.dataset=\"d.jsonl\""},
       "--set rl.difficulty=7: rl.difficulty is not read with a task whose examples come from rl.dataset"},
      {{"rl.difficulty=99"},
       "--set rl.difficulty=99: rl.difficulty = 99 is out of range for rl.task = \"sort\" (allowed 2..32)"},
      {{"rl.partial_credit=true", "rl.task=\"jsonl\"", "rl.dataset=\"d.jsonl\""},
       "--set rl.partial_credit=true: rl.partial_credit applies to the generated tasks; rl.task = \"jsonl\" rewards "
       "exact matches only"},
      {{"rl.format_reward=0.5", "rl.reward=\"exact\"", "rl.task=\"text\"", "rl.dataset=\"d.jsonl\"",
        "model.tokenizer=\"tok\""},
       "--set rl.format_reward=0.5: rl.format_reward applies to rl.reward = \"math\" or \"regex\"; \"exact\" scores 1 "
       "or 0"},
      {{"debug.fail_mode=\"hang\""},
       "--set debug.fail_mode=\"hang\": debug.fail_mode is not read with debug.fail_rank = -1 (no rank fails)"},
      {{"model.init_std=0.1", "model.init_from=\"hf\""},
       "--set model.init_std=0.1: model.init_std is not read with model.init_from (its weights replace every "
       "initialised one)"},
      {{"lora.rank=4", "model.init_from=\"hf\"", "lora.init=\"kaiming\"", "lora.init_from=\"peft\""},
       "--set lora.init=\"kaiming\": lora.init is not read with lora.init_from (its adapters replace the initialised "
       "ones)"},
      {{"rl.advantage_estimator=\"ppo\""},
       "--set rl.advantage_estimator=\"ppo\": rl.advantage_estimator: must be one of \"grpo\", \"dr_grpo\", \"rloo\", "
       "\"reinforce_plus_plus\", got \"ppo\""},
  };
  for (const auto& [sets, message] : cases) {
    SCOPED_TRACE(sets.front());
    l = load_config("", "f", sets, kCpu);
    ASSERT_EQ(l.errors.size(), 1u) << (l.errors.empty() ? "" : l.errors.front());
    EXPECT_EQ(l.errors[0], message);
  }
  // A saved config (a run's record, read on any build) is read back with a setting that had no
  // effect: its run is done, and later versions must read it.
  BuildInfo saved;
  saved.any = true;
  EXPECT_TRUE(load_config("", "f", {"rl.samples_per_prompt=1", "rl.adv_eps=0.1", "rl.scale_by_std=false"}, saved).ok());
}

// A NUL would cut a path, an argument or a C string short where the value goes: refused, named.
TEST(ConfigLoad, StringsWithANulAreRefused) {
  LoadedConfig l = load_config("[rl]\nreward_command = [\"judge\", \"a\\u0000b\"]\n[model]\ninit_from = \"m\\u0000x\"\n",
                               "f", {}, kCpu);
  ASSERT_EQ(l.errors.size(), 2u);
  EXPECT_EQ(l.errors[0], "f:2:18: rl.reward_command: holds a NUL character (\\u0000), which would cut it short");
  EXPECT_EQ(l.errors[1], "f:4:13: model.init_from: holds a NUL character (\\u0000), which would cut it short");
}

TEST(ConfigLoad, EosIdDefaultsAndMustBeInTheVocabulary) {
  LoadedConfig l = load_config("", "f", {}, kCpu);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l.config.rl.eos_id, -1);
  EXPECT_EQ(l.origin.at("rl.eos_id"), "default");
  EXPECT_NE(to_toml(l.config).find("eos_id = -1\n"), std::string::npos) << "the resolved config writes it";

  l = load_config("[rl]\neos_id = 258\n", "f", {}, kCpu);   // tiny: vocab_size 259
  ASSERT_TRUE(l.ok()) << l.errors.front();
  EXPECT_EQ(l.config.rl.eos_id, 258);
  l = load_config("[rl]\neos_id = 259\n", "f", {}, kCpu);
  ASSERT_EQ(l.errors.size(), 1u);
  EXPECT_EQ(l.errors[0], "f:2:10: rl.eos_id = 259 is outside the model's vocabulary (model.vocab_size = 259)");
  l = load_config("[rl]\neos_id = -2\n", "f", {}, kCpu);
  ASSERT_EQ(l.errors.size(), 1u);
  EXPECT_EQ(l.errors[0], "f:2:10: rl.eos_id: must be >= -1, got -2");
  // k = 1 sampled completions would write a second eval/pass@1 beside the greedy one (the job
  // stopped on an internal check at its first evaluation).
  l = load_config("[rl]\ntask = \"text\"\ndataset = \"d.jsonl\"\neval_samples = 1\n", "f", {}, kCpu);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.errors[0], "f:4:16: rl.eval_samples: must be >= 2, got 1");
  // A beta of 1 divided by a zero bias correction and turned every weight into NaN at the first
  // step, which the non-finite skip (it reads the gradients) let through.
  for (const char* beta : {"beta1", "beta2"}) {
    l = load_config(fmt::format("[optim]\n{} = 1.0\n", beta), "f", {}, kCpu);
    ASSERT_EQ(l.errors.size(), 1u) << beta;
    EXPECT_EQ(l.errors[0], fmt::format("f:2:{}: optim.{}: must be < 1.0, got 1.0", 9, beta));
    EXPECT_TRUE(load_config(fmt::format("[optim]\n{} = 0.999999\n", beta), "f", {}, kCpu).ok()) << beta;
  }

  // (A pre-tokenized dataset: the generated tasks' byte tokenizer needs 259 ids.)
  const std::string custom = "[model]\npreset = \"custom\"\nvocab_size = 64\n[rl]\ntask = \"jsonl\"\ndataset = \"d.jsonl\"\n";
  l = load_config(custom, "f", {"rl.eos_id=63"}, kCpu);
  ASSERT_TRUE(l.ok()) << l.errors.front();
  EXPECT_EQ(l.config.rl.eos_id, 63);
  l = load_config(custom, "f", {"rl.eos_id=64"}, kCpu);
  ASSERT_EQ(l.errors.size(), 1u);
  EXPECT_EQ(l.errors[0],
            "--set rl.eos_id=64: rl.eos_id = 64 is outside the model's vocabulary (model.vocab_size = 64)");
  // A larger named preset's vocabulary holds ids the byte tokenizer never makes.
  l = load_config("[model]\npreset = \"llama-1b\"\n[rl]\neos_id = 128001\n", "f", {}, kCpu);
  EXPECT_TRUE(l.ok()) << l.errors.front();

  // A jsonl dataset without rl.eos_id is valid as far as the config can tell (a text dataset
  // needs none).
  l = load_config("[rl]\ntask = \"jsonl\"\ndataset = \"d.jsonl\"\n", "f", {}, kCpu);
  EXPECT_TRUE(l.ok()) << l.errors.front();
}

TEST(ConfigLoad, ClosestMatchOnlySuggestsLikelyTypos) {
  EXPECT_EQ(closest_match("itrations", {"iterations", "seed"}), "iterations");
  EXPECT_EQ(closest_match("completely_different", {"iterations", "seed"}), "");
}

}  // namespace
}  // namespace shardrl
