// The one Config of a shardrl job (DESIGN.md invariant 1): parsed from TOML plus --set
// overrides, validated as a whole before any device work. Nothing rewrites a user's value;
// values computed from the config live in DerivedConfig.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/lr_schedule.hpp"
#include "core/moe_impl.hpp"
#include "rl/loss_choices.hpp"
#include "rollout/engine_choice.hpp"

namespace shardrl {

enum class CommBackend { automatic, nccl, mpi };

// model.attention as the user wrote it; job/options.cpp resolves it into an AttentionImpl
// (core/attention_impl.hpp) for this build, precision and head_dim.
enum class AttentionChoice { automatic, flash, gemm, cudnn };

struct RunConfig {
  std::string name = "shardrl";   // run directory is <dir>/<name>/
  std::string dir = "runs";
  std::int64_t seed = 1234;
  std::int64_t iterations = 10;
};

// The shape keys hold the `tiny` preset's values; with a named preset they must stay unset
// (the preset decides), with preset = "custom" they are the shape.
struct ModelConfig {
  std::string preset = "tiny";
  Precision precision = Precision::bf16;
  std::int64_t vocab_size = 259;
  std::int64_t d_model = 64;
  std::int64_t n_layers = 2;
  std::int64_t n_heads = 4;
  std::int64_t n_kv_heads = 2;
  std::int64_t head_dim = 16;
  std::int64_t d_ff = 128;
  double rope_theta = 10000.0;
  // Llama 3 RoPE frequency scaling (Hugging Face rope_type "llama3"); factor 0: plain RoPE.
  double rope_scaling_factor = 0.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  std::int64_t rope_original_max_position = 8192;
  double norm_eps = 1e-6;
  bool qk_norm = true;
  bool tie_embeddings = false;
  std::int64_t max_seq_len = 256;
  // Mixture of experts (custom shapes; n_experts = 0: every MLP dense).
  std::int64_t n_experts = 0;
  std::int64_t top_k = 2;
  std::int64_t d_ff_expert = 64;
  std::int64_t moe_every = 1;       // layer l is MoE when (l + 1) % moe_every == 0
  bool shared_expert = false;
  double aux_loss_coef = 0.001;     // load-balancing loss weight (not a shape key)
  MoeImpl moe_impl = MoeImpl::grouped;
  AttentionChoice attention = AttentionChoice::automatic;
  std::int64_t cudnn_workspace_mib = 1024;   // cuDNN attention's backward workspace at most
  double init_std = 0.02;
  std::string init_from;            // a Hugging Face model directory to start from ("": fresh)
  std::string tokenizer;            // a directory with tokenizer.json ("": init_from's, for rl.task = "text")
};

// Whether a whole optimizer step (every micro-batch's forward and backward, the collectives and
// the optimizer) is captured once as a CUDA graph and replayed every step.
enum class TrainGraph { none, full };
// Whether a decode step (every layer, the head and the draw) is captured per batch bucket.
enum class RolloutGraph { none, decode };

struct TrainConfig {
  bool gradient_accumulation_fusion = true;
  std::int64_t micro_batch_size = 4;   // sequences per micro-batch
  std::int64_t seq_len = 128;          // positions per sequence (activation buffers)
  bool activation_recompute = false;
  // Tokens whose logits exist at once in the head (0: the whole micro-batch). Above it the head
  // runs in chunks and backward recomputes each chunk's logits: memory for one GEMM more.
  std::int64_t logits_chunk_tokens = 4096;
  TrainGraph cuda_graph = TrainGraph::none;
  bool packing = true;                 // RL train phase: sequences packed into rows as long as needed
};

struct FsdpConfig {
  bool reshard_after_forward = true;     // free each unit's gathered weights after its forward
  GradDtype reduce_dtype = GradDtype::fp32;      // element type of the reduce-scatter
  GradDtype main_grad_dtype = GradDtype::fp32;   // element type of the persistent grad slices
  bool expert_parallel = false;   // MoE layers: each rank owns whole experts, tokens travel to them
};

struct OptimConfig {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.01;
  bool decay_norms_and_embeddings = false;
  LrSchedule schedule = LrSchedule::constant;
  std::int64_t warmup_steps = 0;
  std::int64_t decay_steps = 0;
  double min_lr_ratio = 0.1;
  double clip_grad_norm = 1.0;
  GradDtype state_dtype = GradDtype::fp32;   // Adam moments
};

struct RolloutConfig {
  double temperature = 1.0;        // 0: greedy
  std::int64_t top_k = 0;          // 0: off
  double top_p = 1.0;              // 1: off
  std::int64_t max_new_tokens = 64;
  RolloutGraph cuda_graph = RolloutGraph::none;
  RolloutEngine engine = RolloutEngine::paged;
  std::int64_t kv_cache_tokens = 0;   // paged: positions of the block pool; 0: as many as static
  std::int64_t tensor_parallel = 1;   // ranks that decode one model together
  std::int64_t prefill_tokens = 16384;   // positions per prefill call (at least a row's); 0: every row at once
  bool expert_parallel = false;       // MoE: decode with the rank's own experts (fsdp.expert_parallel's)
};

struct RlConfig {
  std::string task = "sort";           // sort | add | reverse | jsonl | text
  std::int64_t difficulty = 4;
  bool partial_credit = false;
  std::string dataset;                 // jsonl and text
  // The text task (model's tokenizer and chat template; text/hf_tokenizer.hpp).
  std::string eval_dataset;            // held-out split ("": no evaluation)
  std::string prompt_key = "prompt";   // a dataset line's prompt (a string) or "messages" (a chat)
  std::string answer_key = "answer";
  std::string solution_key = "solution";   // worked solutions for the warm-up ("" or absent: the answer)
  std::string system_prompt;           // a system message before each prompt ("": none)
  bool chat_template = true;           // render prompts with the tokenizer's chat template
  std::string template_variables = "{}";   // extra template variables, a JSON object
  std::int64_t max_prompt_tokens = 0;  // longer prompts are dropped; 0: what the rollout takes (job/options.cpp)
  std::string reward = "auto";         // auto | math | exact | regex | command
  double format_reward = 0.0;          // math/regex: reward of a well-formed wrong answer
  std::string reward_pattern;          // regex: a PCRE2 pattern with a capture group
  std::vector<std::string> reward_command;   // command: argv of the reward process
  double reward_timeout_s = 60.0;      // command: seconds one batch may take
  std::int64_t eval_interval = 0;      // evaluate every this many iterations (and at 0 and the end); 0: off
  std::int64_t eval_samples = 4;       // k of pass@k and mean@k (sampled); pass@1 is greedy
  std::int64_t eos_id = -1;            // id that ends a completion; -1: the byte tokenizer's EOS (257)
  std::int64_t prompts_per_iteration = 16;   // global, split across ranks
  std::int64_t samples_per_prompt = 8;       // G
  std::int64_t minibatches = 1;        // optimizer steps per rollout
  std::int64_t sft_steps = 0;          // supervised warm-up steps before RL
  std::int64_t sft_batch_size = 32;    // global demonstrations per warm-up step
  double sft_lr = 0.0;                 // warm-up peak lr; 0: optim.lr
  AdvantageEstimator advantage_estimator = AdvantageEstimator::grpo;
  bool scale_by_std = true;            // grpo only
  double adv_eps = 1e-6;
  double clip_low = 0.2;
  double clip_high = 0.28;
  LossAggregation loss_aggregation = LossAggregation::token;
  std::int64_t loss_tokens = 0;        // constant aggregation: tokens per completion; 0: rollout.max_new_tokens
  OldLogp old_logp = OldLogp::recompute;
  double kl_coef = 0.0;                // 0: no reference policy
  KlEstimator kl_estimator = KlEstimator::k3;
  bool kl_in_reward = false;           // the KL as a token-level reward penalty instead of a loss term
  bool dynamic_sampling = false;       // DAPO: drop groups of equal rewards, draw more prompts
  std::int64_t max_sampling_rounds = 4;
  Overlong overlong = Overlong::none;
  std::int64_t overlong_buffer = 0;    // soft: the last this many tokens before max_new_tokens
  double tis_cap = 0.0;                // truncated importance sampling cap; 0: off
  double entropy_coef = 0.0;
};

struct CheckpointConfig {
  std::int64_t interval = 50;    // save every this many iterations (0: only at the end and on signals)
  std::int64_t keep_last = 3;
  std::int64_t keep_every = 0;   // also keep iterations that are multiples of this (0: none)
  bool verify = true;            // check every tensor's checksum when loading
  bool async = false;            // periodic saves written by a background thread
  double timeout_s = 0.0;        // a save (or the wait for a background one) unfinished after this long aborts the job; 0: comm.timeout_s
};

// What moves the all-gathers into the phase arena (the weights' gathers): NCCL's kernels on SMs,
// or the GPUs' copy engines (NCCL >= 2.28, the arena in symmetric memory); "auto": copy engines
// where they can run (job/policy.cpp), else kernels.
enum class GatherEngine { automatic, kernels, copy };

struct CommConfig {
  CommBackend backend = CommBackend::automatic;
  double timeout_s = 300.0;   // a collective unfinished after this long aborts the job
  GatherEngine gather_engine = GatherEngine::automatic;
};

enum class FailMode { error, hang, exception };
// An I/O step that fails as a full disk would (fault injection): rank 0's metrics record or
// checkpoint commit, or the last rank's write of a checkpoint's first tensor.
enum class FailIo { none, metrics, commit, write };

struct DebugConfig {
  std::int64_t fail_rank = -1;          // fault injection: this rank fails after start-up
  FailMode fail_mode = FailMode::error;  // how it fails: a fatal error, or stop taking part
  bool check_released = false;           // poison released gather slots, check generations
  std::int64_t save_pause_ms = 0;        // pause between tensors while saving (crash tests)
  FailIo fail_io = FailIo::none;         // this I/O step fails ...
  std::int64_t fail_io_iteration = 1;    // ... when this many iterations are done
};

// Low-rank adapters on a frozen base (model/lora_shape.hpp); rank 0: full fine-tuning.
enum class LoraInit { gaussian, kaiming };
struct LoraConfig {
  std::int64_t rank = 0;
  double alpha = 16.0;
  std::vector<std::string> targets = {"q", "k", "v", "o", "gate", "up", "down"};
  LoraInit init = LoraInit::gaussian;
  std::string init_from;   // a PEFT adapter directory to start the adapters from ("": fresh)
};

struct Config {
  RunConfig run;
  ModelConfig model;
  LoraConfig lora;
  TrainConfig train;
  FsdpConfig fsdp;
  OptimConfig optim;
  RolloutConfig rollout;
  RlConfig rl;
  CheckpointConfig checkpoint;
  CommConfig comm;
  DebugConfig debug;
};

// What this executable was built with; some settings are valid only on some builds.
struct BuildInfo {
  bool has_cuda = false;
  bool has_cudnn = false;   // a GPU build configured with cuDNN (model.attention = "cudnn")
  // A saved config, read on any build: what a CPU build or a GPU build alone allows is allowed
  // (the saving job's build took it), so no setting is refused for the build.
  bool any = false;
  // A saved config run again on this build (generate --checkpoint): this build's rules, not the
  // refusal of settings without effect, which may be newer than the run.
  bool saved_run = false;
};
BuildInfo this_build();

// Values derived from a validated Config and the job's world size. Never written back.
struct DerivedConfig {
  std::filesystem::path run_dir;   // <run.dir>/<run.name>
  CommBackend comm_backend = CommBackend::mpi;   // comm.backend with "auto" resolved
};

}  // namespace shardrl
