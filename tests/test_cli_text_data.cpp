// The text path's bad input, end to end: a dataset line's errors named by file, line and field on
// every rank before anything runs (missing fields, bad JSON, nesting, ids outside the vocabulary,
// characters the tokenizer cannot encode); prompts too long for the sequence dropped and counted.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_text_harness.hpp"

namespace {

using namespace cli_test;

// A character the model's tokenizer cannot encode (no byte fallback, no unk token) is named by
// its dataset line and part (the tokenizer's message alone named no file). A tokenizer of its
// own: BPE over a few characters, no pre-tokenizer.
TEST(Cli, ACharacterTheTokenizerCannotEncodeIsNamedByItsLine) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  std::string vocab;
  const std::string chars = "abcdefghijklmnopqrstuvwxyz0123456789 +?";
  for (std::size_t i = 0; i < chars.size(); ++i) vocab += "\"" + chars.substr(i, 1) + "\": " + std::to_string(i) + ", ";
  vocab += "\"<eos>\": " + std::to_string(chars.size());
  fs::create_directories(dir / "tok");
  write(dir / "tok" / "tokenizer.json",
        "{\"added_tokens\": [{\"id\": " + std::to_string(chars.size()) +
            ", \"content\": \"<eos>\", \"special\": true, \"normalized\": false, \"lstrip\": false, "
            "\"rstrip\": false, \"single_word\": false}], \"normalizer\": null, \"pre_tokenizer\": null, "
            "\"model\": {\"type\": \"BPE\", \"unk_token\": null, \"byte_fallback\": false, \"vocab\": {" + vocab +
            "}, \"merges\": []}}");
  write(dir / "tok" / "tokenizer_config.json", "{\"eos_token\": \"<eos>\"}");
  write(dir / "job.toml", "[run]\niterations = 1\n[model]\npreset = \"custom\"\ntokenizer = \"tok\"\nvocab_size = 64\n"
                          "[train]\nseq_len = 32\n[rollout]\nmax_new_tokens = 8\n[rl]\ntask = \"text\"\n"
                          "dataset = \"d.jsonl\"\nchat_template = false\nprompts_per_iteration = 2\n"
                          "samples_per_prompt = 2\n");
  write(dir / "d.jsonl", "{\"prompt\": \"1+1?\", \"answer\": \"2\"}\n{\"prompt\": \"caf\\u00e9?\", \"answer\": \"3\"}\n");
  RunResult prompt = run_in(dir, mpirun(2) + " train --config job.toml");
  EXPECT_EQ(prompt.exit_code, 2) << prompt.out << prompt.err;
  EXPECT_NE(prompt.err.find("d.jsonl:2: the prompt: the tokenizer cannot encode the character \\xc3\\xa9"),
            std::string::npos)
      << prompt.err;
  write(dir / "d.jsonl", "{\"prompt\": \"1+1?\", \"answer\": \"2\", \"solution\": \"two \\u00e9\"}\n");
  RunResult solution = run_in(dir, mpirun(2) + " train --config job.toml --set rl.solution_key=solution");
  EXPECT_EQ(solution.exit_code, 2) << solution.out << solution.err;
  EXPECT_NE(solution.err.find("d.jsonl:1: the answer or solution: the tokenizer cannot encode"), std::string::npos)
      << solution.err;
}

