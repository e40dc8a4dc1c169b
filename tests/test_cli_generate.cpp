// `shardrl generate` as users run it: deterministic lines, prompts as token ids, and the task's own
// prompt form (--task-input), which a prompt typed on the command line without its newline misses.
#include <algorithm>
#include <sstream>

#include "app/printable_line.hpp"
#include "cli_harness.hpp"

namespace {

using namespace cli_test;

TEST(Cli, GenerateIsDeterministicOneLinePerCompletion) {
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\nseed = 3\n");
  const std::string cmd = shardrl_binary() + " generate --config job.toml --prompt \"add: 1+2=\" --n 4 --max-new-tokens 12";
  RunResult a = run_in(dir, cmd), b = run_in(dir, cmd);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(std::count(a.out.begin(), a.out.end(), '\n'), 4) << a.out;
  EXPECT_EQ(a.out, b.out) << "the same seed draws the same completions";
  RunResult other = run_in(dir, cmd + " --seed 4");
  EXPECT_NE(other.out, a.out);
  // Greedy: every sample is the same most likely completion.
  RunResult greedy = run_in(dir, cmd + " --temperature 0");
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  std::istringstream lines(greedy.out);
  std::string first, line;
  std::getline(lines, first);
  while (std::getline(lines, line)) EXPECT_EQ(line, first);
  // Greedy over a config that samples with top_k: the same greedy completions (top_k is not
  // read; train would refuse it, generate takes the look).
  RunResult greedy_top_k = run_in(dir, cmd + " --temperature 0 --top-k 5");
  ASSERT_EQ(greedy_top_k.exit_code, 0) << greedy_top_k.err;
  EXPECT_EQ(greedy_top_k.out, greedy.out);
  // An empty prompt is the byte tokenizer's [BOS] alone: an unconditional draw (it was refused as
  // if no prompt had been given).
  RunResult empty = run_in(dir, shardrl_binary() + " generate --config job.toml --prompt '' --n 2 --max-new-tokens 4");
  EXPECT_EQ(empty.exit_code, 0) << empty.err;
  EXPECT_EQ(std::count(empty.out.begin(), empty.out.end(), '\n'), 2) << empty.out;
  RunResult bad = run_in(dir, cmd + " --top-p 1.5");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err,
            "shardrl: invalid configuration (1 problem):\n"
            "  --set rollout.top_p=1.5: rollout.top_p: must be <= 1.0, got 1.5\n");
  // A run's rollout.tensor_parallel is train's: generate decodes the whole model on each rank, so
  // one process samples what it samples without (it refused: 2 did not divide its 1 rank).
  RunResult tensor_parallel = run_in(dir, cmd + " --set rollout.tensor_parallel=2");
  EXPECT_EQ(tensor_parallel.exit_code, 0) << tensor_parallel.err;
  const std::string warned = "rollout.tensor_parallel = 2 is train's rollout: generate decodes the whole model on each "
                             "rank\n";
  ASSERT_NE(tensor_parallel.out.find(warned), std::string::npos) << tensor_parallel.out;
  EXPECT_EQ(tensor_parallel.out.substr(tensor_parallel.out.find(warned) + warned.size()), a.out);
}

// generate takes the rollout's keys as train's rollout does: an MoE model decoded with its experts
// spread over 2 ranks (rollout.expert_parallel, the ranks in lockstep) and its prompt prefilled in
// calls of one row draws what whole-expert decoding draws (fp32).
TEST(Cli, GenerateDecodesWithTheRolloutsExpertParallelism) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "moe.toml",
        "[run]\nseed = 3\n[model]\npreset = \"custom\"\nprecision = \"fp32\"\nvocab_size = 259\nd_model = 32\n"
        "n_layers = 2\nn_heads = 2\nn_kv_heads = 1\nhead_dim = 16\nd_ff = 64\nmax_seq_len = 64\nn_experts = 4\n"
        "top_k = 2\nd_ff_expert = 32\n[train]\nseq_len = 32\n[fsdp]\nexpert_parallel = true\n");
  const std::string cmd = mpirun(2) + " generate --config moe.toml --prompt \"add: 1+2=\" --n 3 --max-new-tokens 10";
  RunResult whole = run_in(dir, cmd);
  RunResult spread = run_in(dir, cmd + " --set rollout.expert_parallel=true --set rollout.prefill_tokens=1");
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  ASSERT_EQ(spread.exit_code, 0) << spread.err;
  EXPECT_EQ(std::count(whole.out.begin(), whole.out.end(), '\n'), 3) << whole.out;
  EXPECT_EQ(spread.out, whole.out);
  // The decoder kept the expert exchange (the note says what the generator was built with).
  const std::string note = "decoding with each rank's own experts (rollout.expert_parallel): the 2 ranks";
  EXPECT_NE(spread.err.find(note), std::string::npos) << spread.err;
  EXPECT_EQ(whole.err.find(note), std::string::npos) << whole.err;
}

