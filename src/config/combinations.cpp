// Settings that are each valid but not together, or not on this build (the whole-config checks
// of load_config, once every key has parsed).
#include "config/combinations.hpp"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/model_presets.hpp"
#include "config/schema.hpp"
#include "kernels/flash_attention.hpp"
#include "rl/task_difficulty.hpp"
#include "rl/tokenizer.hpp"

namespace shardrl {
namespace {

// The RL objective's keys (rl/loss_choices.hpp): a key that the chosen estimator, aggregation or
// mode would not read is an error, not silently ignored.
template <class Where>
void check_objective_choices(const Config& c, const Where& where, std::vector<std::string>& errors) {
  const RlConfig d;
  const RlConfig& rl = c.rl;
  auto error = [&](const char* key, const std::string& text) { errors.push_back(fmt::format("{}: {}", where(key), text)); };
  if (rl.advantage_estimator != AdvantageEstimator::grpo && rl.scale_by_std != d.scale_by_std)
    error("rl.scale_by_std", "rl.scale_by_std is read only by rl.advantage_estimator = \"grpo\" (dr_grpo is grpo "
                             "without the division)");
  if (rl.advantage_estimator == AdvantageEstimator::dr_grpo && rl.loss_aggregation != LossAggregation::constant)
    error("rl.advantage_estimator", "rl.advantage_estimator = \"dr_grpo\" normalises the loss by a constant number "
                                    "of tokens: set rl.loss_aggregation = \"constant\" (and rl.loss_tokens, or "
                                    "leave it 0 for rollout.max_new_tokens)");
  if (rl.loss_tokens != d.loss_tokens && rl.loss_aggregation != LossAggregation::constant)
    error("rl.loss_tokens", "rl.loss_tokens is read only by rl.loss_aggregation = \"constant\"");
  if (rl.kl_coef == 0) {
    if (rl.kl_estimator != d.kl_estimator)
      error("rl.kl_estimator", "rl.kl_estimator is read only when rl.kl_coef > 0");
    if (rl.kl_in_reward) error("rl.kl_in_reward", "rl.kl_in_reward is read only when rl.kl_coef > 0");
  }
  if (rl.advantage_estimator == AdvantageEstimator::reinforce_plus_plus && rl.kl_coef > 0 && !rl.kl_in_reward)
    error("rl.advantage_estimator", "rl.advantage_estimator = \"reinforce_plus_plus\" takes the KL in the reward: "
                                    "set rl.kl_in_reward = true");
  if (!rl.dynamic_sampling && rl.max_sampling_rounds != d.max_sampling_rounds)
    error("rl.max_sampling_rounds", "rl.max_sampling_rounds is read only when rl.dynamic_sampling = true");
  if (rl.dynamic_sampling && rl.samples_per_prompt < 2)
    error("rl.dynamic_sampling", "rl.dynamic_sampling keeps groups whose rewards differ, which needs "
                                 "rl.samples_per_prompt >= 2");
  if (rl.overlong != Overlong::soft && rl.overlong_buffer != d.overlong_buffer)
    error("rl.overlong_buffer", "rl.overlong_buffer is read only by rl.overlong = \"soft\"");
  if (rl.overlong == Overlong::soft && (rl.overlong_buffer <= 0 || rl.overlong_buffer > c.rollout.max_new_tokens))
    error("rl.overlong_buffer", fmt::format("rl.overlong = \"soft\" needs 0 < rl.overlong_buffer <= "
                                            "rollout.max_new_tokens = {} (now {})",
                                            c.rollout.max_new_tokens, rl.overlong_buffer));
  if (rl.tis_cap > 0 && rl.old_logp == OldLogp::rollout)
    error("rl.tis_cap", "rl.tis_cap weighs tokens by the training forward's probability over the sampler's, which "
                        "needs rl.old_logp = \"recompute\" (with \"rollout\" the two are the same numbers)");
}

// Keys that another setting of `c` leaves unread: whether each is set (not its default), whether
// `c` leaves it unread, and the setting that does.
struct UnreadRule {
  const char* key;
  bool set, unread;
  const char* because;
};
std::vector<UnreadRule> unread_rules(const Config& c) {
  const bool text = c.rl.task == "text", plain_rope = c.model.rope_scaling_factor == 0;
  const RlConfig rl;
  const RolloutConfig rollout;
  const ModelConfig model;
  const DebugConfig debug;
  const LoraConfig lora;
  return {
      {"model.init_std", c.model.init_std != model.init_std, !c.model.init_from.empty(),
       "model.init_from (its weights replace every initialised one)"},
      {"lora.init", c.lora.init != lora.init, !c.lora.init_from.empty(),
       "lora.init_from (its adapters replace the initialised ones)"},
      {"optim.decay_norms_and_embeddings", c.optim.decay_norms_and_embeddings != OptimConfig{}.decay_norms_and_embeddings,
       c.lora.rank > 0, "lora.rank > 0 (only the adapters train)"},
      {"model.cudnn_workspace_mib", c.model.cudnn_workspace_mib != model.cudnn_workspace_mib,
       c.model.attention == AttentionChoice::gemm || c.model.attention == AttentionChoice::flash,
       "model.attention = \"gemm\" or \"flash\" (it bounds cuDNN's attention)"},
      {"rollout.kv_cache_tokens", c.rollout.kv_cache_tokens != rollout.kv_cache_tokens,
       c.rollout.engine == RolloutEngine::static_batch, "rollout.engine = \"static\" (it sizes the paged engine's pool)"},
      {"rl.reward_timeout_s", c.rl.reward_timeout_s != rl.reward_timeout_s, text && c.rl.reward != "command",
       "rl.reward other than \"command\""},
      {"rl.adv_eps", c.rl.adv_eps != rl.adv_eps,
       c.rl.advantage_estimator != AdvantageEstimator::grpo || !c.rl.scale_by_std,
       "anything but rl.advantage_estimator = \"grpo\" with rl.scale_by_std = true (it guards the division by the "
       "group's standard deviation)"},
      {"model.rope_low_freq_factor", c.model.rope_low_freq_factor != model.rope_low_freq_factor, plain_rope,
       "model.rope_scaling_factor = 0 (plain RoPE)"},
      {"model.rope_high_freq_factor", c.model.rope_high_freq_factor != model.rope_high_freq_factor, plain_rope,
       "model.rope_scaling_factor = 0 (plain RoPE)"},
      {"model.rope_original_max_position", c.model.rope_original_max_position != model.rope_original_max_position,
       plain_rope, "model.rope_scaling_factor = 0 (plain RoPE)"},
      {"rl.difficulty", c.rl.difficulty != rl.difficulty, c.rl.task == "text" || c.rl.task == "jsonl",
       "a task whose examples come from rl.dataset"},
      {"debug.fail_mode", c.debug.fail_mode != debug.fail_mode, c.debug.fail_rank < 0,
       "debug.fail_rank = -1 (no rank fails)"},
      {"debug.fail_io_iteration", c.debug.fail_io_iteration != debug.fail_io_iteration, c.debug.fail_io == FailIo::none,
       "debug.fail_io = \"none\""},
  };
}

// Settings that would have no effect, each valid alone: keys that another setting leaves unread,
// and an objective that trains nothing. An error naming why, not a silent no-op. (Not for a
// saved config: its run is done, and a record must read back on later versions.)
template <class Where>
void check_settings_without_effect(const Config& c, const Where& where, std::vector<std::string>& errors) {
  // GRPO, Dr. GRPO and RLOO compare a prompt's samples with each other: one sample a prompt
  // gives every advantage 0 and trains nothing (REINFORCE++ whitens over the whole batch).
  if (c.rl.advantage_estimator != AdvantageEstimator::reinforce_plus_plus && c.rl.samples_per_prompt < 2 &&
      !c.rl.dynamic_sampling)   // which says so itself
    errors.push_back(fmt::format(
        "{}: rl.samples_per_prompt = 1: rl.advantage_estimator = \"grpo\", \"dr_grpo\" and \"rloo\" compare each "
        "prompt's samples with each other, so every advantage would be 0 and nothing trained (use >= 2, or "
        "\"reinforce_plus_plus\", which whitens over the batch)",
        where("rl.samples_per_prompt")));
  // (Not the warm-up's or the evaluation's keys once rl.sft_steps or rl.eval_interval turn those
  // off, e.g. with --set over a config that tunes them: turning a phase off says what it means.)
  for (const UnreadRule& r : unread_rules(c))
    if (r.set && r.unread) errors.push_back(fmt::format("{}: {} is not read with {}", where(r.key), r.key, r.because));
}

}  // namespace

std::vector<std::string> unread_keys(const Config& c) {
  std::vector<std::string> keys;
  for (const UnreadRule& r : unread_rules(c))
    if (r.unread) keys.push_back(r.key);
  return keys;
}

void check_combinations(const BuildInfo& build, LoadedConfig& out) {
  const Config& c = out.config;
  auto where = [&](const std::string& key) { return out.origin.at(key); };
  // Where a problem of two keys comes from: each one the config sets (a default is no one's doing).
  auto where_both = [&](const std::string& a, const std::string& b) {
    const std::string& wa = out.origin.at(a);
    const std::string& wb = out.origin.at(b);
    if (wb == "default" || wb == wa) return wa;
    if (wa == "default") return wb;
    return wa + " and " + wb;
  };
  // A named preset decides the shape: a shape key given beside it would be silently ignored.
  if (c.model.preset != "custom") {
    for (const auto& key : model_shape_keys()) {
      const std::string name = "model." + key;
      if (out.origin.at(name) != "default")
        out.errors.push_back(fmt::format(
            "{}: {} cannot be set with model.preset = \"{}\" (the preset fixes the shape; use "
            "preset = \"custom\" to give the shape keys)",
            where(name), name, c.model.preset));
    }
  }
  // MoE settings other than the defaults on a dense model would be silently ignored. (A
  // resolved config writes every key, defaults included, and must read back.)
  if (c.model.n_experts == 0) {
    const ModelConfig d;
    const std::pair<const char*, bool> changed[] = {
        {"model.top_k", c.model.top_k != d.top_k},
        {"model.d_ff_expert", c.model.d_ff_expert != d.d_ff_expert},
        {"model.moe_every", c.model.moe_every != d.moe_every},
        {"model.shared_expert", c.model.shared_expert != d.shared_expert},
        {"model.aux_loss_coef", c.model.aux_loss_coef != d.aux_loss_coef},
        {"model.moe_impl", c.model.moe_impl != d.moe_impl},
        {"fsdp.expert_parallel", c.fsdp.expert_parallel}};
    for (const auto& [key, differs] : changed)
      if (differs)
        out.errors.push_back(fmt::format("{}: {} applies to mixture-of-experts layers, but model.n_experts = 0",
                                         where(key), key));
  }
  if (c.lora.rank > 0) {
    const std::size_t errors_before_targets = out.errors.size();
    if (c.lora.targets.empty())
      out.errors.push_back(fmt::format("{}: lora.rank = {} needs at least one of lora.targets", where("lora.targets"),
                                       c.lora.rank));
    // An MoE layer's MLP stays frozen (adapters on experts are not built): on a model whose every
    // layer is MoE, an MLP target would adapt nothing.
    const ModelShape lora_model = resolve_model_shape(c.model);   // a preset's shape too
    if (lora_model.n_experts == 0 &&
        std::find(c.lora.targets.begin(), c.lora.targets.end(), "experts") != c.lora.targets.end())
      out.errors.push_back(fmt::format("{}: lora.targets has \"experts\", which applies to mixture-of-experts "
                                       "models, but model.n_experts = 0",
                                       where("lora.targets")));
    if (lora_model.n_experts > 0 && lora_model.moe_every == 1)
      for (const std::string& t : c.lora.targets)
        if (t == "gate" || t == "up" || t == "down") {
          out.errors.push_back(fmt::format("{}: lora.targets has \"{}\", but every layer of this model is "
                                           "mixture-of-experts, which has no dense MLP: \"experts\" adapts every "
                                           "expert's gate, up and down projections",
                                           where("lora.targets"), t));
          break;
        }
    // Targets that match no layer of this shape ("experts" where no layer is mixture-of-experts,
    // moe_every past n_layers): the job ran and trained nothing.
    if (errors_before_targets == out.errors.size() && job_model_shape(c).adapter_count() == 0)
      out.errors.push_back(fmt::format("{}: lora.targets adapt no layer of this model ({} layers, mixture-of-experts "
                                       "every {} with model.n_experts = {}): the job would train nothing",
                                       where("lora.targets"), lora_model.n_layers, lora_model.moe_every,
                                       lora_model.n_experts));
    if (!c.lora.init_from.empty() && c.model.init_from.empty())
      out.errors.push_back(fmt::format("{}: lora.init_from = \"{}\" continues adapters trained over a pretrained base: "
                                       "set model.init_from to that base's directory",
                                       where("lora.init_from"), c.lora.init_from));
  } else {
    // The adapters' settings without adapters would be silently ignored.
    const LoraConfig d;
    const std::pair<const char*, bool> lora_only[] = {{"lora.alpha", c.lora.alpha != d.alpha},
                                                      {"lora.targets", c.lora.targets != d.targets},
                                                      {"lora.init", c.lora.init != d.init},
                                                      {"lora.init_from", c.lora.init_from != d.init_from}};
    for (const auto& [key, differs] : lora_only)
      if (differs) out.errors.push_back(fmt::format("{}: {} applies to lora.rank > 0", where(key), key));
  }
  const ModelShape shape = resolve_model_shape(c.model);
  for (const auto& [key, problem] : shape_problems(shape))
    out.errors.push_back(fmt::format("{}: {}", where(key), problem));
  if (c.train.seq_len > shape.max_seq_len)
    out.errors.push_back(fmt::format("{}: train.seq_len = {} exceeds the model's max_seq_len = {}",
                                     where_both("train.seq_len", "model.max_seq_len"), c.train.seq_len,
                                     shape.max_seq_len));
  // A prompt has at least one token: a completion of max_new_tokens needs seq_len >= that many
  // positions after it (in 64 bits: the sum of the two must not wrap).
  if (c.rollout.max_new_tokens > c.train.seq_len)
    out.errors.push_back(fmt::format("{}: rollout.max_new_tokens = {} does not fit train.seq_len = {} (a prompt of one "
                                     "token and the completion need train.seq_len >= rollout.max_new_tokens)",
                                     where_both("rollout.max_new_tokens", "train.seq_len"), c.rollout.max_new_tokens,
                                     c.train.seq_len));
  // The generator holds a prompt and its completion within the model's max_seq_len.
  else if (c.rollout.max_new_tokens >= shape.max_seq_len)
    out.errors.push_back(fmt::format("{}: rollout.max_new_tokens = {} leaves no room for a prompt within the model's "
                                     "max_seq_len = {} (at most {})",
                                     where_both("rollout.max_new_tokens", "model.max_seq_len"),
                                     c.rollout.max_new_tokens, shape.max_seq_len, shape.max_seq_len - 1));
  // A prompt kept must leave room for a whole completion (the job's own limit when 0): one longer
  // stopped the job at its first rollout, blaming train.seq_len.
  else if (const std::int64_t room = std::min<std::int64_t>(c.train.seq_len + 1, shape.max_seq_len) -
                                      c.rollout.max_new_tokens;
           c.rl.max_prompt_tokens > room)
    out.errors.push_back(fmt::format("{}: rl.max_prompt_tokens = {} leaves no room for a completion of "
                                     "rollout.max_new_tokens = {} within train.seq_len + 1 = {} (model.max_seq_len "
                                     "{}): at most {}, or 0 for that",
                                     where("rl.max_prompt_tokens"), c.rl.max_prompt_tokens, c.rollout.max_new_tokens,
                                     c.train.seq_len + 1, shape.max_seq_len, room));
  if (c.optim.schedule == LrSchedule::cosine && c.optim.decay_steps == 0)
    out.errors.push_back(fmt::format("{}: optim.schedule = \"cosine\" needs optim.decay_steps > 0",
                                     where("optim.schedule")));
  const OptimConfig optim_defaults;
  if (c.optim.schedule == LrSchedule::constant)
    for (const auto& [key, set] : {std::pair{"optim.decay_steps", c.optim.decay_steps != optim_defaults.decay_steps},
                                   std::pair{"optim.min_lr_ratio", c.optim.min_lr_ratio != optim_defaults.min_lr_ratio}})
      if (set)
        out.errors.push_back(fmt::format("{}: {} is read only by optim.schedule = \"cosine\" (the schedule is "
                                         "\"constant\")",
                                         where(key), key));
  const bool reads_dataset = c.rl.task == "jsonl" || c.rl.task == "text";
  if (reads_dataset && c.rl.dataset.empty())
    out.errors.push_back(fmt::format("{}: rl.task = \"{}\" needs rl.dataset (a JSONL file of examples)",
                                     where("rl.task"), c.rl.task));
  if (!reads_dataset && !c.rl.dataset.empty())
    out.errors.push_back(fmt::format("{}: rl.dataset is read only by rl.task = \"jsonl\" or \"text\", not \"{}\"",
                                     where("rl.dataset"), c.rl.task));
  if (c.rl.task != "text") {
    // The text task's keys: set for another task, they would be ignored.
    const RlConfig d;
    const std::pair<const char*, bool> text_only[] = {
        {"rl.eval_dataset", !c.rl.eval_dataset.empty()}, {"rl.reward", c.rl.reward != d.reward},
        {"rl.system_prompt", !c.rl.system_prompt.empty()}, {"rl.format_reward", c.rl.format_reward != d.format_reward},
        {"rl.reward_pattern", !c.rl.reward_pattern.empty()}, {"rl.reward_command", !c.rl.reward_command.empty()},
        {"rl.eval_interval", c.rl.eval_interval != d.eval_interval}, {"model.tokenizer", !c.model.tokenizer.empty()},
        {"rl.eval_samples", c.rl.eval_samples != d.eval_samples}, {"rl.prompt_key", c.rl.prompt_key != d.prompt_key},
        {"rl.answer_key", c.rl.answer_key != d.answer_key}, {"rl.solution_key", c.rl.solution_key != d.solution_key},
        {"rl.chat_template", c.rl.chat_template != d.chat_template},
        {"rl.template_variables", c.rl.template_variables != d.template_variables},
        {"rl.max_prompt_tokens", c.rl.max_prompt_tokens != d.max_prompt_tokens},
        {"rl.reward_timeout_s", c.rl.reward_timeout_s != d.reward_timeout_s}};
    for (const auto& [key, differs] : text_only)
      if (differs)
        out.errors.push_back(fmt::format("{}: {} applies to rl.task = \"text\", not \"{}\"", where(key), key,
                                         c.rl.task));
  } else {
    if (c.model.tokenizer.empty() && c.model.init_from.empty())
      out.errors.push_back(fmt::format("{}: rl.task = \"text\" needs the model's tokenizer: model.tokenizer or "
                                       "model.init_from (a directory with tokenizer.json)",
                                       where("rl.task")));
    if (c.rl.eval_interval > 0 && c.rl.eval_dataset.empty())
      out.errors.push_back(fmt::format("{}: rl.eval_interval = {} needs rl.eval_dataset", where("rl.eval_interval"),
                                       c.rl.eval_interval));
    // An eval split without an interval would be read and never evaluated.
    if (c.rl.eval_interval == 0 && !c.rl.eval_dataset.empty())
      out.errors.push_back(fmt::format("{}: rl.eval_dataset is evaluated every rl.eval_interval iterations, which is "
                                       "0 (off): set rl.eval_interval",
                                       where("rl.eval_dataset")));
    // A reward command scores every completion itself: the math/regex format reward is not its.
    if (c.rl.reward == "command" && c.rl.format_reward != RlConfig{}.format_reward)
      out.errors.push_back(fmt::format("{}: rl.format_reward applies to rl.reward = \"math\" or \"regex\"; a "
                                       "reward command gives every reward itself",
                                       where("rl.format_reward")));
    if (c.rl.reward == "regex" && c.rl.reward_pattern.empty())
      out.errors.push_back(fmt::format("{}: rl.reward = \"regex\" needs rl.reward_pattern", where("rl.reward")));
    if (c.rl.reward != "regex" && !c.rl.reward_pattern.empty())
      out.errors.push_back(fmt::format("{}: rl.reward_pattern is read only by rl.reward = \"regex\"",
                                       where("rl.reward_pattern")));
    if (c.rl.reward == "command" && c.rl.reward_command.empty())
      out.errors.push_back(fmt::format("{}: rl.reward = \"command\" needs rl.reward_command (the process's argv)",
                                       where("rl.reward")));
    if (c.rl.reward != "command" && !c.rl.reward_command.empty())
      out.errors.push_back(fmt::format("{}: rl.reward_command is read only by rl.reward = \"command\"",
                                       where("rl.reward_command")));
    // A rank's wait for its reward command is progress to its own watchdog, but its peers wait
    // for it in a collective, where they see none: a batch that waits longer than comm.timeout_s
    // would end the job on them (exit 1, "a peer rank failed or is stuck") instead of the reward
    // command's own error.
    if (c.rl.reward == "command" && c.rl.reward_timeout_s >= c.comm.timeout_s)
      out.errors.push_back(fmt::format(
          "{}: rl.reward_timeout_s = {:g} must be shorter than comm.timeout_s = {:g}: the other ranks wait for a "
          "rank's scoring in a collective bounded by comm.timeout_s (raise comm.timeout_s for a slow reward command)",
          where(out.origin.at("rl.reward_timeout_s") != "default" ? "rl.reward_timeout_s" : "comm.timeout_s"),
          c.rl.reward_timeout_s, c.comm.timeout_s));
  }
  if (const auto range = difficulty_range(c.rl.task);
      range && (c.rl.difficulty < range->min || c.rl.difficulty > range->max))
    out.errors.push_back(fmt::format("{}: rl.difficulty = {} is out of range for rl.task = \"{}\" (allowed {}..{})",
                                     where("rl.difficulty"), c.rl.difficulty, c.rl.task, range->min, range->max));
  if ((c.rl.task == "jsonl" || c.rl.task == "text") && c.rl.partial_credit)
    out.errors.push_back(fmt::format("{}: rl.partial_credit applies to the generated tasks; rl.task = \"{}\" rewards "
                                     "{}",
                                     where("rl.partial_credit"), c.rl.task,
                                     c.rl.task == "jsonl" ? "exact matches only" : "by rl.reward"));
  if (c.rl.task == "text" && c.rl.reward == "exact" && c.rl.format_reward != RlConfig{}.format_reward)
    out.errors.push_back(fmt::format("{}: rl.format_reward applies to rl.reward = \"math\" or \"regex\"; \"exact\" "
                                     "scores 1 or 0",
                                     where("rl.format_reward")));
  // The generated tasks speak the byte tokenizer (rl/tokenizer.hpp): ids 0-255, BOS, EOS and PAD.
  if ((c.rl.task == "sort" || c.rl.task == "add" || c.rl.task == "reverse") &&
      shape.vocab_size < tokenizer::kVocabSize)
    out.errors.push_back(fmt::format("{}: model.vocab_size = {} is too small for rl.task = \"{}\", whose byte "
                                     "tokenizer uses ids up to {} (model.vocab_size >= {})",
                                     where("model.vocab_size"), shape.vocab_size, c.rl.task,
                                     tokenizer::kVocabSize - 1, tokenizer::kVocabSize));
  // Only the range is known here: whether a dataset needs rl.eos_id shows when the jsonl task reads it.
  if (c.rl.eos_id >= shape.vocab_size)
    out.errors.push_back(fmt::format("{}: rl.eos_id = {} is outside the model's vocabulary (model.vocab_size = {})",
                                     where("rl.eos_id"), c.rl.eos_id, shape.vocab_size));
  check_objective_choices(c, where, out.errors);
  if (!build.any && !build.saved_run) check_settings_without_effect(c, where, out.errors);
  if (c.rl.prompts_per_iteration % c.rl.minibatches != 0)
    out.errors.push_back(fmt::format("{}: rl.minibatches = {} does not divide rl.prompts_per_iteration = {}",
                                     where_both("rl.minibatches", "rl.prompts_per_iteration"), c.rl.minibatches,
                                     c.rl.prompts_per_iteration));
  if (c.comm.backend == CommBackend::nccl && !build.has_cuda)
    out.errors.push_back(fmt::format(
        "{}: comm.backend = \"nccl\" needs a CUDA build, but this shardrl was built for CPU "
        "(use \"auto\" or \"mpi\")",
        where("comm.backend")));
  if (c.comm.gather_engine == GatherEngine::copy && !build.has_cuda)
    out.errors.push_back(fmt::format(
        "{}: comm.gather_engine = \"copy\" runs the all-gathers on the GPUs' copy engines, but this shardrl "
        "was built for CPU (use \"auto\" or \"sm\")",
        where("comm.gather_engine")));
  if (shape.n_experts > 0 && c.train.cuda_graph == TrainGraph::full)
    out.errors.push_back(fmt::format("{}: train.cuda_graph = \"full\" cannot capture mixture-of-experts layers (their "
                                     "routing goes to the host to size the experts' GEMMs; use \"none\")",
                                     where("train.cuda_graph")));
  if (shape.n_experts > 0 && c.rollout.cuda_graph == RolloutGraph::decode)
    out.errors.push_back(fmt::format("{}: rollout.cuda_graph = \"decode\" cannot capture mixture-of-experts layers "
                                     "(their routing goes to the host to size the experts' GEMMs; use \"none\")",
                                     where("rollout.cuda_graph")));
  if (c.train.cuda_graph == TrainGraph::full && !build.has_cuda)
    out.errors.push_back(fmt::format(
        "{}: train.cuda_graph = \"full\" captures CUDA graphs, but this shardrl was built for CPU (use \"none\")",
        where("train.cuda_graph")));
  if (c.rollout.cuda_graph == RolloutGraph::decode && !build.has_cuda)
    out.errors.push_back(fmt::format(
        "{}: rollout.cuda_graph = \"decode\" captures CUDA graphs, but this shardrl was built for CPU (use "
        "\"none\")",
        where("rollout.cuda_graph")));
  if (c.model.attention == AttentionChoice::flash || c.model.attention == AttentionChoice::cudnn) {
    // "auto" picks the fused kernels only where they run; "flash" and "cudnn" insist, so every
    // unmet requirement is named rather than falling back silently. cuDNN takes the training
    // batches set without positions; the RL train phase's rows and prefill keep the flash
    // kernels, so their requirements hold for it as well.
    const bool cudnn = c.model.attention == AttentionChoice::cudnn;
    std::vector<std::string> unmet;
    if (!build.has_cuda) unmet.push_back("a CUDA build, but this shardrl was built for CPU");
    else if (cudnn && !build.has_cudnn)
      unmet.push_back("a GPU build configured with cuDNN 9, but this one has none (CUDNN_ROOT)");
    if (c.model.precision != Precision::bf16) unmet.push_back("model.precision = \"bf16\", not \"fp32\"");
    if (!kernels::flash_attention_supports_head_dim(shape.head_dim))
      unmet.push_back(fmt::format("model.head_dim = 64 or 128, not {}", shape.head_dim));
    if (!unmet.empty())
      out.errors.push_back(fmt::format(
          "{}: model.attention = \"{}\" runs {}, which need{} {} (use {})", where("model.attention"),
          cudnn ? "cudnn" : "flash", cudnn ? "cuDNN's fused attention" : "the tensor-core kernels", cudnn ? "s" : "",
          fmt::join(unmet, "; and "), cudnn ? "\"auto\", \"flash\" or \"gemm\"" : "\"auto\" or \"gemm\""));
  }
  if (c.comm.backend == CommBackend::mpi && build.has_cuda && !build.any)
    out.errors.push_back(fmt::format(
        "{}: comm.backend = \"mpi\" moves host buffers, but this CUDA build keeps tensors on the "
        "GPU (use \"auto\" or \"nccl\")",
        where("comm.backend")));
  if (c.rollout.expert_parallel && (shape.n_experts == 0 || !c.fsdp.expert_parallel))
    out.errors.push_back(fmt::format("{}: rollout.expert_parallel decodes with the experts fsdp.expert_parallel "
                                     "spreads over the ranks; it needs {}",
                                     where("rollout.expert_parallel"),
                                     shape.n_experts == 0 ? "a mixture-of-experts model (model.n_experts > 0)"
                                                          : "fsdp.expert_parallel = true"));
  if (const std::int64_t T = c.rollout.tensor_parallel; T > 1) {
    if (shape.n_experts > 0)
      out.errors.push_back(fmt::format("{}: rollout.tensor_parallel = {} splits the layers of dense models; a mixture "
                                       "of experts (model.n_experts = {}) decodes with its experts spread by "
                                       "rollout.expert_parallel (use 1)",
                                       where("rollout.tensor_parallel"), T, shape.n_experts));
    const std::pair<const char*, int> split[] = {
        {"n_heads", shape.n_heads}, {"n_kv_heads", shape.n_kv_heads}, {"d_ff", shape.d_ff}};
    for (const auto& [key, value] : split)
      if (shape.n_experts == 0 && value % T != 0)
        out.errors.push_back(fmt::format("{}: rollout.tensor_parallel = {} gives each rank 1/{} of model.{}, which is "
                                         "{}",
                                         where("rollout.tensor_parallel"), T, T, key, value));
  }
}

}  // namespace shardrl