// Bad text data is named by file, line and field, on every rank, before anything runs; prompts
// too long for the sequence are dropped and counted.
TEST(Cli, TextTaskDataErrorsNameFileLineAndField) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  if (const std::string why = missing_reference(); !why.empty()) GTEST_SKIP() << why;
  fs::path dir = test_dir();
  const std::string job = "[run]\niterations = 1\n" + tiny_qwen3_model() +
                          "[train]\nmicro_batch_size = 4\nseq_len = 64\n[rollout]\nmax_new_tokens = 16\n"
                          "[rl]\ntask = \"text\"\ndataset = \"d.jsonl\"\nprompts_per_iteration = 2\nsamples_per_prompt = 2\n";
  write(dir / "job.toml", job);
  // Two ranks where the test is that every rank stops (the first refusal, the long prompts); one
  // rank, without mpirun's start-up, for the other lines' messages (the same check on each rank).
  auto run_with = [&](const std::string& lines, int ranks = 1) {
    write(dir / "d.jsonl", lines);
    const std::string launch = ranks == 1 ? shardrl_binary() : mpirun(ranks);
    return run_in(dir, launch + " train --config job.toml --no-resume --overwrite");
  };
  RunResult missing = run_with("{\"prompt\": \"1+1?\", \"answer\": \"2\"}\n{\"prompt\": \"2+2?\"}\n", 2);
  EXPECT_EQ(missing.exit_code, 2) << missing.out << missing.err;
  EXPECT_NE(missing.err.find("d.jsonl:2: missing field \"answer\""), std::string::npos) << missing.err;
  RunResult bad_json = run_with("{\"prompt\": \"1+1?\", \"answer\": 2}\n{oops\n");
  EXPECT_EQ(bad_json.exit_code, 2);
  EXPECT_NE(bad_json.err.find("d.jsonl:2: not valid JSON"), std::string::npos) << bad_json.err;
  // A line nested past 512 levels is refused as it is parsed (100,000 levels crashed the job).
  RunResult deep = run_with("{\"prompt\": \"1+1?\", \"answer\": 2}\n{\"messages\": " + std::string(100000, '[') +
                            std::string(100000, ']') + ", \"answer\": 2}\n");
  EXPECT_EQ(deep.exit_code, 2) << deep.out << deep.err;
  EXPECT_NE(deep.err.find("d.jsonl:2: JSON nested deeper than 512 levels"), std::string::npos) << deep.err;
  // A number JSON cannot hold (nlohmann's out_of_range, not a parse_error) is the line's error.
  RunResult huge = run_with("{\"prompt\": \"1+1?\", \"answer\": 1e999}\n");
  EXPECT_EQ(huge.exit_code, 2) << huge.out << huge.err;
  EXPECT_NE(huge.err.find("d.jsonl:1: not valid JSON"), std::string::npos) << huge.err;
  RunResult no_prompt = run_with("{\"question\": \"1+1?\", \"answer\": 2}\n");
  EXPECT_EQ(no_prompt.exit_code, 2);
  EXPECT_NE(no_prompt.err.find("d.jsonl:1: missing string field \"prompt\" (or \"messages\")"), std::string::npos)
      << no_prompt.err;
  // 64 + 1 - 16 = 49 prompt tokens at most (a prompt and its completion fill seq_len + 1 tokens):
  // the long prompt is dropped and counted, the job runs.
  std::string long_prompt(400, 'x');
  for (std::size_t i = 0; i < long_prompt.size(); i += 2) long_prompt[i] = ' ';
  RunResult dropped = run_with("{\"prompt\": \"1+1?\", \"answer\": 2}\n{\"prompt\": \"" + long_prompt +
                               "\", \"answer\": 1}\n", 2);
  EXPECT_EQ(dropped.exit_code, 0) << dropped.out << dropped.err;
  EXPECT_NE(dropped.out.find("dropped 1 prompt(s) longer than 49 tokens"), std::string::npos) << dropped.out;
  RunResult all_dropped = run_with("{\"prompt\": \"" + long_prompt + "\", \"answer\": 1}\n", 2);
  EXPECT_EQ(all_dropped.exit_code, 2);
  EXPECT_NE(all_dropped.err.find("has no usable example (1 dropped as longer than 49 tokens)"), std::string::npos)
      << all_dropped.err;

  // A prompt whose ids the model's vocabulary lacks is named by its file and line when the job
  // starts, exit 2: a training line (the chat template's <|im_start|> is 151644), and an eval
  // line (it was an internal check on the rank that held it, exit 1, then named only at the first
  // evaluation). Without the template the training line's ids are all under 1 000.
  write(dir / "e.jsonl", "{\"prompt\": \"What is the capital of France?\", \"answer\": 6}\n");
  write(dir / "d.jsonl", "{\"prompt\": \"1+1?\", \"answer\": 2}\n");
  const std::string small_vocabulary = mpirun(2) + " train --config job.toml --no-resume --overwrite --set "
                                                   "model.vocab_size=1000 --set rl.sft_steps=0 --set rl.eos_id=5";
  RunResult train_ids = run_in(dir, small_vocabulary);
  EXPECT_EQ(train_ids.exit_code, 2) << train_ids.out << train_ids.err;
  EXPECT_NE(train_ids.err.find("d.jsonl:1: field \"prompt_ids\" element 0 is id 151644, outside the model's "
                               "vocabulary (model.vocab_size = 1000; every line is checked when the job starts)"),
            std::string::npos)
      << train_ids.err;
  RunResult eval_ids = run_in(dir, small_vocabulary + " --set rl.chat_template=false --set rl.eval_dataset=e.jsonl "
                                                      "--set rl.eval_interval=1");
  EXPECT_EQ(eval_ids.exit_code, 2) << eval_ids.out << eval_ids.err;
  EXPECT_NE(eval_ids.err.find("e.jsonl:1: field \"prompt_ids\" element "), std::string::npos) << eval_ids.err;
  EXPECT_NE(eval_ids.err.find("(model.vocab_size = 1000; every eval line is checked when the job starts)"),
            std::string::npos)
      << eval_ids.err;
  EXPECT_EQ(eval_ids.out.find("iter 1/"), std::string::npos) << "stopped before any iteration: " << eval_ids.out;
  // Ranks that read different eval files (rank 1's node-local copy stale, here its own
  // directory's) stop at the start, naming it: each evaluates its share of the lines, so the
  // evaluation measured other prompts than either file's, or its ranks made other collectives
  // and waited for the watchdog.
  for (const char* sub : {"a", "b"}) {
    fs::create_directories(dir / sub);
    write(dir / sub / "d.jsonl", "{\"prompt\": \"1+1?\", \"answer\": 2}\n");
  }
  write(dir / "a" / "e.jsonl", "{\"prompt\": \"2+2?\", \"answer\": 4}\n");
  write(dir / "b" / "e.jsonl", "{\"prompt\": \"2+2?\", \"answer\": 4}\n{\"prompt\": \"3+3?\", \"answer\": 6}\n");
  RunResult split = run_in(dir, mpirun_in_two_dirs(dir / "a", dir / "b",
                                                   " train --config " + (dir / "job.toml").string() + " --set run.dir=" +
                                                       (dir / "split").string() +
                                                       " --set rl.eval_dataset=e.jsonl --set rl.eval_interval=1"));
  EXPECT_EQ(split.exit_code, 2) << split.out << split.err;
  EXPECT_NE(split.err.find("rank 1 read another rl.eval_dataset than rank 0 (checksums "), std::string::npos)
      << split.err;
  // The tokenizer's end-of-completion id (<|im_end|>, 151645) past model.vocab_size: named when the
  // job starts (it ended completions, padded rows and targeted the warm-up past the embedding).
  RunResult eos = run_in(dir, mpirun(2) + " train --config job.toml --no-resume --overwrite --set model.vocab_size=151643");
  EXPECT_EQ(eos.exit_code, 2) << eos.out << eos.err;
  EXPECT_NE(eos.err.find("the end-of-completion id 151645 (the tokenizer's eos token) is outside the model's "
                         "vocabulary (model.vocab_size = 151643)"),
            std::string::npos)
      << eos.err;
  // Lines refused with their field: an empty answer (it would reward stopping at once) or solution, a
  // solution that is not text, a malformed first message beside rl.system_prompt, and content
  // that is not text without a chat template (each was taken silently, or an unexpected error).
  const struct {
    const char* line;
    const char* sets;
    const char* message;
  } refused_lines[] = {
      {"{\"prompt\": \"1+1?\", \"answer\": \" \"}", "", "d.jsonl:1: field \"answer\" is empty"},
      // A number JSON reads as a double past 2^53 has lost digits the grader would miss.
      {"{\"prompt\": \"big?\", \"answer\": 12345678901234567890123}", "",
       "d.jsonl:1: field \"answer\" is the number 1.2345678901234568e+22, too large to read exactly as a JSON number; "
       "write it as a string"},
      {"{\"prompt\": \"1+1?\", \"answer\": 2, \"solution\": [\"1+1\", \"=2\"]}", "",
       "d.jsonl:1: field \"solution\" must be a string, got array"},
      {"{\"prompt\": \"1+1?\", \"answer\": 2, \"solution\": \" \"}", "", "d.jsonl:1: field \"solution\" is empty"},
      {"{\"messages\": [\"hi\"], \"answer\": 1}", " --set 'rl.system_prompt=\"Be brief.\"'",
       "d.jsonl:1: every message needs a string \"role\" and a \"content\""},
      {"{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}], \"answer\": 1}",
       " --set rl.chat_template=false",
       "d.jsonl:1: a message's \"content\" must be a string without a chat template (rl.chat_template = false), "
       "got array"},
  };
  for (const auto& k : refused_lines) {
    write(dir / "d.jsonl", std::string(k.line) + "\n");
    RunResult r = run_in(dir, shardrl_binary() + " train --config job.toml --no-resume --overwrite" + k.sets);
    EXPECT_EQ(r.exit_code, 2) << k.line << r.out << r.err;
    EXPECT_NE(r.err.find(k.message), std::string::npos) << k.line << ": " << r.err;
  }

  // A chat template's own refusal (raise_exception, here Llama 2's rule that roles alternate) is
  // named with the dataset line it refused, not only the template's position.
  const fs::path strict = dir / "strict_tokenizer";
  fs::create_directories(strict);
  fs::copy_file(qwen3_dir() / "tokenizer.json", strict / "tokenizer.json", fs::copy_options::overwrite_existing);
  write(strict / "tokenizer_config.json",
        "{\"eos_token\": \"<|im_end|>\", \"chat_template\": \"{%- for m in messages %}{%- if (m['role'] == 'user') != "
        "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate') }}{%- endif %}"
        "{{ m['content'] }}{%- endfor %}\"}");
  write(dir / "d.jsonl", "{\"prompt\": \"1+1?\", \"answer\": 2}\n"
                         "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", "
                         "\"content\": \"b\"}], \"answer\": 1}\n");
  RunResult refused = run_in(dir, mpirun(2) + " train --config job.toml --no-resume --overwrite --set model.tokenizer=" +
                                      strict.string());
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("d.jsonl:2: "), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("raise_exception: Conversation roles must alternate"), std::string::npos) << refused.err;
}

}  // namespace
