#include "app/cli.hpp"

#include <cstdlib>
#include <exception>
#include <new>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <mpi.h>

#include "app/evaluate_command.hpp"
#include "app/generate_command.hpp"
#include "app/convert_command.hpp"
#include "app/inspect_command.hpp"
#include "app/plan_command.hpp"
#include "app/report_command.hpp"
#include "app/score_command.hpp"
#include "app/tokenize_command.hpp"
#include "app/train_command.hpp"
#include "core/child_groups.hpp"
#include "core/error.hpp"
#include "core/version.hpp"
#include "mpi/session.hpp"

namespace shardrl {
namespace {

std::thread::id g_main_thread;   // run_cli's: the one thread that makes MPI calls, MPI_Abort included

// std::terminate's handler: the exception's cause on every rank's behalf (fatal(): MPI_Abort).
// From another thread (the watchdog's, which must make no MPI call while the main thread may be
// inside one), or once MPI is finalised, the process ends without MPI, as the watchdog's exit
// does: the launcher ends the other ranks.
[[noreturn]] void end_job_on_uncaught_exception() {
  std::string what = "std::terminate without an exception";
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      what = "out of host memory: the job asks for more than this machine holds (a shape or batch too large for it? "
             "docs/memory.md has the formula)";
    } catch (const std::exception& x) {
      what = std::string("unexpected error: ") + x.what();
    } catch (...) {
      what = "unexpected error: an exception that is not a std::exception";
    }
  }
  int finalized = 0;
  if (std::this_thread::get_id() == g_main_thread) MPI_Finalized(&finalized);
  if (std::this_thread::get_id() != g_main_thread || finalized) {
    print_fatal(what);
    kill_child_groups();
    std::_Exit(kExitFatal);
  }
  SHARDRL_FATAL(what);
}

}  // namespace

namespace {

// A count of at least 1. (CLI11's PositiveNumber says "Value 0 not in range 0.000000 to
// 179769313486231570814527...": what is wanted, not the double's range.)
const CLI::Validator kAtLeastOne(
    [](std::string& value) -> std::string {
      std::size_t used = 0;
      long long n = 0;
      try {
        n = std::stoll(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != value.size() || n < 1) return "must be a whole number of at least 1, got " + value;
      return {};
    },
    "N >= 1");

// Before MPI starts only the launcher's environment tells ranks apart; print usage errors once.
bool is_first_launched_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::string(v) == "0";
  return true;
}

}  // namespace

