// LoRA from the command line: a run's adapters exported as PEFT saves them; adapters over a
// pretrained base (model.init_from) that resume over it wherever it moved and refuse another;
// PEFT adapters imported (lora.init_from); the merged model exported (convert --merged).
#include <cmath>
#include <sstream>

#include "checkpoint_tensors.hpp"
#include "cli_harness.hpp"

namespace {

using namespace cli_test;

// A small RL job that checkpoints: 2 ranks, the tiny model, 4 prompts x 4 samples.
const char* kJob =
    "[run]\nname = \"ck\"\n[train]\nseq_len = 32\n[rollout]\nmax_new_tokens = 8\n"
    "[rl]\nprompts_per_iteration = 4\nsamples_per_prompt = 4\nsft_steps = 2\nkl_coef = 0.1\n";

// Adapters of rank 4 on every linear layer. In fp32: a LoRA job keeps its base in the compute type
// only, so in bf16 the merged model would be the base's bf16 rounding plus B A.
std::string with_lora(const std::string& job) {
  return job + "[model]\nprecision = \"fp32\"\n[lora]\nrank = 4\nalpha = 8.0\n";
}

// A LoRA run's checkpoint: `convert --to-peft` writes its adapters as PEFT saves them (every
// adapter under base_model.model.<name>, values equal to the checkpoint's, fp32 and bf16; the
// adapter config naming rank, alpha and the targeted modules); --to-safetensors is refused with
// the reason, as is --to-peft of a run without adapters.
TEST(Cli, ConvertExportsALoraRunsAdaptersAsPeft) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", std::string(kJob) + "[lora]\nrank = 4\nalpha = 8.0\ntargets = [\"q\", \"v\", \"down\"]\n");
  RunResult train = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=1");
  ASSERT_EQ(train.exit_code, 0) << train.err;
  // The start-up report names the KL reference (it said "none" though the KL was measured).
  EXPECT_NE(train.out.find("reference policy         the frozen base (LoRA; rl.kl_coef > 0)"), std::string::npos)
      << train.out;
  const fs::path ckpt = dir / "runs" / "ck" / "checkpoints" / "iter_00000001.h5";
  for (const char* dtype : {"fp32", "bf16"}) {
    const fs::path out = dir / (std::string("peft_") + dtype);
    RunResult conv = run_in(dir, shardrl_binary() + " convert --from " + ckpt.string() + " --to-peft " + out.string() +
                                     " --dtype " + dtype);
    ASSERT_EQ(conv.exit_code, 0) << conv.err;
    const std::string config = slurp(out / "adapter_config.json");
    for (const char* field : {"\"peft_type\": \"LORA\"", "\"task_type\": \"CAUSAL_LM\"", "\"r\": 4", "\"lora_alpha\": 8.0",
                              "\"q_proj\"", "\"v_proj\"", "\"down_proj\""})
      EXPECT_NE(config.find(field), std::string::npos) << field << " in " << config;
    EXPECT_EQ(config.find("\"k_proj\""), std::string::npos) << config;
    const shardrl::SafetensorsFile adapters(out / "adapter_model.safetensors");
    for (const shardrl::StTensor& t : adapters.header().tensors)
      EXPECT_NE(t.name.find(".lora_"), std::string::npos) << t.name;
    EXPECT_EQ(expect_tensors_are_the_checkpoints(out / "adapter_model.safetensors", ckpt, dtype, "base_model.model."),
              2 * 3 * 2)
        << "A and B of 3 targets in each of the tiny model's 2 layers";
  }
  // Without --dtype the adapters as trained (fp32); another run's adapters in the directory are
  // refused, and removed with --force.
  fs::create_directories(dir / "peft_default");
  write(dir / "peft_default" / "adapter_model.bin", "another run's");
  const std::string to_default = shardrl_binary() + " convert --from " + ckpt.string() + " --to-peft peft_default";
  RunResult other_adapters = run_in(dir, to_default);
  EXPECT_EQ(other_adapters.exit_code, 2) << other_adapters.out;
  EXPECT_NE(other_adapters.err.find("peft_default' holds adapter_model.bin: another run's adapters"), std::string::npos)
      << other_adapters.err;
  RunResult default_dtype = run_in(dir, to_default + " --force");
  ASSERT_EQ(default_dtype.exit_code, 0) << default_dtype.err;
  EXPECT_FALSE(fs::exists(dir / "peft_default" / "adapter_model.bin"));
  EXPECT_EQ(slurp(dir / "peft_default" / "adapter_model.safetensors"), slurp(dir / "peft_fp32" / "adapter_model.safetensors"));
  // generate samples the checkpoint's own model: its adapters over the random base its run drew
  // (--seed seeds the draws only: it drew another base, which was then refused), and never under
  // another alpha, other targets or another shape (each read the tensors into that model).
  const std::string gen = shardrl_binary() + " generate --checkpoint " + ckpt.string() +
                          " --prompt-ids \"256 97\" --n 2 --max-new-tokens 6";
  RunResult drawn = run_in(dir, gen), seeded = run_in(dir, gen + " --seed 7");
  ASSERT_EQ(drawn.exit_code, 0) << drawn.err;
  ASSERT_EQ(seeded.exit_code, 0) << seeded.err;
  EXPECT_NE(seeded.out, drawn.out) << "another seed, other draws";
  const std::string other_model = ckpt.string() + ": the checkpoint's model is not this job's: ";
  RunResult alpha = run_in(dir, gen + " --set lora.alpha=800.0");
  EXPECT_EQ(alpha.exit_code, 2) << alpha.out;
  EXPECT_NE(alpha.err.find(other_model + "lora.alpha is 8 in the checkpoint's run and 800 here"), std::string::npos)
      << alpha.err;
  RunResult targets = run_in(dir, gen + " --set 'lora.targets=[\"q\"]'");
  EXPECT_EQ(targets.exit_code, 2) << targets.out;
  EXPECT_NE(targets.err.find(other_model + "lora.targets is [\"q\", \"v\", \"down\"] in the checkpoint's run and "
                                           "[\"q\"] here"),
            std::string::npos)
      << targets.err;
  RunResult layers = run_in(dir, gen + " --set model.preset=custom --set model.n_layers=1");
  EXPECT_EQ(layers.exit_code, 2) << layers.out;
  EXPECT_NE(layers.err.find(other_model), std::string::npos) << layers.err;
  RunResult merged = run_in(dir, shardrl_binary() + " convert --from " + ckpt.string() + " --to-safetensors merged");
  EXPECT_EQ(merged.exit_code, 2);
  EXPECT_NE(merged.err.find("holds its adapters only: --to-peft exports them"), std::string::npos) << merged.err;
  RunResult plain = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=full --set lora.rank=0 "
                                            "--set lora.alpha=16.0 --set 'lora.targets=[\"q\", \"k\", \"v\", \"o\", "
                                            "\"gate\", \"up\", \"down\"]' --set run.iterations=1");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  RunResult not_lora = run_in(dir, shardrl_binary() + " convert --from runs/full/checkpoints/iter_00000001.h5 --to-peft p");
  EXPECT_EQ(not_lora.exit_code, 2);
  EXPECT_NE(not_lora.err.find("is not a LoRA run's checkpoint"), std::string::npos) << not_lora.err;
  // Resumed with fewer targets, allowed: the adapters of the targets dropped are not loaded, and
  // the job says so (only the config change's line said anything).
  RunResult fewer = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=2 --allow-config-change "
                                            "--set 'lora.targets=[\"q\"]'");
  ASSERT_EQ(fewer.exit_code, 0) << fewer.err;
  EXPECT_NE((fewer.out + fewer.err).find("iter_00000001.h5 holds adapters on lora.targets \"v\", \"down\" that this "
                                         "job does not name: they are not loaded"),
            std::string::npos)
      << fewer.out << fewer.err;
  // LoRA changes a resume cannot make, allowed or not, are named as such (they were a missing or
  // misshapen tensor's message): LoRA off, another rank, a target added; LoRA over a full run.
  const std::string resume = " train --config job.toml --set run.iterations=3 --allow-config-change";
  RunResult off = run_in(dir, mpirun(2) + resume + " --set lora.rank=0 --set lora.alpha=16.0 --set 'lora.targets=[\"q\", "
                                                   "\"k\", \"v\", \"o\", \"gate\", \"up\", \"down\"]'");
  EXPECT_EQ(off.exit_code, 2) << off.out;
  EXPECT_NE(off.err.find("iter_00000002.h5 is a LoRA run's (lora.rank = 4): it holds its base frozen in bf16"),
            std::string::npos)
      << off.err;
  EXPECT_NE(off.err.find("--to-safetensors DIR --merged`, then `--set model.init_from=DIR`"), std::string::npos)
      << off.err;
  RunResult rank = run_in(dir, shardrl_binary() + resume + " --set lora.rank=8");
  EXPECT_EQ(rank.exit_code, 2) << rank.out;
  EXPECT_NE(rank.err.find("holds adapters of lora.rank = 4, and a resume cannot change their rank to 8"),
            std::string::npos)
      << rank.err;
  RunResult added = run_in(dir, shardrl_binary() + resume + " --set 'lora.targets=[\"q\", \"v\"]'");
  EXPECT_EQ(added.exit_code, 2) << added.out;
  EXPECT_NE(added.err.find("holds no adapters on lora.targets \"v\", and a resume cannot start new ones"),
            std::string::npos)
      << added.err;
  RunResult onto_full = run_in(dir, shardrl_binary() + " train --config job.toml --set run.name=full "
                                                       "--set run.iterations=2 --allow-config-change");
  EXPECT_EQ(onto_full.exit_code, 2) << onto_full.out;
  EXPECT_NE(onto_full.err.find("is a full run's (lora.rank = 0): it holds no adapters for lora.rank = 4"),
            std::string::npos)
      << onto_full.err;
}

