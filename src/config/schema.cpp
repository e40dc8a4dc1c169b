// The key table. To add a key: add the field to config.hpp, one entry here (the [model] and
// [lora] keys: in schema_model.cpp), and a row in docs/config.md (the docs test fails until all
// three agree).
#include "config/schema.hpp"

#include "config/model_presets.hpp"
#include "config/schema_keys.hpp"
#include "kernels/cudnn_attention.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include <fmt/format.h>

namespace shardrl {
namespace {

using namespace schema_keys;

std::vector<KeyDef> build_schema() {
  using VK = ValueKind;
  std::vector<KeyDef> s;

  KeyDef name = field("run", "name", VK::string,
                      "Name of the run; its files go to `<dir>/<name>/`.", &Config::run,
                      &RunConfig::name);
  name.check = check_plain_name;
  s.push_back(name);
  KeyDef dir = field("run", "dir", VK::string,
                     "Directory that holds run directories (relative to the working directory).",
                     &Config::run, &RunConfig::dir);
  dir.check = check_non_empty;
  s.push_back(dir);
  s.push_back(with_min(field("run", "seed", VK::integer,
                             "Seed of every random stream (init, data, sampling).", &Config::run,
                             &RunConfig::seed),
                       0));
  s.push_back(with_min(field("run", "iterations", VK::integer,
                             "RL iterations (rollout, then `rl.minibatches` optimizer steps) after the "
                             "warm-up; a resumed run continues up to this count.",
                             &Config::run, &RunConfig::iterations),
                       0));

  add_model_keys(s);

  s.push_back(field("train", "gradient_accumulation_fusion", VK::boolean,
                    "Weight-gradient GEMMs accumulate straight into the fp32 gradient buffer "
                    "(beta = 1) instead of writing a separate tensor that is then added.",
                    &Config::train, &TrainConfig::gradient_accumulation_fusion));
  s.push_back(with_max(with_min(field("train", "micro_batch_size", VK::integer,
                                      "Sequences per micro-batch (sizes the activation buffers).",
                                      &Config::train, &TrainConfig::micro_batch_size),
                                1),
                       kMaxInt));
  s.push_back(with_max(with_min(field("train", "seq_len", VK::integer,
                                      "Positions per training sequence (sizes the activation buffers); "
                                      "at most the model's max_seq_len.",
                                      &Config::train, &TrainConfig::seq_len),
                                1),
                       kMaxInt));
  s.push_back(field("train", "activation_recompute", VK::boolean,
                    "Keep only each layer's input during forward and recompute the layer's "
                    "activations in backward (less memory, one more forward).",
                    &Config::train, &TrainConfig::activation_recompute));
  s.push_back(with_max(with_min(field("train", "logits_chunk_tokens", VK::integer,
                                      "Tokens whose logits (tokens x vocabulary, compute type) exist at once in "
                                      "the LM head; a larger micro-batch runs the head in chunks and backward "
                                      "recomputes each chunk's logits (one more head GEMM, far less memory). "
                                      "0: the whole micro-batch at once.",
                                      &Config::train, &TrainConfig::logits_chunk_tokens),
                                0),
                       kMaxInt));
  s.push_back(choice("train", "cuda_graph",
                     "`full`: each optimizer step (all micro-batches' forward and backward, the collectives "
                     "and the optimizer) is captured once as a CUDA graph and replayed every step; `none`: "
                     "launched kernel by kernel. `full` needs a CUDA build.",
                     &Config::train, &TrainConfig::cuda_graph, std::vector<std::string>{"none", "full"}));
  s.push_back(field("train", "packing", VK::boolean,
                    "RL train phase: pack completions into rows as long as the minibatch's longest sequence "
                    "(each attending only to itself); false: one per row of train.seq_len. Dense models only.",
                    &Config::train, &TrainConfig::packing));

  const std::vector<std::string> dtypes = {"fp32", "bf16"};
  s.push_back(field("fsdp", "reshard_after_forward", VK::boolean,
                    "Free a unit's gathered weights after its forward and gather again for backward "
                    "(`false` keeps every unit gathered from forward to backward: more memory, fewer "
                    "all-gathers).",
                    &Config::fsdp, &FsdpConfig::reshard_after_forward));
  s.push_back(choice("fsdp", "reduce_dtype",
                     "Element type of the gradient reduce-scatter: `fp32` or `bf16` (half the bytes).",
                     &Config::fsdp, &FsdpConfig::reduce_dtype, dtypes));
  s.push_back(choice("fsdp", "main_grad_dtype",
                     "Element type of the persistent gradient slices: `fp32` or `bf16`.", &Config::fsdp,
                     &FsdpConfig::main_grad_dtype, dtypes));
  s.push_back(field("fsdp", "expert_parallel", VK::boolean,
                    "Mixture-of-experts layers: each of the W ranks keeps E / W experts whole instead of "
                    "1 / W of every expert, and the routed tokens travel to their experts' ranks and back "
                    "(all-to-all) instead of the experts' weights being all-gathered. W must divide "
                    "model.n_experts. Results equal the sharded experts' to rounding.",
                    &Config::fsdp, &FsdpConfig::expert_parallel));

  auto positive = [&](const char* key, double OptimConfig::*member, const char* meaning) {
    s.push_back(with_min(field("optim", key, VK::real, meaning, &Config::optim, member), 0.0, true));
  };
  auto unit_interval = [&](const char* key, double OptimConfig::*member, const char* meaning) {
    s.push_back(with_max(with_min(field("optim", key, VK::real, meaning, &Config::optim, member), 0.0), 1.0));
  };
  positive("lr", &OptimConfig::lr, "Peak learning rate of AdamW.");
  // A beta of 1 keeps its moment at 0 and Adam's bias correction 1 - beta^t at 0: 0/0 in the
  // first update (as PyTorch, beta < 1).
  auto decay_rate = [&](const char* key, double OptimConfig::*member, const char* meaning) {
    s.push_back(with_max(with_min(field("optim", key, VK::real, meaning, &Config::optim, member), 0.0), 1.0, true));
  };
  decay_rate("beta1", &OptimConfig::beta1, "AdamW first-moment decay.");
  decay_rate("beta2", &OptimConfig::beta2, "AdamW second-moment decay.");
  positive("eps", &OptimConfig::eps, "AdamW epsilon.");
  s.push_back(with_min(field("optim", "weight_decay", VK::real, "Decoupled weight decay.", &Config::optim,
                             &OptimConfig::weight_decay),
                       0.0));
  s.push_back(field("optim", "decay_norms_and_embeddings", VK::boolean,
                    "Also apply weight decay to norm weights and the embedding (off by default).",
                    &Config::optim, &OptimConfig::decay_norms_and_embeddings));
  s.push_back(choice("optim", "schedule",
                     "Learning-rate schedule after the warm-up: `constant`, or `cosine` down to "
                     "lr * min_lr_ratio over decay_steps.",
                     &Config::optim, &OptimConfig::schedule, std::vector<std::string>{"constant", "cosine"}));
  s.push_back(with_max(with_min(field("optim", "warmup_steps", VK::integer,
                                      "Optimizer steps of linear warm-up from lr/warmup_steps to lr.",
                                      &Config::optim, &OptimConfig::warmup_steps),
                                0),
                       kMaxInt));
  s.push_back(with_max(with_min(field("optim", "decay_steps", VK::integer,
                                      "Optimizer steps of the cosine decay after the warm-up (cosine only).",
                                      &Config::optim, &OptimConfig::decay_steps),
                                0),
                       kMaxInt));
  unit_interval("min_lr_ratio", &OptimConfig::min_lr_ratio, "Final learning rate of the cosine, as a fraction of lr.");
  s.push_back(with_min(field("optim", "clip_grad_norm", VK::real,
                             "Clip the global gradient norm to this value; 0 disables clipping.", &Config::optim,
                             &OptimConfig::clip_grad_norm),
                       0.0));
  s.push_back(choice("optim", "state_dtype", "Element type of the Adam moments: `fp32` or `bf16`.", &Config::optim,
                     &OptimConfig::state_dtype, dtypes));

  s.push_back(with_min(field("rollout", "temperature", VK::real,
                             "Sampling temperature; 0 draws greedily (the most likely token).", &Config::rollout,
                             &RolloutConfig::temperature),
                       0.0));
  s.push_back(with_max(with_min(field("rollout", "top_k", VK::integer,
                                      "Keep only the k most likely tokens (ties at the k-th kept); 0: off.",
                                      &Config::rollout, &RolloutConfig::top_k),
                                0),
                       kMaxInt));
  s.push_back(with_max(with_min(field("rollout", "top_p", VK::real,
                                      "Keep the most likely tokens whose probability mass reaches top_p; 1: off.",
                                      &Config::rollout, &RolloutConfig::top_p),
                                0.0, true),
                       1.0));
  s.push_back(with_max(with_min(field("rollout", "max_new_tokens", VK::integer,
                                      "Longest completion; generation also stops at EOS.", &Config::rollout,
                                      &RolloutConfig::max_new_tokens),
                                1),
                       kMaxInt));
  s.push_back(choice("rollout", "cuda_graph",
                     "`decode`: the decode step (every layer, the head and the draw) is captured as a CUDA "
                     "graph per batch bucket (powers of two) and replayed; `none`: launched kernel by "
                     "kernel. `decode` needs a CUDA build.",
                     &Config::rollout, &RolloutConfig::cuda_graph, std::vector<std::string>{"none", "decode"}));
  s.push_back(choice("rollout", "engine",
                     "`static`: every row's prompt is prefilled and all rows decode together, each leaving "
                     "when it ends; the KV cache is rows x positions. `paged`: a prompt is prefilled once for "
                     "its samples, which share its KV cache blocks (16 positions each); blocks are taken as "
                     "sequences grow, a finished row's slot takes the next waiting one, and when the pool runs "
                     "out the row admitted last is recomputed later. The same draws as `static` (on a GPU to "
                     "the rounding of GEMMs of other shapes, which can flip a near tie).",
                     &Config::rollout, &RolloutConfig::engine, std::vector<std::string>{"static", "paged"}));
  s.push_back(with_max(with_min(field("rollout", "kv_cache_tokens", VK::integer,
                                      "`paged`: positions the KV cache's block pool holds, rounded up to whole "
                                      "blocks and at least two sequences' worth and a block, plus one scratch "
                                      "block; rows that do not fit wait, or are recomputed later. 0: as many as "
                                      "`static` allocates "
                                      "(rows x positions).",
                                      &Config::rollout, &RolloutConfig::kv_cache_tokens),
                                0),
                       kMaxInt));
  s.push_back(with_max(with_min(field("rollout", "tensor_parallel", VK::integer,
                                      "Ranks that decode one model together (dense models): each holds 1/T of "
                                      "every layer's heads and MLP columns in the rollout, and each layer's two "
                                      "output projections are summed over them. The T ranks of a group generate "
                                      "their prompts together. Divides the ranks, model.n_heads, n_kv_heads and "
                                      "d_ff. 1: every rank holds the whole model.",
                                      &Config::rollout, &RolloutConfig::tensor_parallel),
                                1),
                       kMaxInt));
  s.push_back(with_max(with_min(field("rollout", "prefill_tokens", VK::integer,
                                      "Positions one prefill call takes: rows of train.seq_len + 1 positions "
                                      "each, at least one row. The rollout's activations (and expert-parallel "
                                      "exchange buffers) are sized for one call, so this bounds them; more calls "
                                      "cost little. 0: every row at once (with rollout.expert_parallel, 1 / ranks "
                                      "of the rows).",
                                      &Config::rollout, &RolloutConfig::prefill_tokens),
                                0),
                       kMaxInt));
  s.push_back(field("rollout", "expert_parallel", VK::boolean,
                    "Mixture-of-experts models with fsdp.expert_parallel: the rollout keeps each rank's own "
                    "experts (as training does) instead of gathering every expert, and each MoE layer sends "
                    "the routed tokens to their experts' ranks and back; the ranks decode in lockstep. The "
                    "rollout's weights shrink from the whole model to the dense part and 1 / ranks of the "
                    "experts; completions equal whole-expert decoding's to rounding.",
                    &Config::rollout, &RolloutConfig::expert_parallel));

  s.push_back(field("rl", "task", VK::choice,
                    "Verifiable task: `sort`, `add`, `reverse`, `jsonl`, or `text` (prompts of a JSONL dataset, "
                    "rendered with the model's chat template and tokenizer, scored by `rl.reward`).",
                    &Config::rl, &RlConfig::task));
  s.back().choices = {"sort", "add", "reverse", "jsonl", "text"};
  s.push_back(with_max(with_min(field("rl", "difficulty", VK::integer,
                                      "Task difficulty: digits to sort, digits per operand, or string length.",
                                      &Config::rl, &RlConfig::difficulty),
                                1),
                       kMaxInt));
  s.push_back(field("rl", "partial_credit", VK::boolean, "Reward a wrong answer by the fraction of it that is right.",
                    &Config::rl, &RlConfig::partial_credit));
  s.push_back(field("rl", "dataset", VK::string,
                    "The `jsonl` and `text` tasks' JSONL file (one example per line; see docs/text-rl.md).",
                    &Config::rl, &RlConfig::dataset));
  s.push_back(field("rl", "eval_dataset", VK::string,
                    "The `text` task's held-out JSONL split, evaluated every `rl.eval_interval` iterations.",
                    &Config::rl, &RlConfig::eval_dataset));
  s.push_back(non_empty(field("rl", "prompt_key", VK::string,
                              "The dataset field holding the prompt (a string; `messages` holds a whole chat).",
                              &Config::rl, &RlConfig::prompt_key)));
  s.push_back(non_empty(field("rl", "answer_key", VK::string, "The dataset field holding the reference answer.",
                              &Config::rl, &RlConfig::answer_key)));
  s.push_back(field("rl", "solution_key", VK::string,
                    "The dataset field holding a worked solution, the warm-up's demonstration (absent or \"\": "
                    "the answer).",
                    &Config::rl, &RlConfig::solution_key));
  s.push_back(field("rl", "system_prompt", VK::string, "A system message put before every prompt (\"\": none).",
                    &Config::rl, &RlConfig::system_prompt));
  s.push_back(field("rl", "chat_template", VK::boolean,
                    "Render prompts with the tokenizer's chat template (generation prompt added); false: the "
                    "prompt text as it is.",
                    &Config::rl, &RlConfig::chat_template));
  s.push_back(field("rl", "template_variables", VK::string,
                    "Extra chat-template variables as a JSON object, e.g. {\"enable_thinking\": false} (Qwen3).",
                    &Config::rl, &RlConfig::template_variables));
  s.back().check = [](const ConfigValue& v) -> std::string {
    const auto& text = std::get<std::string>(v);
    // The shape of a JSON object only; the text task parses it (nlohmann) and names any error.
    const auto b = text.find_first_not_of(" \t\r\n"), e = text.find_last_not_of(" \t\r\n");
    return b != std::string::npos && text[b] == '{' && text[e] == '}' ? "" : "must be a JSON object, e.g. {}";
  };
  s.push_back(with_max(with_min(field("rl", "max_prompt_tokens", VK::integer,
                                      "Prompts with more tokens are dropped (their count is printed); 0: train.seq_len "
                                      "+ 1 - rollout.max_new_tokens (at most model.max_seq_len - "
                                      "rollout.max_new_tokens).",
                                      &Config::rl, &RlConfig::max_prompt_tokens),
                                0),
                       kMaxInt));
  s.push_back(field("rl", "reward", VK::choice,
                    "The `text` task's reward: `math` (final answer, exact as numbers), `exact`, `regex` "
                    "(`rl.reward_pattern`'s capture group), `command` (`rl.reward_command`); `auto`: `math` for `text`, "
                    "each generated task's own.",
                    &Config::rl, &RlConfig::reward));
  s.back().choices = {"auto", "math", "exact", "regex", "command"};
  s.push_back(with_min(field("rl", "format_reward", VK::real,
                             "`math` and `regex`: the reward of a well-formed but wrong answer (in [0, 1)).",
                             &Config::rl, &RlConfig::format_reward),
                       0.0));
  s.back().check = [](const ConfigValue& v) -> std::string {
    return std::get<double>(v) < 1.0 ? "" : "must be below 1 (a correct answer scores 1)";
  };
  s.push_back(field("rl", "reward_pattern", VK::string,
                    "`regex`: a PCRE2 pattern whose first capture group, in its last match, is compared with the answer.",
                    &Config::rl, &RlConfig::reward_pattern));
  s.push_back(field("rl", "reward_command", VK::string_list,
                    "`command`: the reward process's argv, e.g. [\"python3\", \"my_reward.py\"]; it reads one JSON "
                    "request per line and answers {\"reward\": x} per line, optionally with \"pass\": true/false "
                    "(docs/text-rl.md).",
                    &Config::rl, &RlConfig::reward_command));
  s.push_back(with_min(field("rl", "reward_timeout_s", VK::real, "`command`: seconds one batch of requests may take.",
                             &Config::rl, &RlConfig::reward_timeout_s),
                       0.0, true));
  s.push_back(with_max(with_min(field("rl", "eval_interval", VK::integer,
                                      "Evaluate on `rl.eval_dataset` every this many iterations, at the start and at "
                                      "the end; 0: never.",
                                      &Config::rl, &RlConfig::eval_interval),
                                0),
                       kMaxInt));
  s.push_back(with_max(with_min(field("rl", "eval_samples", VK::integer,
                                      "Sampled completions per eval prompt for pass@k and mean@k (pass@1 is greedy; "
                                      "so k >= 2: a sampled pass@1 would take the greedy one's name).",
                                      &Config::rl, &RlConfig::eval_samples),
                                2),
                       1024));
  s.push_back(with_max(with_min(field("rl", "eos_id", VK::integer,
                                      "Token id that ends a completion; -1: the byte tokenizer's EOS (257).",
                                      &Config::rl, &RlConfig::eos_id),
                                -1),
                       kMaxInt));
  auto rl_count = [&](const char* key, std::int64_t RlConfig::*member, double min, const char* meaning) {
    s.push_back(with_max(with_min(field("rl", key, VK::integer, meaning, &Config::rl, member), min), kMaxInt));
  };
  rl_count("prompts_per_iteration", &RlConfig::prompts_per_iteration, 1, "Prompts of one rollout, over all ranks.");
  rl_count("samples_per_prompt", &RlConfig::samples_per_prompt, 1, "Completions per prompt (the GRPO group).");
  rl_count("minibatches", &RlConfig::minibatches, 1, "Optimizer steps per rollout.");
  rl_count("sft_steps", &RlConfig::sft_steps, 0, "Supervised warm-up steps before RL.");
  rl_count("sft_batch_size", &RlConfig::sft_batch_size, 1, "Demonstrations per warm-up step, over all ranks.");
  s.push_back(with_min(field("rl", "sft_lr", VK::real, "Peak learning rate of the warm-up; 0: optim.lr.",
                             &Config::rl, &RlConfig::sft_lr),
                       0.0));
  s.push_back(choice("rl", "advantage_estimator",
                     "How advantages are estimated: `grpo` ((r - group mean) / group std), `dr_grpo` (r - group "
                     "mean, with `rl.loss_aggregation = \"constant\"`), `rloo` (r - mean of the group's other "
                     "samples) or `reinforce_plus_plus` (per-token returns whitened over the batch).",
                     &Config::rl, &RlConfig::advantage_estimator,
                     std::vector<std::string>{"grpo", "dr_grpo", "rloo", "reinforce_plus_plus"}));
  s.push_back(field("rl", "scale_by_std", VK::boolean,
                    "`grpo`: divide advantages by the group's standard deviation.", &Config::rl,
                    &RlConfig::scale_by_std));
  s.push_back(with_min(field("rl", "adv_eps", VK::real, "Added to the group standard deviation.", &Config::rl,
                             &RlConfig::adv_eps),
                       0.0, true));
  s.push_back(with_max(with_min(field("rl", "clip_low", VK::real, "Lower clip range: ratio >= 1 - clip_low.",
                                      &Config::rl, &RlConfig::clip_low),
                                0.0),
                       1.0));
  s.push_back(with_min(field("rl", "clip_high", VK::real, "Upper clip range: ratio <= 1 + clip_high.", &Config::rl,
                             &RlConfig::clip_high),
                       0.0));
  s.push_back(choice("rl", "loss_aggregation",
                     "Average the loss over the minibatch's tokens (`token`), per completion (`sequence`), or "
                     "divide its sum by completions x `rl.loss_tokens` (`constant`).",
                     &Config::rl, &RlConfig::loss_aggregation,
                     std::vector<std::string>{"token", "sequence", "constant"}));
  s.push_back(with_max(with_min(field("rl", "loss_tokens", VK::integer,
                                      "`constant` aggregation: the tokens per completion it divides by; 0: "
                                      "rollout.max_new_tokens.",
                                      &Config::rl, &RlConfig::loss_tokens),
                                0),
                       kMaxInt));
  s.push_back(choice("rl", "old_logp",
                     "Old log-probabilities: `recompute` at the start of the train phase, or `rollout` (the "
                     "sampler's).",
                     &Config::rl, &RlConfig::old_logp, std::vector<std::string>{"recompute", "rollout"}));
  s.push_back(with_min(field("rl", "kl_coef", VK::real, "Weight of the KL penalty to the frozen reference policy.",
                             &Config::rl, &RlConfig::kl_coef),
                       0.0));
  s.push_back(choice("rl", "kl_estimator",
                     "Estimator of the KL to the reference: `k1` (log-ratio), `k2` (half its square), `k3` "
                     "(e^-d + d - 1) or `low_var_kl` (k3 clamped as verl does).",
                     &Config::rl, &RlConfig::kl_estimator, std::vector<std::string>{"k1", "k2", "k3", "low_var_kl"}));
  s.push_back(field("rl", "kl_in_reward", VK::boolean,
                    "Fold the KL into the reward as a per-token penalty instead of adding it to the loss.",
                    &Config::rl, &RlConfig::kl_in_reward));
  s.push_back(field("rl", "dynamic_sampling", VK::boolean,
                    "Drop groups whose rewards are all equal and draw more prompts until the batch is full.",
                    &Config::rl, &RlConfig::dynamic_sampling));
  s.push_back(with_max(with_min(field("rl", "max_sampling_rounds", VK::integer,
                                      "`dynamic_sampling`: most rounds of rl.prompts_per_iteration prompts drawn "
                                      "per iteration.",
                                      &Config::rl, &RlConfig::max_sampling_rounds),
                                1),
                       1024));
  s.push_back(choice("rl", "overlong",
                     "Completions cut off at rollout.max_new_tokens: trained as any other (`none`), given no "
                     "loss (`filter`), or penalised over the last `rl.overlong_buffer` tokens (`soft`).",
                     &Config::rl, &RlConfig::overlong, std::vector<std::string>{"none", "filter", "soft"}));
  s.push_back(with_max(with_min(field("rl", "overlong_buffer", VK::integer,
                                      "`soft`: tokens before rollout.max_new_tokens over which the penalty falls "
                                      "from 0 to -1.",
                                      &Config::rl, &RlConfig::overlong_buffer),
                                0),
                       kMaxInt));
  s.push_back(with_min(field("rl", "tis_cap", VK::real,
                             "Truncated importance sampling: weight each token by min(cap, training / sampler "
                             "probability); 0: off.",
                             &Config::rl, &RlConfig::tis_cap),
                       0.0));
  s.push_back(with_min(field("rl", "entropy_coef", VK::real,
                             "Weight of the entropy bonus in the loss (loss -= coef x token entropy).", &Config::rl,
                             &RlConfig::entropy_coef),
                       0.0));

  s.push_back(with_max(with_min(field("checkpoint", "interval", VK::integer,
                                      "Save every this many iterations; 0: only at the end and on SIGUSR1/SIGTERM.",
                                      &Config::checkpoint, &CheckpointConfig::interval),
                                0),
                       kMaxInt));
  s.push_back(with_max(with_min(field("checkpoint", "keep_last", VK::integer, "Newest checkpoints kept.",
                                      &Config::checkpoint, &CheckpointConfig::keep_last),
                                1),
                       kMaxInt));
  s.push_back(with_max(with_min(field("checkpoint", "keep_every", VK::integer,
                                      "Also keep checkpoints whose iteration is a multiple of this; 0: none.",
                                      &Config::checkpoint, &CheckpointConfig::keep_every),
                                0),
                       kMaxInt));
  s.push_back(field("checkpoint", "verify", VK::boolean, "Check every tensor's checksum when loading.",
                    &Config::checkpoint, &CheckpointConfig::verify));
  s.push_back(field("checkpoint", "async", VK::boolean,
                    "Write periodic checkpoints in the background: training pauses only to copy the state to "
                    "host memory (page-locked on GPUs; as much host memory as the rank's optimizer state), then "
                    "the next iterations run while a thread writes and commits the file. The final save, and a "
                    "save on a signal, wait for it.",
                    &Config::checkpoint, &CheckpointConfig::async));
  s.push_back(with_min(field("checkpoint", "timeout_s", VK::real,
                             "Seconds one checkpoint save (or the wait for a background one) may take before the "
                             "job is aborted as hung; 0: comm.timeout_s. A save writes the whole state, which on "
                             "slow storage can take longer than an iteration's collectives.",
                             &Config::checkpoint, &CheckpointConfig::timeout_s),
                       0.0));

  s.push_back(choice("comm", "backend",
                     "Collectives backend: `nccl` (GPU builds), `mpi` (CPU builds, host "
                     "buffers) or `auto` (the one this build supports).",
                     &Config::comm, &CommConfig::backend,
                     std::vector<std::string>{"auto", "nccl", "mpi"}));
  s.push_back(with_min(field("comm", "timeout_s", VK::real,
                             "Seconds a collective may take before the job is aborted as hung "
                             "(a dead or stuck peer).",
                             &Config::comm, &CommConfig::timeout_s),
                       0.0, /*exclusive=*/true));
  s.push_back(choice("comm", "gather_engine",
                     "What moves the all-gathers into the phase arena (the weights' gathers): `copy` (the "
                     "GPUs' copy engines, so that no communication kernel takes SMs or memory bandwidth from "
                     "the compute it overlaps; a GPU build with NCCL 2.28 or later), `sm` (NCCL's kernels) "
                     "or `auto` (`copy` where it can run, else `sm`).",
                     &Config::comm, &CommConfig::gather_engine, std::vector<std::string>{"auto", "sm", "copy"}));

  s.push_back(with_min(field("debug", "fail_rank", VK::integer,
                             "Fault injection: this rank raises a fatal error after start-up, "
                             "to test that the whole job stops. -1: off.",
                             &Config::debug, &DebugConfig::fail_rank),
                       -1));
  s.push_back(choice("debug", "fail_mode",
                     "How `fail_rank` fails: `error` (a fatal error), `hang` (it stops taking "
                     "part in collectives; its peers must abort after `comm.timeout_s`) or `exception` (an "
                     "exception no code handles, as a bug or a library's error would be).",
                     &Config::debug, &DebugConfig::fail_mode,
                     std::vector<std::string>{"error", "hang", "exception"}));
  s.push_back(field("debug", "check_released", VK::boolean,
                    "Poison released gather slots with NaN and check each unit's generation counter "
                    "on use, so a schedule that computes on released weights stops with an error.",
                    &Config::debug, &DebugConfig::check_released));
  s.push_back(with_max(with_min(field("debug", "save_pause_ms", VK::integer,
                                      "Fault injection: pause this long between tensors while saving a checkpoint "
                                      "(crash tests kill the job inside a save).",
                                      &Config::debug, &DebugConfig::save_pause_ms),
                                0),
                       kMaxInt));
  s.push_back(choice("debug", "fail_io",
                     "Fault injection: an I/O step fails as a full disk would, once `fail_io_iteration` "
                     "iterations are done: `metrics` (rank 0's metrics record), `commit` (rank 0 committing a "
                     "checkpoint), `write` (the last rank writing a checkpoint's first tensor, while the others "
                     "write theirs), `none`.",
                     &Config::debug, &DebugConfig::fail_io,
                     std::vector<std::string>{"none", "metrics", "commit", "write"}));
  s.push_back(with_min(field("debug", "fail_io_iteration", VK::integer,
                             "The iteration count at which `fail_io` fails (1: after the first iteration).",
                             &Config::debug, &DebugConfig::fail_io_iteration),
                       0));
  return s;
}

}  // namespace

const std::vector<KeyDef>& config_schema() {
  static const std::vector<KeyDef> schema = build_schema();
  return schema;
}

const KeyDef* find_key(const std::string& section, const std::string& key) {
  for (const auto& d : config_schema())
    if (d.section == section && d.key == key) return &d;
  return nullptr;
}

const char* kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::boolean: return "boolean";
    case ValueKind::integer: return "integer";
    case ValueKind::real: return "float";
    case ValueKind::string: return "string";
    case ValueKind::choice: return "enum";
    case ValueKind::string_list: return "array of strings";
  }
  return "?";
}

