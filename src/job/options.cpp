#include "job/options.hpp"

#include <algorithm>
#include <filesystem>

#include "config/model_presets.hpp"
#include "kernels/cudnn_attention.hpp"
#include "kernels/flash_attention.hpp"
#include "rl/tokenizer.hpp"

namespace shardrl {
AttentionKernels AttentionKernels::of_this_build() {
  return {kernels::flash_attention_available(), kernels::cudnn_attention_available()};
}

// "auto" takes the fused kernels wherever they run, so the same config trains on tensor cores
// on a GPU build and through the reference GEMMs on a CPU build: cuDNN's where the build has
// it (2-3x the flash kernels' speed, measured: docs/performance.md), with the flash kernels for
// what cuDNN does not take. "flash" and "cudnn" have been checked against the same rules when
// the config was loaded (config/load.cpp).
AttentionImpl resolve_attention(AttentionChoice choice, Precision precision, int head_dim,
                                const AttentionKernels& built) {
  switch (choice) {
    case AttentionChoice::flash: return AttentionImpl::flash;
    case AttentionChoice::gemm: return AttentionImpl::gemm;
    case AttentionChoice::cudnn: return AttentionImpl::cudnn;
    case AttentionChoice::automatic: break;
  }
  const bool flash_runs =
      built.flash && precision == Precision::bf16 && kernels::flash_attention_supports_head_dim(head_dim);
  if (!flash_runs) return AttentionImpl::gemm;
  return built.cudnn ? AttentionImpl::cudnn : AttentionImpl::flash;
}

ModelOptions model_options(const Config& config) {
  ModelOptions o;
  o.shape = job_model_shape(config);
  o.precision = config.model.precision;
  o.gradient_accumulation_fusion = config.train.gradient_accumulation_fusion;
  o.activation_recompute = config.train.activation_recompute;
  o.logits_chunk_tokens = static_cast<int>(config.train.logits_chunk_tokens);
  o.max_batch = static_cast<int>(config.train.micro_batch_size);
  o.max_seq_len = static_cast<int>(config.train.seq_len);
  o.aux_loss_coef = static_cast<float>(config.model.aux_loss_coef);
  o.moe_impl = config.model.moe_impl;
  o.attention =
      resolve_attention(config.model.attention, o.precision, o.shape.head_dim, AttentionKernels::of_this_build());
  o.cudnn_workspace_bytes = static_cast<std::size_t>(config.model.cudnn_workspace_mib) << 20;
  return o;
}

FsdpOptions fsdp_options(const Config& c) {
  FsdpOptions o;
  o.reshard_after_forward = c.fsdp.reshard_after_forward;
  o.reduce_dtype = c.fsdp.reduce_dtype;
  o.main_grad_dtype = c.fsdp.main_grad_dtype;
  o.state_dtype = c.optim.state_dtype;
  o.decay_norms_and_embeddings = c.optim.decay_norms_and_embeddings;
  o.check_released = c.debug.check_released;
  o.keep_reference = c.rl.kl_coef > 0;
  o.expert_parallel = c.fsdp.expert_parallel;
  return o;
}

OptimizerOptions optimizer_options(const Config& c) {
  OptimizerOptions o;
  o.lr = static_cast<float>(c.optim.lr);
  o.beta1 = static_cast<float>(c.optim.beta1);
  o.beta2 = static_cast<float>(c.optim.beta2);
  o.eps = static_cast<float>(c.optim.eps);
  o.weight_decay = static_cast<float>(c.optim.weight_decay);
  o.schedule = c.optim.schedule;
  o.warmup_steps = c.optim.warmup_steps;
  o.decay_steps = c.optim.decay_steps;
  o.min_lr_ratio = static_cast<float>(c.optim.min_lr_ratio);
  o.clip_grad_norm = static_cast<float>(c.optim.clip_grad_norm);
  return o;
}

EngineOptions engine_options(const Config& c) {
  EngineOptions e;
  e.engine = c.rollout.engine;
  e.kv_cache_tokens = c.rollout.kv_cache_tokens;
  e.prefill_tokens = c.rollout.prefill_tokens;
  e.expert_parallel = c.rollout.expert_parallel;
  return e;
}

SamplingOptions sampling_options(const Config& c) {
  SamplingOptions o;
  o.temperature = static_cast<float>(c.rollout.temperature);
  o.top_k = static_cast<int>(c.rollout.top_k);
  o.top_p = static_cast<float>(c.rollout.top_p);
  return o;
}

TextTaskOptions chat_options(const Config& c) {
  TextTaskOptions t;
  t.system_prompt = c.rl.system_prompt;
  t.chat_template = c.rl.chat_template;
  t.template_variables = c.rl.template_variables;
  return t;
}

TaskOptions task_options(const Config& c) {
  TaskOptions o;
  o.name = c.rl.task;
  o.difficulty = static_cast<int>(c.rl.difficulty);
  o.partial_credit = c.rl.partial_credit;
  o.dataset_path = c.rl.dataset;
  o.eos_id = c.rl.eos_id;
  if (c.rl.task == "text") {
    TextTaskOptions& t = o.text;
    t = chat_options(c);
    t.tokenizer_dir = tokenizer_dir(c);
    t.eval_path = c.rl.eval_dataset;
    t.prompt_key = c.rl.prompt_key;
    t.answer_key = c.rl.answer_key;
    t.solution_key = c.rl.solution_key;
    // A prompt leaves room for a whole completion: the rollout takes prompt + completion tokens
    // up to train.seq_len + 1 (a training row's inputs and its last target) within the model's
    // max_seq_len (grpo_loop's gen_len); one less dropped prompts that fit.
    t.max_prompt_tokens = c.rl.max_prompt_tokens > 0
                              ? c.rl.max_prompt_tokens
                              : std::min<std::int64_t>(c.train.seq_len + 1, resolve_model_shape(c.model).max_seq_len) -
                                    c.rollout.max_new_tokens;
    t.reward = c.rl.reward == "auto" ? "math" : c.rl.reward;
    t.format_reward = c.rl.format_reward;
    t.reward_pattern = c.rl.reward_pattern;
    t.reward_command = c.rl.reward_command;
    t.reward_timeout_s = c.rl.reward_timeout_s;
  }
  return o;
}

std::string tokenizer_dir(const Config& c) {
  if (!c.model.tokenizer.empty()) return c.model.tokenizer;
  if (!c.model.init_from.empty() && std::filesystem::exists(std::filesystem::path(c.model.init_from) / "tokenizer.json"))
    return c.model.init_from;
  return c.rl.task == "text" ? c.model.init_from : "";   // the text task names a missing file itself
}

std::int32_t eos_id(const Config& c) {
  if (c.rl.eos_id >= 0) return static_cast<std::int32_t>(c.rl.eos_id);
  return c.rl.task == "text" ? -1 : tokenizer::kEos;   // the text task's tokenizer decides
}

GrpoLoopOptions grpo_loop_options(const Config& c) {
  GrpoLoopOptions o;
  o.task = task_options(c);
  o.seed = static_cast<std::uint64_t>(c.run.seed);
  o.prompts_per_iteration = static_cast<int>(c.rl.prompts_per_iteration);
  o.samples_per_prompt = static_cast<int>(c.rl.samples_per_prompt);
  o.minibatches = static_cast<int>(c.rl.minibatches);
  o.sft_batch_size = c.rl.sft_batch_size;
  o.eos_id = eos_id(c);
  o.sampling = sampling_options(c);
  o.max_new_tokens = static_cast<int>(c.rollout.max_new_tokens);
  // MoE layers: the load-balancing loss is a function of each micro-batch's set of tokens, so a
  // layout that depends on the rank's share (packing does) would change the objective with the
  // world size; their rows stay one sequence per row (docs/config.md says so), as long as the
  // minibatch's longest (padding is left out of that loss).
  o.short_rows = c.train.packing;
  o.packing = c.train.packing && c.model.n_experts == 0;
  o.decode_graphs = c.rollout.cuda_graph == RolloutGraph::decode;
  o.engine = engine_options(c);
  o.train_graph = c.train.cuda_graph == TrainGraph::full;
  o.advantage_estimator = c.rl.advantage_estimator;
  o.scale_by_std = c.rl.scale_by_std;
  o.adv_eps = c.rl.adv_eps;
  o.loss.clip_low = static_cast<float>(c.rl.clip_low);
  o.loss.clip_high = static_cast<float>(c.rl.clip_high);
  o.loss.kl_coef = static_cast<float>(c.rl.kl_coef);
  o.loss.kl_estimator = c.rl.kl_estimator;
  o.loss.entropy_coef = static_cast<float>(c.rl.entropy_coef);
  o.kl_in_reward = c.rl.kl_in_reward;
  o.loss_aggregation = c.rl.loss_aggregation;
  o.loss_tokens = static_cast<int>(c.rl.loss_tokens);
  o.old_logp = c.rl.old_logp;
  o.tis_cap = static_cast<float>(c.rl.tis_cap);
  o.dynamic_sampling = c.rl.dynamic_sampling;
  o.max_sampling_rounds = static_cast<int>(c.rl.max_sampling_rounds);
  o.overlong = c.rl.overlong;
  o.overlong_buffer = static_cast<int>(c.rl.overlong_buffer);
  o.eval_samples = static_cast<int>(c.rl.eval_samples);
  return o;
}

}  // namespace shardrl
