// The text path end to end, as users run it: `shardrl tokenize` and `shardrl score` on the real
// Qwen3 tokenizer, and a `text` job on 2 ranks (the model's tokenizer and chat template, the
// synthetic math dataset, warm-up on worked solutions, GRPO with the math reward, evaluation at
// the start, every 2 iterations and at the end). The Qwen3 files come from
// scripts/install_test_references.sh; without them (or without python3 for the dataset) these
// tests are skipped with the reason.
#include <algorithm>
#include <cstdlib>
#include <regex>

#include <nlohmann/json.hpp>

#include "cli_text_harness.hpp"

namespace {

using namespace cli_test;

TEST(Cli, TokenizeEncodesDecodesAndRendersChats) {
  if (const std::string why = missing_reference(); !why.empty()) GTEST_SKIP() << why;
  fs::path dir = test_dir();
  const std::string tok = shardrl_binary() + " tokenize --tokenizer '" + qwen3_dir().string() + "'";
  RunResult text = run_in(dir, tok + " --text 'Hello world!'");
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out, "9707 1879 0\n");   // the ids Hugging Face's tokenizer gives
  RunResult decode = run_in(dir, tok + " --decode '151644 9707 1879 0 151645'");
  EXPECT_EQ(decode.out, "<|im_start|>Hello world!<|im_end|>\n") << decode.err;
  RunResult skip = run_in(dir, tok + " --decode '151644 9707 151645' --skip-special-tokens");
  EXPECT_EQ(skip.out, "Hello\n") << skip.err;
  // --chat: the template's rendering (generation prompt added) encoded: <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n
  RunResult chat = run_in(dir, tok + " --text hi --chat");
  EXPECT_EQ(chat.exit_code, 0) << chat.err;
  EXPECT_EQ(chat.out.rfind("151644 872 198", 0), 0u) << chat.out;
  EXPECT_NE(chat.out.find("151645 198 151644 77091 198"), std::string::npos) << chat.out;
  write(dir / "in.jsonl", "\"Hello world!\"\n{\"text\": \"Hello\"}\n{\"messages\": [{\"role\": \"user\", \"content\": "
                          "\"hi\"}]}\n");
  RunResult file = run_in(dir, tok + " --file in.jsonl");
  EXPECT_EQ(file.exit_code, 0) << file.err;
  EXPECT_EQ(file.out.substr(0, file.out.find('\n', file.out.find('\n') + 1) + 1), "9707 1879 0\n9707\n") << file.out;
  EXPECT_EQ(file.out.substr(file.out.rfind('\n', file.out.size() - 2) + 1), chat.out) << file.out;
  write(dir / "bad.jsonl", "\"ok\"\n{\"nothing\": 1}\n");
  RunResult bad = run_in(dir, tok + " --file bad.jsonl");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("bad.jsonl:2: expected a JSON string, or an object with \"text\""), std::string::npos) << bad.err;
  RunResult no_dir = run_in(dir, shardrl_binary() + " tokenize --tokenizer nowhere --text x");
  EXPECT_EQ(no_dir.exit_code, 2);
  EXPECT_NE(no_dir.err.find("nowhere/tokenizer.json"), std::string::npos) << no_dir.err;
  // A tokenizer without a chat template: --chat names what to do on this command line (it
  // said to set rl.chat_template, a key of a job there is none of).
  fs::create_directories(dir / "bare");
  fs::copy_file(qwen3_dir() / "tokenizer.json", dir / "bare" / "tokenizer.json");
  RunResult no_template = run_in(dir, shardrl_binary() + " tokenize --tokenizer bare --text hi --chat");
  EXPECT_EQ(no_template.exit_code, 2);
  EXPECT_EQ(no_template.err, "shardrl: --text: bare has no chat template (tokenizer_config.json's chat_template, "
                             "chat_template.jinja) to render --chat; tokenize the text as it is (without --chat, a "
                             "line's \"text\" instead of its \"messages\")\n");

  // --config: the job's tokenizer, and with --chat its template variables and system prompt, as
  // the text task renders its prompts (without them --chat showed a prompt the policy never
  // saw). The reference: Qwen3's template's rendering with enable_thinking false, written out.
  write(dir / "job.toml", "[run]\niterations = 1\n" + tiny_qwen3_model() +
                               "[rl]\ntask = \"text\"\ndataset = \"data.jsonl\"\n"
                               "template_variables = '{\"enable_thinking\": false}'\nsystem_prompt = \"Be brief.\"\n");
  write(dir / "rendered.txt", "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 6 x 7?<|im_end|>\n"
                              "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  RunResult as_job = run_in(dir, shardrl_binary() + " tokenize --config job.toml --text 'What is 6 x 7?' --chat");
  EXPECT_EQ(as_job.exit_code, 0) << as_job.err;
  RunResult reference = run_in(dir, tok + " --text \"$(cat rendered.txt; printf x)\"");
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  const std::string ref_ids = reference.out.substr(0, reference.out.rfind(' ')) + "\n";   // without the x
  EXPECT_EQ(as_job.out, ref_ids);
  // A GPU job's config tokenized on a CPU login node: neither this build's rules nor a job's
  // shape apply (rollout.cuda_graph and debug.fail_rank stopped it, exit 2).
  RunResult gpu_job = run_in(dir, shardrl_binary() + " tokenize --config job.toml --set rollout.cuda_graph=decode "
                                                     "--set debug.fail_rank=1 --text 'What is 6 x 7?' --chat");
  EXPECT_EQ(gpu_job.exit_code, 0) << gpu_job.err;
  EXPECT_EQ(gpu_job.out, ref_ids);
  // rl.chat_template = false: the system prompt and the text joined, as the task encodes them.
  RunResult plain = run_in(dir, shardrl_binary() + " tokenize --config job.toml --set rl.chat_template=false "
                                                   "--text 'What is 6 x 7?' --chat");
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out, run_in(dir, tok + " --text 'Be brief.What is 6 x 7?'").out);
  RunResult no_source = run_in(dir, shardrl_binary() + " tokenize --text x");
  EXPECT_EQ(no_source.exit_code, 2);
  EXPECT_NE(no_source.err.find("tokenize needs --tokenizer DIR or --config FILE"), std::string::npos) << no_source.err;
}

