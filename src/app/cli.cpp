#include "app/cli.hpp"

#include <cstdlib>
#include <iostream>

#include <CLI/CLI.hpp>

#include "app/train_command.hpp"
#include "core/error.hpp"
#include "core/version.hpp"

namespace shardrl {
namespace {

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
                  "Print a per-step breakdown: all-gather, compute, reduce-scatter, optimizer, bytes moved "
                  "(fences between phases, so steps run slower)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (is_first_launched_rank())
      std::cerr << "shardrl: " << e.what() << "\nRun 'shardrl --help' for usage.\n";
    return kExitUsage;
  }
  if (train->parsed()) return run_train(train_args);
  return kExitUsage;
}

}  // namespace shardrl