// A pretrained base (a full run's fp32 export) under LoRA adapters: the run resumes over the base
// wherever its directory moved (the checkpoint records its tensors' checksum) and refuses another
// base (the same model rounded to bf16); `convert --to-peft` and `lora.init_from` round-trip the
// adapters exactly; `convert --merged` writes W + (alpha / rank) B A for every adapted weight and
// the base's other tensors unchanged, and greedy decoding of the merged model draws what the
// adapters over the base draw. lora.init_from's config is checked against the job's.
TEST(Cli, LoraOverAPretrainedBase) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", kJob);
  write(dir / "lora.toml", with_lora(kJob));
  RunResult full = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=1");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  for (const char* dtype : {"fp32", "bf16"}) {
    RunResult conv = run_in(dir, shardrl_binary() + " convert --from runs/ck/checkpoints/iter_00000001.h5 "
                                 "--to-safetensors base_" + dtype + " --dtype " + dtype);
    ASSERT_EQ(conv.exit_code, 0) << conv.err;
  }
  const std::string base = (dir / "base_fp32").string();
  const std::string lora = mpirun(2) + " train --config lora.toml --set run.name=lb ";
  RunResult first = run_in(dir, lora + "--set model.init_from=" + base + " --set run.iterations=2");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE((first.out + first.err).find("frozen base from"), std::string::npos) << first.out;
  fs::copy(dir / "base_fp32", dir / "moved", fs::copy_options::recursive);
  RunResult moved = run_in(dir, lora + "--set model.init_from=moved --set run.iterations=3");
  ASSERT_EQ(moved.exit_code, 0) << moved.err;
  EXPECT_NE((moved.out + moved.err).find("resumed from"), std::string::npos) << moved.out;
  RunResult other = run_in(dir, lora + "--set model.init_from=base_bf16 --set run.iterations=4");
  EXPECT_EQ(other.exit_code, 2) << other.out;
  EXPECT_NE(other.err.find("its LoRA adapters were trained over another base (model.init_from = moved, tensors' "
                           "checksum "),
            std::string::npos)
      << other.err;
  EXPECT_NE(other.err.find("this job's base is model.init_from = base_bf16, tensors' checksum "), std::string::npos)
      << other.err;

  // PEFT out and in: the imported run's adapters are the exported ones, bit for bit.
  const std::string ckpt = "runs/lb/checkpoints/iter_00000003.h5";
  RunResult peft = run_in(dir, shardrl_binary() + " convert --from " + ckpt + " --to-peft peft --dtype fp32");
  ASSERT_EQ(peft.exit_code, 0) << peft.err;
  // The base PEFT loads, as a path from anywhere (the run's model.init_from = moved, relative).
  EXPECT_NE(slurp(dir / "peft" / "adapter_config.json")
                .find("\"base_model_name_or_path\": \"" + fs::absolute(dir / "moved").lexically_normal().string() + "\""),
            std::string::npos)
      << slurp(dir / "peft" / "adapter_config.json");
  RunResult import = run_in(dir, mpirun(2) + " train --config lora.toml --set run.name=imp --set run.iterations=0 "
                                 "--set rl.sft_steps=0 --set model.init_from=" + base + " --set lora.init_from=peft");
  ASSERT_EQ(import.exit_code, 0) << import.err;
  EXPECT_EQ(expect_tensors_are_the_checkpoints(dir / "peft" / "adapter_model.safetensors",
                                               dir / "runs" / "imp" / "checkpoints" / "iter_00000000.h5", "fp32",
                                               "base_model.model."),
            2 * 7 * 2)
      << "A and B of the 7 targets in each of the tiny model's 2 layers";
  // Only the fresh run reads lora.init_from: the resumed one takes its adapters from its
  // checkpoint, with the PEFT directory gone (it was read again, and its absence stopped the job).
  fs::rename(dir / "peft", dir / "peft_away");
  RunResult resumed = run_in(dir, mpirun(2) + " train --config lora.toml --set run.name=imp --set run.iterations=1 "
                                  "--set rl.sft_steps=0 --set model.init_from=" + base + " --set lora.init_from=peft");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  fs::rename(dir / "peft_away", dir / "peft");

  // The merged model, against the test's own fp64 merge of the base and the exported adapters.
  RunResult merged = run_in(dir, shardrl_binary() + " convert --from " + ckpt + " --to-safetensors merged --merged "
                                 "--dtype fp32");
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  // The base moved again since: --merged names --base, and with it writes the same model (the
  // base's tensors' checksum is the run's).
  fs::rename(dir / "moved", dir / "moved_again");
  RunResult base_gone = run_in(dir, shardrl_binary() + " convert --from " + ckpt + " --to-safetensors merged2 "
                                    "--merged --dtype fp32");
  EXPECT_EQ(base_gone.exit_code, 2) << base_gone.out;
  EXPECT_NE(base_gone.err.find("--merged: the run's base, model.init_from = 'moved', is not a directory here: pass "
                               "--base DIR"),
            std::string::npos)
      << base_gone.err;
  RunResult with_base = run_in(dir, shardrl_binary() + " convert --from " + ckpt + " --to-safetensors merged2 "
                                    "--merged --dtype fp32 --base moved_again");
  ASSERT_EQ(with_base.exit_code, 0) << with_base.err;
  EXPECT_EQ(slurp(dir / "merged2" / "model.safetensors"), slurp(dir / "merged" / "model.safetensors"));
  // generate, the same: the checkpoint under its own config names --base, and samples with it.
  const std::string sample = shardrl_binary() + " generate --checkpoint " + ckpt + " --prompt-ids \"256 97 98\" --n 1 "
                                                "--max-new-tokens 8 --temperature 0 --set model.precision=fp32";
  RunResult gen_gone = run_in(dir, sample);
  EXPECT_EQ(gen_gone.exit_code, 2) << gen_gone.out;
  EXPECT_NE(gen_gone.err.find("the run's base, model.init_from = 'moved', is not a directory here: pass --base DIR"),
            std::string::npos)
      << gen_gone.err;
  RunResult gen_base = run_in(dir, sample + " --base moved_again");
  ASSERT_EQ(gen_base.exit_code, 0) << gen_base.err;
  RunResult gen_no_ckpt =
      run_in(dir, shardrl_binary() + " generate --config lora.toml --prompt-ids 256 --base moved_again");
  EXPECT_EQ(gen_no_ckpt.exit_code, 2) << gen_no_ckpt.out;
  EXPECT_NE(gen_no_ckpt.err.find("--base"), std::string::npos) << gen_no_ckpt.err;
  fs::rename(dir / "moved_again", dir / "moved");
  const shardrl::SafetensorsFile m(dir / "merged" / "model.safetensors"), b(dir / "base_fp32" / "model.safetensors"),
      adapters(dir / "peft" / "adapter_model.safetensors");
  ASSERT_EQ(m.header().tensors.size(), b.header().tensors.size());
  int adapted = 0;
  float largest_b = 0;
  for (const shardrl::StTensor& t : b.header().tensors) {
    const std::vector<float> w = b.read_f32(t.name), got = m.read_f32(t.name);
    ASSERT_EQ(got.size(), w.size()) << t.name;
    const std::string stem = "base_model.model." + t.name.substr(0, t.name.size() - std::string(".weight").size());
    if (!adapters.find(stem + ".lora_A.weight")) {
      EXPECT_EQ(got, w) << t.name << ": not adapted, so the base's";
      continue;
    }
    ++adapted;
    const std::vector<float> A = adapters.read_f32(stem + ".lora_A.weight"), B = adapters.read_f32(stem + ".lora_B.weight");
    const std::int64_t out = t.shape[0], in = t.shape[1], r = 4;
    for (float v : B) largest_b = std::max(largest_b, std::fabs(v));
    for (std::int64_t i = 0; i < out; ++i)
      for (std::int64_t j = 0; j < in; ++j) {
        double ba = 0;
        for (std::int64_t k = 0; k < r; ++k) ba += double(B[i * r + k]) * A[k * in + j];
        const double want = w[i * in + j] + 8.0 / 4.0 * ba;
        ASSERT_NEAR(got[i * in + j], want, 1e-7 + 1e-6 * std::fabs(want)) << t.name << "[" << i << ", " << j << "]";
      }
  }
  EXPECT_EQ(adapted, 2 * 7);
  EXPECT_GT(largest_b, 1e-4f) << "B moved from zero in training: otherwise the merge is not tested";
  // Greedy decoding: the adapters over the base (the checkpoint) and the merged model agree.
  const std::string gen = shardrl_binary() + " generate --prompt-ids \"256 97 98\" --n 1 --max-new-tokens 8 "
                                             "--temperature 0 --set model.precision=fp32 ";
  RunResult adapted_run = run_in(dir, gen + "--config lora.toml --checkpoint " + ckpt + " --set model.init_from=" + base);
  RunResult merged_run = run_in(dir, gen + "--config job.toml --set model.init_from=merged");
  ASSERT_EQ(adapted_run.exit_code, 0) << adapted_run.err;
  ASSERT_EQ(merged_run.exit_code, 0) << merged_run.err;
  EXPECT_EQ(adapted_run.out, merged_run.out);
  EXPECT_EQ(gen_base.out, adapted_run.out) << "generate --base: the run's model over its base where it is now";
  RunResult base_run = run_in(dir, gen + "--config job.toml --set model.init_from=" + base);
  ASSERT_EQ(base_run.exit_code, 0) << base_run.err;
  EXPECT_NE(base_run.out, adapted_run.out) << "the adapters change what is drawn: otherwise the comparison is blind";

  // lora.init_from's adapters must be what the job's [lora] describes.
  const std::string fresh = mpirun(2) + " train --config lora.toml --set run.name=bad --set run.iterations=0 "
                                        "--set model.init_from=" + base + " --set lora.init_from=peft ";
  RunResult rank = run_in(dir, fresh + "--set lora.rank=8");
  EXPECT_EQ(rank.exit_code, 2);
  EXPECT_NE(rank.err.find("adapter_config.json: r = 4, and this job's lora.rank = 8 (set lora.rank to the adapter's)"),
            std::string::npos)
      << rank.err;
  RunResult targets = run_in(dir, fresh + "--set 'lora.targets=[\"q\", \"v\"]'");
  EXPECT_EQ(targets.exit_code, 2);
  EXPECT_NE(targets.err.find("which differ from this job's lora.targets (set lora.targets = [\"q\", \"k\", \"v\", "
                             "\"o\", \"gate\", \"up\", \"down\"])"),
            std::string::npos)
      << targets.err;
  RunResult no_base = run_in(dir, mpirun(2) + " train --config lora.toml --set run.name=bad2 --set lora.init_from=peft");
  EXPECT_EQ(no_base.exit_code, 2);
  EXPECT_NE(no_base.err.find("set model.init_from to that base's directory"), std::string::npos) << no_base.err;
  // An adapter directory only rank 0 can see (a relative path, rank 1 started elsewhere): every
  // rank stops with rank 1's message, promptly (the read was outside the load's agreement).
  fs::create_directories(dir / "elsewhere");
  RunResult one_sided = run_in(dir, mpirun_in_two_dirs(dir, dir / "elsewhere",
                                                       " train --config " + (dir / "lora.toml").string() +
                                                           " --set run.name=bad3 --set run.iterations=0 --set run.dir=" +
                                                           (dir / "runs").string() + " "
                                                           "--set model.init_from=" + base + " --set lora.init_from=peft"));
  EXPECT_EQ(one_sided.exit_code, 2) << one_sided.out << one_sided.err;
  EXPECT_NE(one_sided.err.find("peft/adapter_"), std::string::npos) << one_sided.err;
  EXPECT_LT(one_sided.seconds, 60.0);
}

}  // namespace