TEST(Cli, ScorePrintsTheRewardAndTheAnswerRead) {
  fs::path dir = test_dir();
  RunResult right = run_in(dir, shardrl_binary() + " score --reward math --answer 3/4 --completion 'so \\boxed{0.75}'");
  EXPECT_EQ(right.exit_code, 0) << right.err;
  EXPECT_EQ(right.out, "final answer: 0.75\nreward: 1\n");
  RunResult wrong = run_in(dir, shardrl_binary() + " score --reward math --answer 3/4 --format-reward 0.1 "
                                                   "--completion 'The answer is 0.7.'");
  EXPECT_EQ(wrong.out, "final answer: 0.7\nreward: 0.1\n") << wrong.err;
  // LaTeX as written (its backslashes were doubled), and escaped whole where a byte needs it.
  RunResult latex = run_in(dir, shardrl_binary() + " score --reward math --answer 0.5 --completion "
                                                   "'so \\boxed{\\frac{1}{2}}'");
  EXPECT_EQ(latex.out, "final answer: \\frac{1}{2}\nreward: 1\n") << latex.err;
  RunResult control = run_in(dir, shardrl_binary() + " score --reward math --answer 0.5 --completion "
                                                     "\"$(printf 'so \\\\boxed{\\\\frac{1}{2}\\001}')\"");
  EXPECT_EQ(control.out.rfind("final answer: \\\\frac{1}{2}\\x01\n", 0), 0u) << control.out << control.err;
  RunResult regex = run_in(dir, shardrl_binary() + " score --reward regex --pattern 'ANSWER: (\\d+)' --answer 12 "
                                                   "--completion 'ANSWER: 12'");
  EXPECT_EQ(regex.out, "reward: 1\n") << regex.err;
  RunResult bad = run_in(dir, shardrl_binary() + " score --reward regex --pattern '(' --answer 1 --completion x");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("does not compile"), std::string::npos) << bad.err;
  // The reward's checks name the flags typed, not the config keys behind them.
  RunResult high = run_in(dir, shardrl_binary() + " score --format-reward 2 --answer 1 --completion 1");
  EXPECT_EQ(high.exit_code, 2);
  EXPECT_EQ(high.err.find("shardrl: --format-reward 2 is outside [0, 1)"), 0u) << high.err;
  RunResult no_pattern = run_in(dir, shardrl_binary() + " score --reward regex --answer 1 --completion 1");
  EXPECT_EQ(no_pattern.exit_code, 2);
  EXPECT_EQ(no_pattern.err, "shardrl: --reward regex needs a pattern with a capture group: --pattern\n");
}