int run_cli(int argc, char** argv) {
  CLI::App app{"shardrl: reinforcement-learning post-training of transformer language models "
               "(MPI + Kokkos + NCCL, fully sharded)"};
  app.set_version_flag("--version", std::string("shardrl ") + kVersion);
  app.require_subcommand(1);

  TrainArgs train_args;
  CLI::App* train = app.add_subcommand("train", "Run a job: rollout/train iterations from a config file");
  train->add_option("--config", train_args.config_path, "TOML configuration file")->required();
  train->add_option("--set", train_args.overrides,
                    "Override one key, e.g. --set run.seed=7 (repeatable; later ones win)")
      ->type_name("SECTION.KEY=VALUE");
  train->add_flag("--log-all-ranks", train_args.log_all_ranks,
                  "Log info messages from every rank (default: rank 0 only)");
  train->add_flag("--profile", train_args.profile,
                  "Print each RL iteration's breakdown on rank 0: all-gather, compute, reduce-scatter, "
                  "optimizer, bytes moved (fences between phases, so steps run slower)");
  train->add_option("--trace", train_args.trace,
                    "Write every rank's timeline (iterations, rollout, prefill and decode steps, each unit's "
                    "forward and backward, all-gathers, reduce-scatters, optimizer, checkpoint saves) to this "
                    "Chrome trace file for Perfetto; host times, fenced with --profile")
      ->type_name("FILE.json");
  CLI::Option* no_resume = train->add_flag(
      "--no-resume", train_args.no_resume,
      "Start fresh; refused where the run directory has checkpoints (another run.name, or --overwrite)");
  train->add_flag("--overwrite", train_args.overwrite,
                  "With --no-resume: delete the run's checkpoints and metrics, then start fresh; with "
                  "--resume-from: delete the run's checkpoints past the one resumed from");
  train->add_flag("--allow-config-change", train_args.allow_config_change,
                  "Resume although keys that shape the run (seed, task, batch, model, optimizer...) differ from "
                  "the checkpoint's");
  train->add_option("--resume-from", train_args.resume_from, "Resume from this checkpoint file")
      ->type_name("PATH")
      ->excludes(no_resume);
  train->add_flag("--requeued", train_args.requeued,
                  "A requeued run of a job (slurm/run_shardrl.sh passes it after the first run): where the run "
                  "has checkpoints, resume from its latest and ignore --resume-from, --no-resume and "
                  "--overwrite; where it has none yet, they apply as at the first run");

  ReportArgs report_args;
  CLI::App* report = app.add_subcommand(
      "report", "Summarise a run in RUN_DIR/report.md: config changes, progress, curves, time per phase, checkpoints");
  report->add_option("run_dir", report_args.run_dir, "The run directory (run.dir/run.name)")->required();
  report->add_option("--out", report_args.out, "Write the report here instead")->type_name("FILE.md");

  PlanArgs plan_args;
  CLI::App* plan = app.add_subcommand(
      "plan", "The job's memory per rank for N ranks and a GPU size, without allocating: does it fit?");
  plan->add_option("--config", plan_args.config_path, "TOML configuration file")->required();
  plan->add_option("--set", plan_args.overrides, "Override one key (repeatable; later ones win)")
      ->type_name("SECTION.KEY=VALUE");
  plan->add_option("--ranks", plan_args.ranks, "Ranks of the job (one per GPU)")->check(kAtLeastOne);
  plan->add_option("--ranks-per-node", plan_args.ranks_per_node, "Ranks sharing a node's host memory (default: all)")
      ->check(kAtLeastOne);
  plan->add_option("--gpu-memory", plan_args.gpu_memory,
                   "Memory of one GPU, e.g. 80GiB (H100) or 141GB (H200); default: the job runs in host memory")
      ->type_name("SIZE");
  plan->add_option("--host-memory", plan_args.host_memory, "Host memory of one node (default: this host's available)")
      ->type_name("SIZE");

  InspectArgs inspect_args;
  CLI::App* inspect = app.add_subcommand("inspect", "Describe a checkpoint: tensors, shapes, iteration, config");
  inspect->add_option("path", inspect_args.path, "Checkpoint file (.h5)")->required();
  inspect->add_flag("--verify", inspect_args.verify, "Recompute every tensor's checksum");

  GenerateArgs gen_args;
  std::string seed_flag, temperature_flag, top_k_flag, top_p_flag, max_new_flag;
  ConvertArgs convert_args;
  CLI::App* convert =
      app.add_subcommand("convert", "Between checkpoints and Hugging Face model directories (safetensors): "
                                    "--from CKPT --to-safetensors DIR, --from CKPT --to-peft DIR (a LoRA run's "
                                    "adapters), or --from-safetensors DIR --to CKPT");
  convert->add_option("--from", convert_args.from, "Checkpoint file (.h5) to export");
  convert->add_option("--to-safetensors", convert_args.to_safetensors,
                      "Directory to write model.safetensors and config.json into");
  convert->add_option("--to-peft", convert_args.to_peft,
                      "Directory to write a LoRA run's adapters into, as PEFT saves them (adapter_model.safetensors, "
                      "adapter_config.json)");
  convert->add_option("--from-safetensors", convert_args.from_safetensors,
                      "Hugging Face model directory (config.json, *.safetensors) to import");
  convert->add_option("--to", convert_args.to, "Checkpoint file (.h5) to write the imported weights to");
  convert->add_flag("--merged", convert_args.merged,
                    "With --to-safetensors, a LoRA run's model: its base with the adapters folded into the weights "
                    "(W + alpha / rank * B A)");
  convert->add_option("--base", convert_args.base,
                      "With --merged or --to-peft: the LoRA run's base model directory where it is now (default: the "
                      "run's model.init_from; --merged checks its tensors' checksum against the run's record)")
      ->type_name("DIR");
  convert->add_flag("--force", convert_args.force, "Replace an existing output (refused otherwise)");
  convert->add_option("--dtype", convert_args.dtype,
                      "Element type of the exported tensors (default: the run's model.precision; fp32 for --to-peft)")
      ->check(CLI::IsMember({"bf16", "fp32"}));

  CLI::App* gen = app.add_subcommand("generate", "Print completions of a prompt, one per line");
  gen->add_option("--config", gen_args.config_path, "TOML configuration file (default: the checkpoint's)")->type_name("PATH");
  CLI::Option* gen_checkpoint =
      gen->add_option("--checkpoint", gen_args.checkpoint, "Sample from this checkpoint's policy")->type_name("PATH");
  gen->add_option("--base", gen_args.base,
                  "With --checkpoint of a LoRA run: its base model directory where it is now (default: the run's "
                  "model.init_from; the adapters' check compares its tensors' checksum with the run's record)")
      ->type_name("DIR")
      ->needs(gen_checkpoint);
  gen->add_option("--set", gen_args.overrides, "Override one key (repeatable; later ones win)")
      ->type_name("SECTION.KEY=VALUE");
  CLI::Option* text =
      gen->add_option("--prompt", gen_args.prompt, "The prompt text (the model's tokenizer when the job has one)");
  CLI::Option* ids = gen->add_option("--prompt-ids", gen_args.prompt_ids,
                                     "The prompt as token ids, e.g. \"151644 872 198\" (the model's own tokenizer)");
  CLI::Option* task_input = gen->add_option(
      "--task-input", gen_args.task_input,
      "The input of the job's task, rendered as the task's prompt, e.g. \"3 1 9 2\" for sort (sort, add, reverse)");
  text->excludes(ids)->excludes(task_input);
  ids->excludes(task_input);
  gen->add_flag("--chat", gen_args.chat, "Render --prompt as a user message with the model's chat template")
      ->needs(text);
  gen->require_option(1, 0);
  gen->add_option("--n", gen_args.samples, "Completions to draw")->check(CLI::Range(1, 4096));
  gen->add_option("--seed", seed_flag, "Same as --set run.seed=S")->type_name("INT");
  gen->add_option("--temperature", temperature_flag, "Same as --set rollout.temperature=T")->type_name("FLOAT");
  gen->add_option("--top-k", top_k_flag, "Same as --set rollout.top_k=K")->type_name("INT");
  gen->add_option("--top-p", top_p_flag, "Same as --set rollout.top_p=P")->type_name("FLOAT");
  gen->add_option("--max-new-tokens", max_new_flag, "Same as --set rollout.max_new_tokens=M")->type_name("INT");

  EvaluateArgs eval_args;
  CLI::App* evaluate = app.add_subcommand(
      "evaluate", "Score the text task's held-out split once, as a training job's evaluation does, with a "
                  "checkpoint's policy or the config's model: pass@1, pass@k, mean rewards");
  evaluate->add_option("--config", eval_args.config_path, "TOML configuration file (default: the checkpoint's)")
      ->type_name("PATH");
  CLI::Option* eval_checkpoint =
      evaluate->add_option("--checkpoint", eval_args.checkpoint, "Evaluate this checkpoint's policy (else the "
                                                                 "config's model: model.init_from's weights)")
          ->type_name("PATH");
  evaluate->add_option("--set", eval_args.overrides, "Override one key (repeatable; later ones win)")
      ->type_name("SECTION.KEY=VALUE");
  evaluate->add_option("--base", eval_args.base,
                       "With --checkpoint of a LoRA run: its base model directory where it is now (default: the "
                       "run's model.init_from)")
      ->type_name("DIR")
      ->needs(eval_checkpoint);
  evaluate->add_option("--dataset", eval_args.dataset,
                       "The split to score, a JSONL file as rl.eval_dataset takes (default: the config's "
                       "rl.eval_dataset)")
      ->type_name("FILE.jsonl");
  evaluate->add_option("--out", eval_args.out, "Also write the numbers to this JSON file")->type_name("FILE.json");

  TokenizeArgs tok_args;
  CLI::App* tok = app.add_subcommand("tokenize", "A model's tokenizer and chat template: ids of text, text of ids");
  tok->add_option("--tokenizer", tok_args.tokenizer, "Directory with tokenizer.json (and tokenizer_config.json)")
      ->type_name("DIR");
  tok->add_option("--config", tok_args.config_path,
                  "A job's config: its tokenizer, and with --chat its rl.template_variables and rl.system_prompt")
      ->type_name("FILE");
  tok->add_option("--set", tok_args.overrides, "Override one key of --config (repeatable; later ones win)")
      ->type_name("KEY=VALUE");
  CLI::Option* tok_text = tok->add_option("--text", tok_args.text, "Text to encode");
  CLI::Option* tok_file = tok->add_option("--file", tok_args.file,
                                          "JSONL: a string, or {\"text\": ...}, or {\"messages\": [...]} per line");
  CLI::Option* tok_decode = tok->add_option("--decode", tok_args.decode,
                                            "Token ids to decode, e.g. \"9707 1879\" (the text printed as one line: "
                                            "newlines as \\n, backslashes doubled, control bytes and non-UTF-8 as \\xNN)");
  tok_text->excludes(tok_file)->excludes(tok_decode);
  tok_file->excludes(tok_decode);
  tok->require_option(1, 0);
  tok->add_flag("--chat", tok_args.chat, "Render with the chat template (generation prompt added) before encoding");
  tok->add_flag("--add-special-tokens", tok_args.add_special_tokens, "Run the post-processor (e.g. Llama 2's BOS)");
  tok->add_flag("--skip-special-tokens", tok_args.skip_special_tokens, "With --decode: leave special tokens out");

  ScoreArgs score_args;
  CLI::App* score = app.add_subcommand("score", "The reward of a completion against an answer (rl.reward)");
  score->add_option("--reward", score_args.reward, "math, exact or regex")
      ->check(CLI::IsMember({"math", "exact", "regex"}));
  score->add_option("--answer", score_args.answer, "The reference answer")->required();
  score->add_option("--completion", score_args.completion, "The model's completion")->required();
  score->add_option("--pattern", score_args.pattern, "regex: a PCRE2 pattern with a capture group");
  score->add_option("--format-reward", score_args.format_reward, "Reward of a well-formed wrong answer (math, regex)");

  // An empty value ("$CKPT" unset in a script) would read as the option left out (--resume-from ""
  // resumed the latest checkpoint, --temperature "" sampled at the config's): refused, except
  // where empty text is an input (an answer, a completion, a prompt, a text to encode).
  const CLI::Validator non_empty(
      [](std::string& value) { return value.empty() ? std::string("an empty value (an unset variable?)") : std::string(); },
      "", "NON-EMPTY");
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    for (CLI::Option* opt : sub->get_options([](CLI::Option* o) { return o->get_type_size_max() > 0; })) {
      const std::string name = opt->get_name();
      if (name != "--answer" && name != "--completion" && name != "--prompt" && name != "--text") opt->check(non_empty);
    }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (is_first_launched_rank())
      print_error(std::string(e.what()) + "\nRun 'shardrl --help' for usage.");
    return kExitUsage;
  }
  if (train->parsed() && train_args.overwrite && !train_args.no_resume && train_args.resume_from.empty()) {
    if (is_first_launched_rank())
      std::cerr << "shardrl: --overwrite requires --no-resume or --resume-from\nRun 'shardrl --help' for usage.\n";
    return kExitUsage;
  }
  // Every command runs with MPI alive around it, so that an exception it lets through (out of
  // memory, a file-system error, a bug) ends every rank at once with its cause, rather than
  // std::terminate on one rank while its peers wait in a collective. It is not caught: uncaught,
  // it reaches std::terminate before any destructor runs (the runtime unwinds only to a handler),
  // and the objects unwinding would destroy (a policy's NCCL communicators and device memory) may
  // wait on peers and hang the one rank that knows the cause.
  g_main_thread = std::this_thread::get_id();
  std::set_terminate(end_job_on_uncaught_exception);
  MpiSession mpi(nullptr, nullptr);
  // The commands of one process: under mpirun every rank would print (mixed mid-line) or write
  // the same files.
  int size = 1, rank = 0;
  MPI_Comm_size(mpi.world(), &size);
  MPI_Comm_rank(mpi.world(), &rank);
  for (CLI::App* one : {inspect, plan, report, score, tok}) {
    if (one->parsed() && size != 1) {
      if (rank == 0) print_error(fmt::format("{} runs as one process (started with {})", one->get_name(), size));
      return kExitUsage;
    }
  }
  {
    if (train->parsed()) return run_train(train_args);
    if (inspect->parsed()) return run_inspect(inspect_args);
    if (plan->parsed()) return run_plan(plan_args);
    if (report->parsed()) return run_report(report_args);
    if (score->parsed()) return run_score(score_args);
    if (tok->parsed()) {
      if (tok_text->count() == 0 && tok_args.file.empty() && tok_args.decode.empty()) {   // --text "" is text
        std::cerr << "shardrl: tokenize needs one of --text, --file, --decode\n";
        return kExitUsage;
      }
      if (tok_args.tokenizer.empty() && tok_args.config_path.empty()) {
        std::cerr << "shardrl: tokenize needs --tokenizer DIR or --config FILE (the job's tokenizer)\n";
        return kExitUsage;
      }
      if (!tok_args.overrides.empty() && tok_args.config_path.empty()) {
        std::cerr << "shardrl: tokenize --set overrides keys of --config FILE, which is missing\n";
        return kExitUsage;
      }
      return run_tokenize(tok_args);
    }
    if (convert->parsed()) return run_convert(convert_args);
    if (evaluate->parsed()) return run_evaluate(eval_args);
    if (gen->parsed()) {
      // The sampling flags are overrides like any other: one validation, one set of messages.
      for (auto [flag, key] : {std::pair{&seed_flag, "run.seed"}, std::pair{&temperature_flag, "rollout.temperature"},
                               std::pair{&top_k_flag, "rollout.top_k"}, std::pair{&top_p_flag, "rollout.top_p"},
                               std::pair{&max_new_flag, "rollout.max_new_tokens"}})
        if (!flag->empty()) gen_args.overrides.push_back(std::string(key) + "=" + *flag);
      gen_args.prompt_given = text->count() > 0;
      return run_generate(gen_args);
    }
  }
  return kExitUsage;
}

}  // namespace shardrl