// A prompt as token ids (a model with its own tokenizer): completions printed as ids, ending at
// rl.eos_id; the ids of BOS and a text's bytes draw what the text draws. Bad ids and a prompt
// given both ways are refused.
TEST(Cli, GenerateFromTokenIds) {
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\nseed = 5\n");
  const std::string base = shardrl_binary() + " generate --config job.toml --n 3 --max-new-tokens 10";
  RunResult text = run_in(dir, base + " --prompt \"ab\"");
  // Spaces, commas, tabs and line ends (a pasted list) separate the ids.
  RunResult ids = run_in(dir, base + " --prompt-ids \"$(printf '256\\r\\n97,\\t98')\"");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  std::istringstream text_lines(text.out), id_lines(ids.out);
  // Each id line, as `generate` prints text: the bytes (BOS and PAD dropped) as one printable
  // line (app/printable_line.hpp, unit-tested on its own).
  std::string t, i;
  int compared = 0;
  while (std::getline(id_lines, i)) {
    ASSERT_TRUE(std::getline(text_lines, t));
    std::istringstream in(i);
    std::string bytes;
    int id = 0, count = 0;
    while (in >> id) {
      ASSERT_LT(id, 259) << i;
      ASSERT_NE(id, 257) << "the completion ends before EOS: " << i;
      ++count;
      if (id < 256) bytes += static_cast<char>(id);
    }
    EXPECT_LE(count, 10) << i;
    EXPECT_EQ(shardrl::printable_line(bytes), t) << "the same draw as the text prompt: " << i;
    ++compared;
  }
  EXPECT_FALSE(std::getline(text_lines, t)) << "as many lines";
  EXPECT_EQ(compared, 3) << ids.out << text.out;
  // Greedy with a custom EOS: no completion contains it.
  RunResult custom = run_in(dir, base + " --prompt-ids \"256 97\" --temperature 0 --set rl.eos_id=98");
  ASSERT_EQ(custom.exit_code, 0) << custom.err;
  std::istringstream custom_ids(custom.out);
  int id = 0;
  while (custom_ids >> id) EXPECT_NE(id, 98) << custom.out;
  RunResult beyond = run_in(dir, base + " --prompt-ids \"256 300\"");
  EXPECT_EQ(beyond.exit_code, 2);
  EXPECT_EQ(beyond.err, "shardrl: --prompt-ids: id 1 (\"300\") is outside the model's vocabulary (model.vocab_size = "
                        "259)\n");
  RunResult word = run_in(dir, base + " --prompt-ids \"256 x\"");
  EXPECT_EQ(word.exit_code, 2);
  EXPECT_EQ(word.err, "shardrl: --prompt-ids: id 1 (\"x\") is not a non-negative integer\n");
  RunResult both = run_in(dir, base + " --prompt a --prompt-ids 1");
  EXPECT_EQ(both.exit_code, 2) << both.err;
}