// generate and convert --from-safetensors read their files on every rank: a rank that cannot (a
// node-local path, the ranks in different directories) stops them all with its cause, exit 2
// (before, it returned silently and rank 0 waited in a collective for ever).
TEST(Cli, GenerateAndConvertStopEveryRankWhenOneCannotReadItsFiles) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  if (const std::string why = missing_reference(); !why.empty()) GTEST_SKIP() << why;
  fs::path dir = test_dir();
  fs::create_directories(dir / "a" / "tok");
  fs::create_directories(dir / "a" / "hf");
  fs::create_directories(dir / "b");
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(qwen3_dir() / file, dir / "a" / "tok" / file, fs::copy_options::overwrite_existing);
  fs::copy_file(fs::path(SHARDRL_SOURCE_DIR) / "tests" / "data" / "Qwen3-30B-A3B" / "config.json",
                dir / "a" / "hf" / "config.json", fs::copy_options::overwrite_existing);
  write(dir / "gen.toml", "[model]\npreset = \"custom\"\ntokenizer = \"tok\"\nvocab_size = 151936\nd_model = 32\n"
                          "n_layers = 1\nn_heads = 2\nn_kv_heads = 1\nhead_dim = 16\nd_ff = 64\ntie_embeddings = true\n"
                          "max_seq_len = 160\n[rl]\ntask = \"text\"\ndataset = \"d.jsonl\"\n");
  // Rank 0 runs in a/, which holds the files; rank 1 in b/, which does not.
  const auto in_two_dirs = [&](const std::string& args) { return mpirun_in_two_dirs(dir / "a", dir / "b", args); };
  RunResult gen = run_in(dir, in_two_dirs(" generate --config " + (dir / "gen.toml").string() + " --prompt hi"));
  EXPECT_EQ(gen.exit_code, 2) << gen.out << gen.err;
  EXPECT_NE(gen.err.find("tok/tokenizer.json"), std::string::npos) << gen.err;
  EXPECT_LT(gen.seconds, 60.0);
  RunResult conv = run_in(dir, in_two_dirs(" convert --from-safetensors hf --to " + (dir / "out.h5").string()));
  EXPECT_EQ(conv.exit_code, 2) << conv.out << conv.err;
  EXPECT_NE(conv.err.find("hf/config.json"), std::string::npos) << conv.err;
  EXPECT_LT(conv.seconds, 60.0);
}