std::string to_toml_literal(const ConfigValue& value) {
  if (const auto* list = std::get_if<std::vector<std::string>>(&value)) {
    std::string out = "[";
    for (std::size_t i = 0; i < list->size(); ++i) out += (i ? ", " : "") + to_toml_literal(ConfigValue((*list)[i]));
    return out + "]";
  }
  std::ostringstream os;
  if (auto b = std::get_if<bool>(&value)) {
    os << (*b ? "true" : "false");
  } else if (auto i = std::get_if<std::int64_t>(&value)) {
    os << *i;
  } else if (auto d = std::get_if<double>(&value)) {
    // Shortest text that reads back to the same double, made a TOML float ("300" -> "300.0").
    std::string text = fmt::format("{}", *d);
    if (text.find_first_of(".en") == std::string::npos) text += ".0";
    os << text;
  } else {
    // Basic (double-quoted) TOML string, escaped, so every reader and message looks alike.
    os << '"';
    for (unsigned char ch : std::get<std::string>(value)) {
      if (ch == '"' || ch == '\\') {
        os << '\\' << ch;
      } else if (ch < 0x20 || ch == 0x7f) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", ch);
        os << buf;
      } else {
        os << ch;
      }
    }
    os << '"';
  }
  return os.str();
}

BuildInfo this_build() {
  BuildInfo b;
#if defined(SHARDRL_ENABLE_CUDA)
  b.has_cuda = true;
#endif
  b.has_cudnn = kernels::cudnn_attention_available();
  return b;
}

}  // namespace shardrl