// --task-input renders the input through the job's task: the same prompt, so the same draws, as
// the task's own text with its newline; a prompt typed without the newline gets a note naming the
// flag; the dataset tasks have no prompt form, and one prompt is given one way only.
// A generated task's prompt (--task-input) from a policy imported from a directory that also
// holds a tokenizer.json (a model exported with its tokenizer) goes through the byte tokenizer
// the task trains on: what the same weights draw fresh from the seed (it was encoded with the
// directory's tokenizer, into ids the policy never saw). A --prompt is the model's own text,
// encoded with the directory's tokenizer (a converted Hugging Face model keeps the default task).
TEST(Cli, GenerateKeepsTheByteTokenizerOfAGeneratedTask) {
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\nseed = 3\nname = \"s\"\n[rl]\ntask = \"sort\"\nsft_steps = 0\n");
  RunResult fresh = run_in(dir, shardrl_binary() + " train --config job.toml --set run.iterations=0");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  RunResult conv = run_in(dir, shardrl_binary() + " convert --from runs/s/checkpoints/iter_00000000.h5 "
                                                  "--to-safetensors hf --dtype fp32");
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  // A byte-level BPE whose ids the tiny model's 259 do not reach beyond 'a' (id 300).
  write(dir / "hf" / "tokenizer.json",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 300}, \"merges\": []}, \"pre_tokenizer\": "
        "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}}");
  const std::string gen = shardrl_binary() + " generate --config job.toml --n 2 --max-new-tokens 8 --task-input \"3 1 2\"";
  RunResult plain = run_in(dir, gen);
  RunResult imported = run_in(dir, gen + " --set model.init_from=hf");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_EQ(imported.out, plain.out);
  // 'a' is id 300 in the directory's tokenizer, beyond the tiny model's vocabulary: refused as such.
  RunResult text = run_in(dir, shardrl_binary() + " generate --config job.toml --n 1 --max-new-tokens 4 --prompt a "
                                                  "--set model.init_from=hf");
  EXPECT_EQ(text.exit_code, 2) << text.out;
  EXPECT_NE(text.err.find("300"), std::string::npos) << text.err;
}

TEST(Cli, GenerateRendersTheTasksPromptForm) {
  fs::path dir = test_dir();
  write(dir / "job.toml", "[run]\nseed = 3\n[rl]\ntask = \"sort\"\n");
  const std::string base = shardrl_binary() + " generate --config job.toml --n 3 --max-new-tokens 10";
  RunResult rendered = run_in(dir, base + " --task-input \"3 1 9 2\"");
  RunResult typed = run_in(dir, base + " --prompt 'sort: 3 1 9 2\n'");   // a newline inside the quotes
  ASSERT_EQ(rendered.exit_code, 0) << rendered.err;
  ASSERT_EQ(typed.exit_code, 0) << typed.err;
  EXPECT_EQ(rendered.out, typed.out) << "--task-input renders the task's prompt";
  EXPECT_EQ(std::count(rendered.out.begin(), rendered.out.end(), '\n'), 3) << rendered.out;
  EXPECT_EQ(rendered.err, "") << "no note: the prompt is the task's";
  EXPECT_EQ(typed.err, "");

  RunResult no_newline = run_in(dir, base + " --prompt \"sort: 3 1 9 2\"");
  ASSERT_EQ(no_newline.exit_code, 0) << no_newline.err;
  EXPECT_EQ(no_newline.err,
            "shardrl: note: this job's task (sort) writes its prompts like \"sort: 3 1 9 2\\n\"; to have it render yours, "
            "pass --task-input \"3 1 9 2\"\n");

  RunResult add = run_in(dir, base + " --set rl.task='\"add\"' --task-input 12+30");
  RunResult add_typed = run_in(dir, base + " --set rl.task='\"add\"' --prompt 'add: 12+30=\n'");
  ASSERT_EQ(add.exit_code, 0) << add.err;
  EXPECT_EQ(add.out, add_typed.out);

  write(dir / "data.jsonl", "{\"prompt\": \"q\", \"answer\": \"a\"}\n");
  RunResult dataset = run_in(dir, base + " --set rl.task='\"jsonl\"' --set rl.dataset='\"data.jsonl\"' --task-input x");
  EXPECT_EQ(dataset.exit_code, 2);
  EXPECT_EQ(dataset.err,
            "shardrl: --task-input: task 'jsonl' takes its prompts from its dataset, so it has no prompt form to render an "
            "input with: give the prompt itself with --prompt\n");
  RunResult both = run_in(dir, base + " --prompt a --task-input x");
  EXPECT_EQ(both.exit_code, 2) << both.err;
}

}  // namespace