// The whole text path on 2 ranks with a tiny Qwen3-shaped model (the real 151,936-id vocabulary).
TEST(Cli, TextTaskTrainsAndEvaluatesOnTheMathDataset) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  if (const std::string why = missing_reference(); !why.empty()) GTEST_SKIP() << why;
  if (std::system("python3 --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "python3 is not installed";
  fs::path dir = test_dir();
  ASSERT_EQ(make_math_data(dir, 6), "");
  write(dir / "text.toml",
        "[run]\nname = \"text\"\niterations = 3\n" + tiny_qwen3_model() +
        "[train]\nmicro_batch_size = 4\nseq_len = 128\n"
        "[rollout]\nmax_new_tokens = 16\n"
        "[rl]\ntask = \"text\"\ndataset = \"data/train.jsonl\"\neval_dataset = \"data/eval.jsonl\"\n"
        "template_variables = '{\"enable_thinking\": false}'\nformat_reward = 0.1\n"
        "prompts_per_iteration = 4\nsamples_per_prompt = 2\nsft_steps = 2\nsft_batch_size = 4\n"
        "eval_interval = 2\neval_samples = 2\n");
  RunResult r = run_in(dir, mpirun(2) + " train --config text.toml");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_LT(r.seconds, 180.0);
  // Evaluations before iterations 1 and 3, and after the last: each over the 6 eval prompts.
  std::size_t evals = 0;
  for (std::size_t at = r.out.find("eval 6 prompts | pass@1 "); at != std::string::npos;
       at = r.out.find("eval 6 prompts | pass@1 ", at + 1))
    ++evals;
  EXPECT_EQ(evals, 3u) << r.out;
  const std::string metrics = slurp(dir / "runs" / "text" / "metrics.jsonl");
  std::size_t with_eval = 0;
  for (std::size_t at = metrics.find("\"eval/pass@1\":"); at != std::string::npos;
       at = metrics.find("\"eval/pass@1\":", at + 1))
    ++with_eval;
  EXPECT_EQ(with_eval, 3u) << metrics;
  EXPECT_NE(metrics.find("\"eval/pass@2\":"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("{\"iteration\":3,\"eval/reward_mean\":"), std::string::npos) << metrics;
  // The same command again finds the run finished: it adds nothing and drops nothing, the final
  // evaluation's record included (it dropped that record, which lies at the iteration count).
  RunResult again = run_in(dir, mpirun(2) + " train --config text.toml");
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("nothing to do"), std::string::npos) << again.out;
  EXPECT_EQ(slurp(dir / "runs" / "text" / "metrics.jsonl"), metrics);

  // rollout.tensor_parallel = 2 (both ranks decode one model, each half of every layer) rolls out
  // and evaluates what a rank per model does: the same eval lines (every eval prompt once, counted
  // once) and the same rollout statistics, on a shape whose 2 kv heads split.
  std::string seen[2];
  for (int T : {1, 2}) {
    RunResult tp = run_in(dir, mpirun(2) + " train --config text.toml --set run.name=tp" + std::to_string(T) +
                                   " --set run.iterations=1 --set rl.sft_steps=0 --set model.n_kv_heads=2"
                                   " --set rollout.tensor_parallel=" + std::to_string(T));
    ASSERT_EQ(tp.exit_code, 0) << tp.out << tp.err;
    for (std::size_t at = tp.out.find("eval 6 prompts"); at != std::string::npos; at = tp.out.find("eval 6 prompts", at + 1))
      seen[T - 1] += tp.out.substr(at, tp.out.find(" | ", tp.out.find("mean@", at)) - at) + "\n";
    const std::size_t iter = tp.out.find("iter 1/1 | ");
    ASSERT_NE(iter, std::string::npos) << tp.out;
    seen[T - 1] += tp.out.substr(iter, tp.out.find(" | loss", iter) - iter) + "\n";
  }
  EXPECT_EQ(std::count(seen[0].begin(), seen[0].end(), '\n'), 3) << seen[0];
  EXPECT_EQ(seen[1], seen[0]);

  // More eval samples than the generator has rows (2 prompts of 2 samples a rank: 4): the static
  // engine splits a prompt's samples over its batches (it stopped on an internal check) and
  // evaluates what the paged engine does.
  std::string by_engine[2];
  for (int static_engine : {0, 1}) {
    RunResult ev = run_in(dir, mpirun(2) + " train --config text.toml --set run.name=engine" +
                                   std::to_string(static_engine) + " --set run.iterations=1 --set rl.sft_steps=0"
                                   " --set rl.eval_samples=6 --set rollout.engine=" +
                                   (static_engine ? "static" : "paged"));
    ASSERT_EQ(ev.exit_code, 0) << ev.out << ev.err;
    for (std::size_t at = ev.out.find("eval 6 prompts"); at != std::string::npos; at = ev.out.find("eval 6 prompts", at + 1))
      by_engine[static_engine] += ev.out.substr(at, ev.out.find(" | ", ev.out.find("mean@", at)) - at) + "\n";
  }
  EXPECT_EQ(std::count(by_engine[0].begin(), by_engine[0].end(), '\n'), 2) << by_engine[0];
  EXPECT_NE(by_engine[0].find("pass@6"), std::string::npos) << by_engine[0];
  EXPECT_EQ(by_engine[1], by_engine[0]);

  // generate samples the trained policy with the job's tokenizer and chat template: text lines,
  // the same for the same seed.
  const std::string gen = mpirun(1) + " generate --checkpoint runs/text/checkpoints/iter_00000003.h5 --chat "
                                      "--prompt 'What is 2 + 2?' --n 2 --max-new-tokens 6 --seed 5";
  RunResult g1 = run_in(dir, gen), g2 = run_in(dir, gen);
  ASSERT_EQ(g1.exit_code, 0) << g1.err;
  EXPECT_EQ(std::count(g1.out.begin(), g1.out.end(), '\n'), 2) << g1.out;
  EXPECT_EQ(g1.out, g2.out);
  // --chat needs the model's tokenizer: a job of the byte tokenizer has none.
  write(dir / "sort.toml", "[run]\niterations = 1\n");
  RunResult no_tokenizer = run_in(dir, mpirun(1) + " generate --config sort.toml --chat --prompt hi");
  EXPECT_EQ(no_tokenizer.exit_code, 2);
  EXPECT_NE(no_tokenizer.err.find("--chat renders the prompt with the model's chat template"), std::string::npos)
      << no_tokenizer.err;

  // --chat renders as the text task does: the job's rl.template_variables and rl.system_prompt
  // (it rendered with neither, a prompt the policy never saw). A template that refuses otherwise.
  fs::create_directories(dir / "tok");
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(qwen3_dir() / file, dir / "tok" / file);
  write(dir / "tok" / "chat_template.jinja",
        "{% if enable_thinking is not defined or enable_thinking %}{{ raise_exception('thinking on') }}{% endif %}"
        "{% if messages[0].role != 'system' %}{{ raise_exception('no system prompt') }}{% endif %}"
        "{{ messages[-1].content }}");
  std::string model = tiny_qwen3_model();
  model.replace(model.find(qwen3_dir().string()), qwen3_dir().string().size(), "tok");
  write(dir / "chat.toml", "[run]\niterations = 1\n" + model +
                               "[rl]\ntask = \"text\"\ndataset = \"data/train.jsonl\"\n"
                               "template_variables = '{\"enable_thinking\": false}'\nsystem_prompt = \"Be brief.\"\n");
  RunResult rendered = run_in(dir, mpirun(1) + " generate --config chat.toml --chat --prompt hi --n 1 --max-new-tokens 2");
  EXPECT_EQ(rendered.exit_code, 0) << rendered.out << rendered.err;
}

// A reward command's "pass" is what pass_rate, pass@1 and pass@k count: every reply here is
// {"reward": 0.5, "pass": true}, so each is 1 where the reward is 0.5 (they counted rewards of
// exactly 1 only, and were 0). The command passes only requests that carry the question as the
// model saw it and as the dataset wrote it (metadata held neither the prompt nor messages).
TEST(Cli, AReplysPassIsWhatPassRateAndPassAtKCount) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  if (const std::string why = missing_reference(); !why.empty()) GTEST_SKIP() << why;
  if (std::system("python3 --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "python3 is not installed";
  fs::path dir = test_dir();
  ASSERT_EQ(make_math_data(dir, 2), "");
  write(dir / "job.toml",
        "[run]\nname = \"p\"\niterations = 1\n" + tiny_qwen3_model() +
        "[train]\nmicro_batch_size = 4\nseq_len = 128\n[rollout]\nmax_new_tokens = 8\n"
        "[rl]\ntask = \"text\"\ndataset = \"data/train.jsonl\"\neval_dataset = \"data/eval.jsonl\"\n"
        "reward = \"command\"\nreward_command = [\"python3\", \"" + std::string(SHARDRL_SOURCE_DIR) +
        "/tests/reward_commands/half_reward_passes_on_the_question.py\"]\n"
        "template_variables = '{\"enable_thinking\": false}'\nprompts_per_iteration = 2\nsamples_per_prompt = 2\n"
        "sft_steps = 0\neval_interval = 1\neval_samples = 2\n");
  RunResult r = run_in(dir, mpirun(2) + " train --config job.toml");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("eval 2 prompts | pass@1 1.000 reward 0.500 | pass@2 1.000 mean@2 0.500"), std::string::npos)
      << r.out;
  const std::string metrics = slurp(dir / "runs" / "p" / "metrics.jsonl");
  std::size_t iterations = 0;
  for (std::size_t begin = 0, end; (end = metrics.find('\n', begin)) != std::string::npos; begin = end + 1) {
    const auto record = nlohmann::json::parse(metrics.substr(begin, end - begin));
    if (!record.contains("pass_rate")) continue;
    ++iterations;
    EXPECT_EQ(record["reward_mean"].get<double>(), 0.5) << metrics;
    EXPECT_EQ(record["pass_rate"].get<double>(), 1.0) << metrics;
  }
  EXPECT_EQ(iterations, 1u) << metrics;
}

// rl.reward_timeout_s bounds one batch's scoring, and a user sets it for the rollout's: an
// evaluation scores its rows in batches no larger (here 2 requests a rank; a rank's 6 eval prompts
// x 2 samples were one batch, 1.2 s of a command replying every 0.1 s, past the 0.7 s allowed).
TEST(Cli, AnEvaluationIsScoredInBatchesOfTheRollouts) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  if (const std::string why = missing_reference(); !why.empty()) GTEST_SKIP() << why;
  if (std::system("python3 --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "python3 is not installed";
  fs::path dir = test_dir();
  ASSERT_EQ(make_math_data(dir, 12), "");
  write(dir / "job.toml",
        "[run]\nname = \"slow\"\niterations = 1\n" + tiny_qwen3_model() +
        "[train]\nmicro_batch_size = 4\nseq_len = 128\n[rollout]\nmax_new_tokens = 4\n"
        "[rl]\ntask = \"text\"\ndataset = \"data/train.jsonl\"\neval_dataset = \"data/eval.jsonl\"\n"
        "reward = \"command\"\nreward_command = [\"/bin/sh\", \"" + std::string(SHARDRL_SOURCE_DIR) +
        "/tests/reward_commands/slow_replies.sh\"]\nreward_timeout_s = 0.7\n"
        "template_variables = '{\"enable_thinking\": false}'\nprompts_per_iteration = 2\nsamples_per_prompt = 2\n"
        "sft_steps = 0\neval_interval = 1\neval_samples = 2\n");
  RunResult r = run_in(dir, mpirun(2) + " train --config job.toml");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("eval 12 prompts | pass@1 0.000 reward 0.500"), std::string::npos) << r.out;
  // A command that cannot start (its script missing) stops every rank before the warm-up, not
  // when the first rollout's batch finds it.
  RunResult missing = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=missing --set rl.sft_steps=2 "
                                              "--set 'rl.reward_command=[\"/bin/sh\", \"no_such_reward.sh\"]'");
  EXPECT_EQ(missing.exit_code, 2) << missing.out << missing.err;
  EXPECT_NE(missing.err.find("reward command `/bin/sh no_such_reward.sh`: it exited with status 2 as it started, "
                             "before any request"),
            std::string::npos)
      << missing.err;
  EXPECT_EQ(missing.out.find("warm-up 1/"), std::string::npos) << missing.out;
}

