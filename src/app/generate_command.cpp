#include "app/generate_command.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "app/checkpoint_run.hpp"
#include "app/cli.hpp"
#include "app/job_config.hpp"
#include "app/printable_line.hpp"
#include "core/error.hpp"
#include "core/kokkos.hpp"
#include "config/load.hpp"
#include "config/model_presets.hpp"
#include "core/log.hpp"
#include "io/sharded_file.hpp"
#include "job/job_checkpoint.hpp"
#include "job/options.hpp"
#include "job/policy.hpp"
#include "mpi/communicator.hpp"
#include "mpi/device.hpp"
#include "mpi/host_exchange.hpp"
#include "mpi/layout.hpp"
#include "mpi/session.hpp"
#include "rl/task_chat.hpp"
#include "rl/task_prompt.hpp"
#include "rl/tokenizer.hpp"
#include "rollout/generator.hpp"
#include "text/hf_tokenizer.hpp"
#include "rollout/weight_set.hpp"

namespace shardrl {
namespace {

// "1 2 3" or "1,2,3": every id an integer in [0, vocab_size).
std::vector<std::int32_t> parse_prompt_ids(const std::string& text, std::int64_t vocab_size) {
  std::vector<std::int32_t> ids;
  std::string token;
  auto flush = [&] {
    if (token.empty()) return;
    const std::string where = fmt::format("--prompt-ids: id {} (\"{}\")", ids.size(), token);
    if (token.find_first_not_of("0123456789") != std::string::npos || token.size() > 10)
      throw InputError(where + " is not a non-negative integer");
    const long long v = std::stoll(token);
    if (v >= vocab_size)
      throw InputError(fmt::format("{} is outside the model's vocabulary (model.vocab_size = {})", where, vocab_size));
    ids.push_back(static_cast<std::int32_t>(v));
    token.clear();
  };
  for (char c : text) {
    if (c == ' ' || c == ',' || c == '\t' || c == '\n' || c == '\r') flush();   // a pasted list's line ends too
    else token += c;
  }
  flush();
  if (ids.empty()) throw InputError("--prompt-ids: no ids");
  return ids;
}

}  // namespace

int run_generate(const GenerateArgs& args) {
  MpiSession mpi(nullptr, nullptr);
  ProcessLayout layout = ProcessLayout::discover(mpi.world());
  init_logging(layout.world_rank, false);
  spdlog::set_level(spdlog::level::warn);   // stdout carries the completions only

  if (args.config_path.empty() && args.checkpoint.empty()) {
    if (layout.world_rank == 0) std::cerr << "shardrl: generate needs --config or --checkpoint (or both)\n";
    return kExitUsage;
  }
  // Checked as a sampling job, not a training one: generate decodes the whole model on each rank
  // (a run trained with rollout.tensor_parallel = 2 samples on one process), and --temperature 0
  // looks greedily at a policy whose config samples with top_k or top_p.
  CheckpointRun run;
  try {
    run = open_checkpoint_run(mpi.world(), layout.world_size,
                              {"generate", args.config_path, args.checkpoint, args.overrides, args.base, false});
  } catch (const InputError& e) {
    if (layout.world_rank == 0) print_error(e.what());
    return kExitUsage;
  }
  if (!run.loaded.ok()) {
    report_config_errors(run.loaded, layout.world_rank);
    return kExitUsage;
  }
  std::unique_ptr<ShardedFileReader>& checkpoint = run.checkpoint;
  const Config& cfg = run.loaded.config;
  const std::int64_t base_seed = run.base_seed;
  DeviceBinding device;
  try {
    device = bind_device(layout);
  } catch (const InputError& e) {
    if (layout.world_rank == 0) print_error(e.what());
    return kExitUsage;
  }
  KokkosRuntime kokkos(device.device_id);

  if (int(args.prompt_given) + int(!args.prompt_ids.empty()) + int(!args.task_input.empty()) != 1) {
    if (layout.world_rank == 0)
      std::cerr << "shardrl: generate needs one of --prompt TEXT, --prompt-ids \"ID ...\" and --task-input TEXT\n";
    return kExitUsage;
  }
  std::string prompt_text = args.prompt;
  if (!args.task_input.empty()) {
    try {
      prompt_text = task_prompt(cfg.rl.task, args.task_input);
    } catch (const InputError& e) {
      if (layout.world_rank == 0) std::cerr << "shardrl: --task-input: " << e.what() << "\n";
      return kExitUsage;
    }
  } else if (!args.prompt.empty() && !args.chat && has_prompt_form(cfg.rl.task) && args.prompt.back() != '\n') {
    // Every prompt of the task ends with a newline, which a shell argument does not carry: a
    // prompt typed as the task shows it draws completions of a prompt the policy never saw.
    if (layout.world_rank == 0)
      std::cerr << fmt::format("shardrl: note: this job's task ({}) writes its prompts like {:?}; to have it render "
                               "yours, pass --task-input {:?}\n",
                               cfg.rl.task, task_prompt(cfg.rl.task, example_task_input(cfg.rl.task)),
                               example_task_input(cfg.rl.task));
  }
  const bool by_ids = !args.prompt_ids.empty();
  std::vector<std::int32_t> prompt;
  std::unique_ptr<HfTokenizer> model_tokenizer;   // the model's own, when the job has one
  std::int32_t eos = eos_id(cfg);
  std::vector<std::int32_t> other_end_ids;   // the model's (generation_config.json), when rl.eos_id is unset
  // Every rank reads the tokenizer itself: a rank that cannot (a node-local path) must stop the
  // others, which would otherwise wait for it in the first collective.
  try {
    run_on_every_rank(mpi.world(), [&] {
      // --task-input renders a generated task's prompt (sort, add, reverse), which the task
      // encodes with the byte tokenizer: a tokenizer.json beside model.init_from's weights
      // encodes nothing such a policy saw. A --prompt is the model's own text (a converted
      // Hugging Face model keeps the default task), encoded with the model's tokenizer.
      const bool byte_task = !args.task_input.empty();
      if (const std::string dir = byte_task ? std::string() : tokenizer_dir(cfg); !dir.empty()) {
        model_tokenizer = std::make_unique<HfTokenizer>(dir);
        if (cfg.rl.eos_id < 0) {
          eos = model_tokenizer->end_of_completion_id();
          other_end_ids = model_tokenizer->eos_ids();
        }
      }
      if (args.chat && !model_tokenizer)
        throw InputError("--chat renders the prompt with the model's chat template: the job needs its tokenizer "
                         "(model.tokenizer, or model.init_from with tokenizer.json)");
      if (by_ids) {
        prompt = parse_prompt_ids(args.prompt_ids, resolve_model_shape(cfg.model).vocab_size);
      } else if (model_tokenizer) {
        std::string text = prompt_text;
        // As the text task renders its prompts (Qwen3's enable_thinking, the system prompt), so
        // that the policy sees the form it was trained on.
        if (args.chat) text = TaskChat(*model_tokenizer, chat_options(cfg)).render_user(prompt_text);
        prompt = model_tokenizer->encode(text);
        if (prompt.empty()) throw InputError("the prompt encodes to no tokens");
      } else {
        prompt.push_back(tokenizer::kBos);
        for (std::int32_t t : tokenizer::encode(prompt_text)) prompt.push_back(t);
      }
      // The encoded prompt and the end-of-completion id index the model's embedding: a tokenizer
      // larger than model.vocab_size is named here, not read past the embedding.
      const int vocab = resolve_model_shape(cfg.model).vocab_size;
      for (std::size_t i = 0; i < prompt.size(); ++i)
        if (prompt[i] >= vocab)
          throw InputError(fmt::format("the prompt's token {} is id {}, outside the model's vocabulary "
                                       "(model.vocab_size = {})",
                                       i, prompt[i], vocab));
      if (eos >= vocab)
        throw InputError(fmt::format("the end-of-completion id {} is outside the model's vocabulary "
                                     "(model.vocab_size = {}): set rl.eos_id",
                                     eos, vocab));
    });
  } catch (const InputError& e) {
    if (layout.world_rank == 0) print_error(e.what());
    return kExitUsage;
  }
  const int max_new = static_cast<int>(cfg.rollout.max_new_tokens);
  const int max_seq_len = resolve_model_shape(cfg.model).max_seq_len;
  const int max_len = static_cast<int>(prompt.size()) + max_new;
  if (max_len > max_seq_len) {
    if (layout.world_rank == 0)
      std::cerr << "shardrl: the prompt (" << prompt.size() << " tokens) and rollout.max_new_tokens (" << max_new
                << ") exceed the model's max_seq_len (" << max_seq_len << ")\n";
    return kExitUsage;
  }
  // The policy as every job path builds it: fresh weights from the seed, then the checkpoint's
  // (any world size), or else model.init_from's directory.
  checkpoint.reset();   // the policy's reader opens the file again, collectively
  const DerivedConfig derived = derive(cfg, this_build());
  auto comm = make_communicator(
      derived.comm_backend == CommBackend::nccl ? CommBackendKind::nccl : CommBackendKind::mpi, mpi.world(),
      cfg.comm.timeout_s);
  std::unique_ptr<Policy> built;
  try {
    // The memory plan's refusal (with the generator below) is every rank's. Generate never
    // trains: the policy is only sampled (no gradients or optimizer state, training buffers for
    // one sequence).
    Config policy_cfg = cfg;
    policy_cfg.run.seed = base_seed;
    PolicyUse use;
    use.generator = {args.samples, max_len};
    use.sampled_only = true;
    built = std::make_unique<Policy>(policy_cfg, *comm, use);
  } catch (const InputError& e) {
    if (layout.world_rank == 0) print_error(e.what());
    return kExitUsage;
  }
  Policy& policy = *built;
  try {
    // A LoRA checkpoint's base is model.init_from's, loaded first.
    if (!cfg.model.init_from.empty() && (args.checkpoint.empty() || policy.base_from_init_from()))
      policy.load_init_from(mpi.world(), /*adapters=*/args.checkpoint.empty());
    if (!args.checkpoint.empty()) load_policy_weights(args.checkpoint, policy, mpi.world());
  } catch (const InputError& e) {
    if (layout.world_rank == 0) print_error(e.what());
    return kExitUsage;
  }
  if (cfg.rollout.tensor_parallel > 1)
    spdlog::warn("rollout.tensor_parallel = {} is train's rollout: generate decodes the whole model on each rank",
                 cfg.rollout.tensor_parallel);
  // The rollout's engine, prefill calls and (rollout.expert_parallel) own experts, as train's
  // rollout has them: every rank generates the same rows, so expert-parallel ranks keep step.
  const EngineOptions engine = engine_options(cfg);
  WeightSet weights(policy.trainer().layout(), policy.model().compute_type_size(), {},
                    engine.expert_parallel ? WeightSet::Experts::own : WeightSet::Experts::all);
  Generator generator(policy.model().options(), args.samples, max_len, ExecSpace(), nullptr, engine);
  if (const ExpertExchange* ep = generator.model().options().expert_exchange; ep && layout.world_rank == 0)
    std::cerr << "shardrl: note: decoding with each rank's own experts (rollout.expert_parallel): the " << ep->ranks()
              << " ranks exchange routed tokens in step\n";
  weights.materialize(policy.trainer(), generator.model());
  if (cfg.rollout.cuda_graph == RolloutGraph::decode) generator.use_decode_graphs();

  std::vector<GenerationRow> rows(args.samples);
  for (int i = 0; i < args.samples; ++i) {
    rows[i].prompt = prompt;
    rows[i].sample_index = i;
  }
  const StopIds stop(eos, other_end_ids, resolve_model_shape(cfg.model).vocab_size);
  std::vector<Completion> out = generator.generate(weights.units(), rows, sampling_options(cfg), max_new,
                                                   static_cast<std::uint64_t>(cfg.run.seed), 0, stop);
  if (layout.world_rank == 0)
    for (const auto& c : out) {
      const std::vector<std::int32_t> kept = stop.before_stop(c.tokens);
      if (by_ids) std::cout << fmt::format("{}", fmt::join(kept, " ")) << "\n";
      else if (model_tokenizer) std::cout << printable_line(model_tokenizer->decode(kept)) << "\n";
      else std::cout << printable_line(tokenizer::decode_completion(kept)) << "\n";
    }
  std::cout.flush();
  return kExitOk;
}

}  // namespace shardrl
