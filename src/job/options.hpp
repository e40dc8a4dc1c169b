// The one Config read into the options structs of the layers below the job (DESIGN.md invariant
// 1): no layer under src/job sees the Config, so every key reaches them through these functions
// and every entry point that builds a policy (job/policy.hpp) calls the same ones.
#pragma once

#include "config/config.hpp"
#include "fsdp/sharded_trainer.hpp"
#include "model/transformer.hpp"
#include "optim/optimizer.hpp"
#include "rl/grpo_loop.hpp"
#include "rl/task.hpp"
#include "rollout/sampling.hpp"

namespace shardrl {

// The model's shape, precision and buffers (micro-batch x seq_len), the attention and MoE
// choices (model.attention resolved for this build). Placement in an arena and the expert
// exchange are the policy's to set.
ModelOptions model_options(const Config& config);

// Which fused attention kernels a build has (a parameter, so that the rule below is tested on
// every build, not only where the kernels run).
struct AttentionKernels {
  bool flash = false;
  bool cudnn = false;
  static AttentionKernels of_this_build();
};
// model.attention as the model runs it: "auto" is cuDNN where built, else the flash kernels, for
// bf16 and the flash kernels' head dims; the batched GEMMs otherwise.
AttentionImpl resolve_attention(AttentionChoice choice, Precision precision, int head_dim,
                                const AttentionKernels& built);
FsdpOptions fsdp_options(const Config& config);
OptimizerOptions optimizer_options(const Config& config);
SamplingOptions sampling_options(const Config& config);
// How the rollout generates: rollout.engine, kv_cache_tokens, prefill_tokens, expert_parallel.
EngineOptions engine_options(const Config& config);
TaskOptions task_options(const Config& config);
// How a job renders its prompts (rl.system_prompt, rl.chat_template, rl.template_variables; the
// rest left default): what rl/task_chat.hpp reads, for generate --chat and tokenize --chat too.
TextTaskOptions chat_options(const Config& config);
// The id that ends a completion: rl.eos_id, or when it is unset the byte tokenizer's EOS, or -1
// for the text task (its tokenizer's eos token: Task::eos_id()).
std::int32_t eos_id(const Config& config);
GrpoLoopOptions grpo_loop_options(const Config& config);
// The directory of the model's own tokenizer: model.tokenizer, else model.init_from when it holds
// a tokenizer.json, else "" (the byte tokenizer of the generated tasks).
std::string tokenizer_dir(const Config& config);

}  // namespace shardrl