// scancel or a preemption sends SIGTERM to every process of the job step. Until the train phase
// nothing the job keeps has changed in an iteration, so a stop there saves the state the
// iteration began with and exits 3; the same command continues and ends on an uninterrupted job's
// bits. Two ways in: the reward command ends with the ranks and the scoring fails (before, the
// job failed with the command's error and lost what it had done since its last checkpoint); and
// the rank's own SIGTERM gives up the generation in progress, an evaluation's included (in the
// final one, the trained state is saved, and the next job runs that evaluation alone).
TEST(Cli, AStopMidRolloutSavesTheIterationsStartAndTheJobContinues) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  if (const std::string why = missing_reference(); !why.empty()) GTEST_SKIP() << why;
  if (std::system("python3 --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "python3 is not installed";
  if (std::system("h5diff --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "h5diff (hdf5-tools) is not installed";
  fs::path dir = test_dir();
  ASSERT_EQ(make_math_data(dir, 2), "");
  write(dir / "job.toml",
        "[run]\nname = \"a\"\niterations = 4\n" + tiny_qwen3_model() +
        "[train]\nmicro_batch_size = 4\nseq_len = 128\n[rollout]\nmax_new_tokens = 16\n[checkpoint]\ninterval = 0\n"
        "[rl]\ntask = \"text\"\ndataset = \"data/train.jsonl\"\nreward = \"command\"\n"
        "reward_command = [\"python3\", \"" + std::string(SHARDRL_SOURCE_DIR) + "/tests/reward_commands/stops_the_job.py\"]\n"
        "template_variables = '{\"enable_thinking\": false}'\nprompts_per_iteration = 4\nsamples_per_prompt = 2\n"
        "sft_steps = 0\nkl_coef = 0.01\n");
  // Each rank scores 2 prompts x 2 samples an iteration: its 9th request is iteration 3's first.
  write(dir / "stop.flag", "9\n");
  RunResult stopped = run_in(dir, mpirun(2) + " train --config job.toml");
  ASSERT_EQ(stopped.exit_code, 3) << stopped.out << stopped.err;
  EXPECT_LT(stopped.seconds, 60.0);
  EXPECT_NE(stopped.out.find("checkpoint runs/a/checkpoints/iter_00000002.h5 (stop requested by a signal)"),
            std::string::npos)
      << stopped.out;
  // Whichever the rank saw first: its command's end, or its own signal while it waited for it.
  const auto either = [](const std::string& out, const char* a, const char* b) {
    return out.find(a) != std::string::npos || out.find(b) != std::string::npos;
  };
  constexpr const char* kScoringGivenUp = "scoring given up with";
  EXPECT_TRUE(either(stopped.out, "was killed by signal 15", kScoringGivenUp)) << stopped.out;
  const std::string latest = slurp(dir / "runs" / "a" / "checkpoints" / "latest");
  EXPECT_EQ(latest, "iter_00000002.h5\n");
  const std::string metrics = slurp(dir / "runs" / "a" / "metrics.jsonl");
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 2) << "iterations 1 and 2 only:\n" << metrics;

  fs::remove(dir / "stop.flag");
  RunResult more = run_in(dir, mpirun(2) + " train --config job.toml");
  ASSERT_EQ(more.exit_code, 0) << more.out << more.err;
  EXPECT_NE(more.out.find("resumed from runs/a/checkpoints/iter_00000002.h5"), std::string::npos) << more.out;

  // SIGTERM leaves Slurm's KillWait (often 30 s), less than a rollout may take: it gives up the
  // rollout or evaluation in progress. Here the rank's signal comes just before the last reply of
  // the greedy half of the evaluation before iteration 3 (its 12th request: 3 for each
  // evaluation's greedy and sampled halves, 4 for each iteration), and the command lives on: the
  // scoring is given up (or, where the rank takes the reply before it sees the signal, the
  // sampled half's generation), and the job saves the state the iteration began with.
  write(dir / "stop.flag", "12 parent\n");
  const std::string with_eval = " --set run.name=c --set rl.eval_dataset=data/eval.jsonl --set rl.eval_interval=2 "
                                "--set rl.eval_samples=2";
  RunResult given_up = run_in(dir, mpirun(2) + " train --config job.toml" + with_eval);
  ASSERT_EQ(given_up.exit_code, 3) << given_up.out << given_up.err;
  EXPECT_TRUE(either(given_up.out, "evaluation given up: a stop was requested that leaves no time to finish it",
                     kScoringGivenUp))
      << given_up.out;
  EXPECT_NE(given_up.out.find("checkpoint runs/c/checkpoints/iter_00000002.h5 (stop requested by a signal)"),
            std::string::npos)
      << given_up.out;
  // Stopped again at once, in the same evaluation (the continued job's first request): its
  // checkpoint already holds that state, so nothing is written within the signal's grace.
  write(dir / "stop.flag", "1 parent\n");
  RunResult again = run_in(dir, mpirun(2) + " train --config job.toml" + with_eval);
  ASSERT_EQ(again.exit_code, 3) << again.out << again.err;
  EXPECT_NE(again.out.find("checkpoint runs/c/checkpoints/iter_00000002.h5 already holds this state"),
            std::string::npos)
      << again.out;
  // Continued, it is stopped the same way in the final evaluation (again its 12th request): the
  // trained state is saved without it, and the next job runs that evaluation alone.
  write(dir / "stop.flag", "12 parent\n");
  RunResult on = run_in(dir, mpirun(2) + " train --config job.toml" + with_eval);
  ASSERT_EQ(on.exit_code, 3) << on.out << on.err;
  EXPECT_NE(on.out.find("resumed from runs/c/checkpoints/iter_00000002.h5"), std::string::npos) << on.out;
  EXPECT_TRUE(either(on.out, "the trained state is saved without the final evaluation", kScoringGivenUp)) << on.out;
  // Saved before the final evaluation began (an evaluation that fails must not cost the trained
  // state), so the stop has nothing left to write.
  EXPECT_NE(on.out.find("checkpoint runs/c/checkpoints/iter_00000004.h5 (end of the job)"), std::string::npos) << on.out;
  EXPECT_NE(on.out.find("checkpoint runs/c/checkpoints/iter_00000004.h5 already holds this state"), std::string::npos)
      << on.out;
  fs::remove(dir / "stop.flag");
  RunResult last = run_in(dir, mpirun(2) + " train --config job.toml" + with_eval);
  ASSERT_EQ(last.exit_code, 0) << last.out << last.err;
  EXPECT_NE(last.out.find("the final evaluation, missing from the metrics (a stop gave it up"), std::string::npos)
      << last.out;
  const std::string c_metrics = slurp(dir / "runs" / "c" / "metrics.jsonl");
  EXPECT_EQ(std::count(c_metrics.begin(), c_metrics.end(), '\n'), 5) << c_metrics;
  EXPECT_NE(c_metrics.find("{\"iteration\":4,\"eval/reward_mean\":"), std::string::npos) << c_metrics;
  RunResult done = run_in(dir, mpirun(2) + " train --config job.toml" + with_eval);
  ASSERT_EQ(done.exit_code, 0) << done.out << done.err;
  EXPECT_NE(done.out.find("nothing to do"), std::string::npos) << done.out;
  EXPECT_EQ(slurp(dir / "runs" / "c" / "metrics.jsonl"), c_metrics);

  // A SIGTERM just before the rollout's last reply (the rank's 8th request: iteration 2's last),
  // the command living on: the scoring is given up, or, where the rank takes the reply before it
  // sees the signal, no generation is left to give up and the train phase, which cannot be, is
  // not begun. (A signal after the reply could come once the train phase had begun: then the
  // job trains and stops after the iteration, as it should, but this case would not be tested.)
  write(dir / "stop.flag", "8 parent\n");
  RunResult scoring = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=d");
  ASSERT_EQ(scoring.exit_code, 3) << scoring.out << scoring.err;
  EXPECT_TRUE(either(scoring.out, "a stop was requested before the train phase", kScoringGivenUp)) << scoring.out;
  EXPECT_NE(scoring.out.find("checkpoint runs/d/checkpoints/iter_00000001.h5 (stop requested by a signal)"),
            std::string::npos)
      << scoring.out;
  fs::remove(dir / "stop.flag");

  // The evaluations change nothing: both runs end on the uninterrupted job's bits.
  RunResult whole = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=b");
  ASSERT_EQ(whole.exit_code, 0) << whole.out << whole.err;
  for (const char* run : {"a", "c"})
    for (const char* group : {"/model", "/optim", "/reference"}) {
      RunResult diff = run_in(dir, std::string("h5diff -r runs/") + run + "/checkpoints/iter_00000004.h5 "
                                   "runs/b/checkpoints/iter_00000004.h5 " + group + " " + group);
      EXPECT_EQ(diff.exit_code, 0) << "run " << run << ": " << group << " differs from the uninterrupted job's:\n"
                                   << diff.out.substr(0, 2000);
    }
}

}  // namespace
