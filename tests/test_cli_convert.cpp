// End-to-end tests of `convert` and `model.init_from`: a checkpoint exported as a Hugging Face
// directory and imported back (by a job and by `convert --from-safetensors`), bit for bit; existing
// outputs never replaced without --force; a directory's config.json giving a job its shape.
#include <hdf5.h>

#include "checkpoint_tensors.hpp"
#include "cli_harness.hpp"
#include "io/safetensors.hpp"

namespace {

using namespace cli_test;

// `convert` both ways and `model.init_from`: every /model tensor of a checkpoint under its Hugging Face name,
// bit for bit in fp32 and rounded once to bf16, with a config.json naming the architecture;
// a missing checkpoint is refused.
TEST(Cli, ConvertExportsAndInitFromImportsSafetensors) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", kCheckpointJob);
  RunResult train = run_in(dir, mpirun(2) + " train --config job.toml --set run.iterations=1");
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const fs::path ckpt = dir / "runs" / "ck" / "checkpoints" / "iter_00000001.h5";
  for (const char* dtype : {"fp32", "bf16"}) {
    const fs::path out = dir / (std::string("hf_") + dtype);
    RunResult conv = run_in(dir, shardrl_binary() + " convert --from " + ckpt.string() + " --to-safetensors " + out.string() +
                                     " --dtype " + dtype);
    ASSERT_EQ(conv.exit_code, 0) << conv.err;
    const std::string config = slurp(out / "config.json");
    EXPECT_NE(config.find("\"model_type\": \"qwen3\""), std::string::npos) << config;
    EXPECT_NE(config.find("\"rms_norm_eps\": 1e-06"), std::string::npos) << config;
    EXPECT_EQ(expect_tensors_are_the_checkpoints(out / "model.safetensors", ckpt, dtype), 25)
        << "every parameter of the tiny model";
  }
  // The fp32 export imported into a fresh job of no iterations (model.init_from, 2 ranks, each
  // reading its slices) is the checkpoint's /model again, bit for bit.
  RunResult import = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=imported --set run.iterations=0 "
                                             "--set rl.sft_steps=0 --set model.init_from=" + (dir / "hf_fp32").string());
  ASSERT_EQ(import.exit_code, 0) << import.err;
  const fs::path again = dir / "runs" / "imported" / "checkpoints" / "iter_00000000.h5";
  ASSERT_TRUE(fs::exists(again)) << import.out;
  // And through `convert --from-safetensors --to` (2 ranks, a checkpoint at iteration 0).
  const fs::path converted = dir / "converted.h5";
  RunResult back = run_in(dir, mpirun(2) + " convert --from-safetensors " + (dir / "hf_fp32").string() + " --to " +
                                   converted.string());
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_FALSE(fs::exists(converted.string() + ".convert.d"));
  for (const fs::path& copy : {again, converted}) {
    hid_t a = H5Fopen(ckpt.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), b = H5Fopen(copy.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(b, 0) << copy;
    shardrl::SafetensorsFile st(dir / "hf_fp32" / "model.safetensors");
    for (const shardrl::StTensor& t : st.header().tensors) {
      std::vector<float> x(static_cast<std::size_t>(t.numel())), y(x.size());
      for (auto [f, v] : {std::pair{a, &x}, std::pair{b, &y}}) {
        hid_t d = H5Dopen2(f, ("/model/" + t.name).c_str(), H5P_DEFAULT);
        ASSERT_GE(d, 0) << t.name;
        ASSERT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v->data()), 0);
        H5Dclose(d);
      }
      EXPECT_EQ(x, y) << copy << ": " << t.name;
    }
    H5Fclose(a);
    H5Fclose(b);
  }
  // A model of 64 positions or fewer converts too: the conversion's completions leave room for a
  // prompt (they were as long as the positions, and the job refused them).
  fs::create_directories(dir / "hf_short");
  for (const char* file : {"model.safetensors", "config.json"})
    fs::copy_file(dir / "hf_fp32" / file, dir / "hf_short" / file, fs::copy_options::overwrite_existing);
  std::string short_config = slurp(dir / "hf_short" / "config.json");
  const std::size_t at = short_config.find("\"max_position_embeddings\": ");
  ASSERT_NE(at, std::string::npos) << short_config;
  short_config.replace(at, short_config.find_first_of(",}", at) - at, "\"max_position_embeddings\": 16");
  write(dir / "hf_short" / "config.json", short_config);
  RunResult short_back = run_in(dir, shardrl_binary() + " convert --from-safetensors " + (dir / "hf_short").string() +
                                         " --to " + (dir / "short.h5").string());
  EXPECT_EQ(short_back.exit_code, 0) << short_back.out << short_back.err;
  // A directory in the way of the import's staging (`<to>.convert.d`, removed whole at its end) is
  // refused, with what it holds untouched.
  fs::create_directories(dir / "staged.h5.convert.d");
  write(dir / "staged.h5.convert.d" / "mine", "keep");
  RunResult staged = run_in(dir, mpirun(2) + " convert --from-safetensors " + (dir / "hf_fp32").string() + " --to " +
                                     (dir / "staged.h5").string());
  EXPECT_EQ(staged.exit_code, 2) << staged.out;
  EXPECT_NE(staged.err.find("staged.h5.convert.d' exists"), std::string::npos) << staged.err;
  EXPECT_EQ(slurp(dir / "staged.h5.convert.d" / "mine"), "keep");
  // Existing outputs are never replaced without --force; a directory as --to is named.
  const std::string converted_bytes = slurp(converted);
  RunResult again_to = run_in(dir, mpirun(2) + " convert --from-safetensors " + (dir / "hf_fp32").string() + " --to " +
                                       converted.string());
  EXPECT_EQ(again_to.exit_code, 2) << again_to.out;
  EXPECT_NE(again_to.err.find("converted.h5' exists; pass --force to replace it"), std::string::npos) << again_to.err;
  EXPECT_EQ(slurp(converted), converted_bytes);
  RunResult forced = run_in(dir, mpirun(2) + " convert --from-safetensors " + (dir / "hf_fp32").string() + " --to " +
                                     converted.string() + " --force");
  EXPECT_EQ(forced.exit_code, 0) << forced.err;
  RunResult to_dir = run_in(dir, mpirun(2) + " convert --from-safetensors " + (dir / "hf_fp32").string() + " --to " +
                                     (dir / "hf_fp32").string());
  EXPECT_EQ(to_dir.exit_code, 2) << to_dir.out;
  EXPECT_NE(to_dir.err.find("is a directory; name the checkpoint file to write"), std::string::npos) << to_dir.err;
  RunResult over_hf = run_in(dir, shardrl_binary() + " convert --from " + ckpt.string() + " --to-safetensors " +
                                      (dir / "hf_fp32").string());
  EXPECT_EQ(over_hf.exit_code, 2) << over_hf.out;
  EXPECT_NE(over_hf.err.find("model.safetensors' exists; pass --force to replace it"), std::string::npos)
      << over_hf.err;
  // A sharded model in the directory (index and shards, which importers read first) is refused
  // too, and --force removes it, so the new model.safetensors is what an import reads.
  const fs::path sharded = dir / "hf_sharded";
  fs::create_directories(sharded);
  fs::copy_file(dir / "hf_fp32" / "model.safetensors", sharded / "model-00001-of-00001.safetensors");
  write(sharded / "model.safetensors.index.json", "{\"weight_map\": {}}");
  RunResult over_index = run_in(dir, shardrl_binary() + " convert --from " + ckpt.string() + " --to-safetensors " +
                                         sharded.string());
  EXPECT_EQ(over_index.exit_code, 2) << over_index.out;
  EXPECT_NE(over_index.err.find("hf_sharded' holds model-00001-of-00001.safetensors, model.safetensors.index.json: "
                                "another model's files"),
            std::string::npos)
      << over_index.err;
  // The files are written into a staging folder inside the directory and moved in together at the
  // end; one left by an export that was killed part way is removed, said, and not exported.
  fs::create_directories(sharded / ".shardrl-export.partial");
  write(sharded / ".shardrl-export.partial" / "model.safetensors", "half a file");
  RunResult over_index_forced = run_in(dir, shardrl_binary() + " convert --from " + ckpt.string() +
                                                " --to-safetensors " + sharded.string() + " --force");
  EXPECT_EQ(over_index_forced.exit_code, 0) << over_index_forced.err;
  EXPECT_NE(over_index_forced.out.find("note: removed " + (sharded / ".shardrl-export.partial").string() +
                                       ", left by an export that was stopped"),
            std::string::npos)
      << over_index_forced.out;
  EXPECT_FALSE(fs::exists(sharded / ".shardrl-export.partial"));
  EXPECT_FALSE(fs::exists(dir / "hf_fp32" / ".shardrl-export.partial"));
  EXPECT_FALSE(fs::exists(sharded / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(sharded / "model-00001-of-00001.safetensors"));
  EXPECT_TRUE(fs::exists(sharded / "model.safetensors"));
  RunResult neither = run_in(dir, shardrl_binary() + " convert --from " + ckpt.string() + " --to x.h5");
  EXPECT_EQ(neither.exit_code, 2);
  EXPECT_NE(neither.err.find("convert takes --from CKPT.h5 --to-safetensors DIR"), std::string::npos) << neither.err;
  // And exported again: safetensors -> shardrl -> safetensors gives the same tensor bytes.
  RunResult reexport = run_in(dir, shardrl_binary() + " convert --from " + again.string() + " --to-safetensors " +
                                       (dir / "hf_again").string() + " --dtype fp32");
  ASSERT_EQ(reexport.exit_code, 0) << reexport.err;
  {
    shardrl::SafetensorsFile first(dir / "hf_fp32" / "model.safetensors"), second(dir / "hf_again" / "model.safetensors");
    ASSERT_EQ(first.header().tensors.size(), second.header().tensors.size());
    for (const shardrl::StTensor& t : first.header().tensors)
      EXPECT_EQ(second.read_bytes(t.name), first.read_bytes(t.name)) << t.name;
  }
  // A directory whose name TOML would read as an escape (`\u0031` is "1") is imported from
  // itself: the job's config quotes it (it read from `hf1`, or failed to).
  const fs::path escaped = dir / "hf\\u0031";
  fs::create_directories(escaped);
  for (const char* file : {"model.safetensors", "config.json"})
    fs::copy_file(dir / "hf_fp32" / file, escaped / file);
  RunResult from_escaped = run_in(dir, shardrl_binary() + " convert --from-safetensors '" + escaped.string() +
                                           "' --to " + (dir / "escaped.h5").string());
  EXPECT_EQ(from_escaped.exit_code, 0) << from_escaped.err;
  // A directory of another shape is refused, naming the difference.
  RunResult other = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=other --set model.preset=custom "
                                            "--set model.d_ff=96 --set model.init_from=" + (dir / "hf_fp32").string());
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_NE(other.err.find("config.json: describes another model than the job's: d_ff (intermediate_size) is 128 "
                           "there and 96 in the job's [model]"),
            std::string::npos)
      << other.err;
  RunResult missing = run_in(dir, shardrl_binary() + " convert --from nothing.h5 --to-safetensors x");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("nothing.h5"), std::string::npos) << missing.err;
  // A shape no Hugging Face architecture holds (an ungated shared expert) is refused before the
  // weights are read or written: before, model.safetensors was written and then config.json
  // refused, leaving weights without a config that blocked the next try without --force.
  RunResult moe = run_in(dir, mpirun(2) + " train --config job.toml --set run.name=moe --set run.iterations=0 "
                                          "--set rl.sft_steps=0 --set model.preset=custom --set model.n_experts=4 "
                                          "--set model.top_k=2 --set model.moe_every=2 --set model.shared_expert=true");
  ASSERT_EQ(moe.exit_code, 0) << moe.err;
  RunResult moe_export = run_in(dir, shardrl_binary() + " convert --from runs/moe/checkpoints/iter_00000000.h5 "
                                                       "--to-safetensors hf_moe");
  EXPECT_EQ(moe_export.exit_code, 2) << moe_export.out;
  EXPECT_NE(moe_export.err.find("model.shared_expert = true"), std::string::npos) << moe_export.err;
  EXPECT_FALSE(fs::exists(dir / "hf_moe" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "hf_moe" / "model.safetensors.partial"));
}

// An export carries what transformers needs beside the weights: the run's tokenizer files from
// its model directory, copied byte for byte; config.json's special-token ids as that directory's
// config.json has them (eos_token_id a list there) and its generation_config.json (which
// generate() and vLLM read instead of config.json's ids), each with the run's end id joined (it
// was copied without it, so generate() ran past the end the policy learned); the base's context
// length where the run set a shorter one. A run on the byte tokenizer exports its end id and says
// it has no tokenizer files; a checkpoint that took no step has learned no end id (257 is a real
// vocabulary's token).
TEST(Cli, ConvertCarriesTheTokenizerAndTheSpecialTokenIds) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "job.toml", kCheckpointJob);
  const std::string one_step = " --set run.iterations=0 --set rl.sft_steps=1";
  ASSERT_EQ(run_in(dir, mpirun(2) + " train --config job.toml" + one_step).exit_code, 0);
  RunResult bytes = run_in(dir, shardrl_binary() + " convert --from runs/ck/checkpoints/iter_00000000.h5 "
                                                   "--to-safetensors hf_bytes");
  ASSERT_EQ(bytes.exit_code, 0) << bytes.err;
  EXPECT_NE(slurp(dir / "hf_bytes" / "config.json").find("\"eos_token_id\": 257"), std::string::npos);
  EXPECT_NE(bytes.out.find("note: the run used shardrl's byte tokenizer"), std::string::npos) << bytes.out;
  EXPECT_FALSE(fs::exists(dir / "hf_bytes" / "tokenizer.json"));
  ASSERT_EQ(run_in(dir, mpirun(2) + " train --config job.toml --set run.name=untrained --set run.iterations=0 "
                                    "--set rl.sft_steps=0")
                .exit_code,
            0);
  RunResult untrained = run_in(dir, shardrl_binary() + " convert --from runs/untrained/checkpoints/iter_00000000.h5 "
                                                       "--to-safetensors hf_untrained");
  ASSERT_EQ(untrained.exit_code, 0) << untrained.err;
  EXPECT_EQ(slurp(dir / "hf_untrained" / "config.json").find("eos_token_id"), std::string::npos)
      << "no step taken, no end id learned";

  // A model directory with its tokenizer (stand-in files: the byte task never reads them).
  const fs::path base = dir / "base";
  fs::create_directories(base);
  fs::copy_file(dir / "hf_bytes" / "model.safetensors", base / "model.safetensors");
  std::string config = slurp(dir / "hf_bytes" / "config.json");
  const std::string eos = "\"eos_token_id\": 257";
  config.replace(config.find(eos), eos.size(), "\"bos_token_id\": 1, \"eos_token_id\": [2, 7]");
  write(base / "config.json", config);
  const std::vector<std::pair<std::string, std::string>> files = {
      {"tokenizer.json", "{\"model\": {\"type\": \"BPE\"}}\n"},
      {"tokenizer_config.json", "{\"chat_template\": \"{{ messages }}\"}\n"},
      {"generation_config.json", "{\"eos_token_id\": [2, 7]}\n"}};
  for (const auto& [name, text] : files) write(base / name, text);
  // The run's context shorter than the base's.
  const auto positions = [](const std::string& json) {
    const std::size_t at = json.find("\"max_position_embeddings\": ");
    return at == std::string::npos ? std::string() : json.substr(at, json.find_first_of(",}", at) - at);
  };
  ASSERT_NE(positions(config), "\"max_position_embeddings\": 48");
  ASSERT_EQ(run_in(dir, mpirun(2) + " train --config job.toml --set run.name=tok --set model.init_from=" +
                            base.string() + one_step + " --set model.preset=custom --set model.max_seq_len=48")
                .exit_code,
            0);
  const std::string from = " convert --from runs/tok/checkpoints/iter_00000000.h5 --to-safetensors ";
  RunResult out = run_in(dir, shardrl_binary() + from + "hf_tok");
  ASSERT_EQ(out.exit_code, 0) << out.err;
  for (const auto& [name, text] : files) {
    if (name == "generation_config.json") continue;   // joined with the run's end id (below)
    EXPECT_EQ(slurp(dir / "hf_tok" / name), text) << name;
  }
  const std::string exported = slurp(dir / "hf_tok" / "config.json");
  EXPECT_NE(exported.find("\"bos_token_id\": 1,"), std::string::npos) << exported;
  // The base's end ids and the run's own (the byte tokenizer's 257 here), which the policy ends at.
  EXPECT_NE(exported.find("\"eos_token_id\": [\n    2,\n    7,\n    257\n  ]"), std::string::npos) << exported;
  EXPECT_EQ(slurp(dir / "hf_tok" / "generation_config.json"), "{\n  \"eos_token_id\": [\n    2,\n    7,\n    257\n  ]\n}\n");
  EXPECT_EQ(positions(exported), positions(config)) << "the base's context, not the run's 48";
  EXPECT_NE(out.out.find("tokenizer.json, tokenizer_config.json copied"), std::string::npos) << out.out;
  EXPECT_NE(out.out.find("generation_config.json from model.init_from's, with the run's end id"), std::string::npos)
      << out.out;
  // A tokenizer file already in the output directory is not replaced without --force.
  fs::create_directories(dir / "hf_taken");
  write(dir / "hf_taken" / "tokenizer_config.json", "mine");
  RunResult taken = run_in(dir, shardrl_binary() + from + "hf_taken");
  EXPECT_EQ(taken.exit_code, 2);
  EXPECT_NE(taken.err.find("tokenizer_config.json' exists; pass --force"), std::string::npos) << taken.err;
  EXPECT_EQ(slurp(dir / "hf_taken" / "tokenizer_config.json"), "mine");

  // A directory imported by a relative path is recorded absolute: exported from another working
  // directory, the copy still carries the tokenizer and the end ids (it lost them, with notes only).
  ASSERT_EQ(run_in(dir, shardrl_binary() + " convert --from-safetensors base --to imported.h5").exit_code, 0);
  fs::create_directories(dir / "elsewhere");
  RunResult moved = run_in(dir / "elsewhere", shardrl_binary() + " convert --from ../imported.h5 --to-safetensors hf_moved");
  ASSERT_EQ(moved.exit_code, 0) << moved.err;
  EXPECT_EQ(slurp(dir / "elsewhere" / "hf_moved" / "tokenizer.json"), files[0].second);
  EXPECT_NE(slurp(dir / "elsewhere" / "hf_moved" / "config.json").find("\"bos_token_id\": 1,"), std::string::npos);
}

// model.init_from with preset = "custom" and no shape keys: the shape is the directory's
// config.json's (here a 1-layer, 32-wide model, not the keys' defaults), written into the job's
// resolved config; the weights are the directory's. With a shape key given, config.json gives the
// others. A directory without config.json is named.
// An export keeps the run's precision unless --dtype says otherwise (an fp32 run's weights were
// rounded to bf16 unasked), and leaves no other model's files beside its own: a tokenizer, a chat
// template or shards left in the directory are refused, and removed with --force; other files stay.
TEST(Cli, AnExportKeepsTheRunsPrecisionAndNoOtherModelsFiles) {
  fs::path dir = test_dir();
  write(dir / "job.toml", kCheckpointJob);
  RunResult run = run_in(dir, shardrl_binary() + " train --config job.toml --set run.iterations=0 --set rl.sft_steps=0 "
                                                 "--set model.precision=fp32");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string export_to = " convert --from runs/ck/checkpoints/iter_00000000.h5 --to-safetensors ";
  RunResult plain = run_in(dir, shardrl_binary() + export_to + "hf");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("parameters, F32) -> hf"), std::string::npos) << plain.out;
  const shardrl::SafetensorsFile exported(dir / "hf" / "model.safetensors");
  for (const shardrl::StTensor& t : exported.header().tensors) EXPECT_EQ(t.dtype, shardrl::StDtype::f32) << t.name;
  EXPECT_NE(slurp(dir / "hf" / "config.json").find("\"torch_dtype\": \"float32\""), std::string::npos);

  const fs::path other = dir / "other";
  fs::create_directories(other);
  for (const char* name : {"tokenizer.json", "chat_template.jinja", "model-00001-of-00002.safetensors", "notes.txt"})
    write(other / name, "another model's");
  RunResult refused = run_in(dir, shardrl_binary() + export_to + "other");
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.err.find("other' holds chat_template.jinja, model-00001-of-00002.safetensors, tokenizer.json: "
                             "another model's files, which Hugging Face's readers would take with the new weights; "
                             "pass --force to remove them"),
            std::string::npos)
      << refused.err;
  EXPECT_FALSE(fs::exists(other / "model.safetensors"));
  EXPECT_EQ(slurp(other / "tokenizer.json"), "another model's");
  RunResult forced = run_in(dir, shardrl_binary() + export_to + "other --force");
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_NE(forced.out.find("removed chat_template.jinja, model-00001-of-00002.safetensors, tokenizer.json from "
                            "other (--force)"),
            std::string::npos)
      << forced.out;
  for (const char* name : {"tokenizer.json", "chat_template.jinja", "model-00001-of-00002.safetensors"})
    EXPECT_FALSE(fs::exists(other / name)) << name;
  EXPECT_EQ(slurp(other / "notes.txt"), "another model's");
  EXPECT_EQ(slurp(other / "model.safetensors"), slurp(dir / "hf" / "model.safetensors"));
}

TEST(Cli, InitFromTakesTheShapeFromConfigJson) {
  SKIP_WITHOUT_A_GPU_PER_RANK(2);
  fs::path dir = test_dir();
  write(dir / "a.toml",
        "[run]\nname = \"a\"\ndir = \"runs\"\niterations = 0\n[rl]\nsft_steps = 0\n"
        "[model]\npreset = \"custom\"\nd_model = 32\nn_layers = 1\nn_heads = 2\nn_kv_heads = 1\nhead_dim = 16\n"
        "d_ff = 48\n");
  RunResult a = run_in(dir, mpirun(1) + " train --config a.toml");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  RunResult conv = run_in(dir, shardrl_binary() + " convert --from runs/a/checkpoints/iter_00000000.h5 --to-safetensors hf "
                                                  "--dtype fp32");
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  write(dir / "b.toml", "[run]\nname = \"b\"\ndir = \"runs\"\niterations = 0\n[rl]\nsft_steps = 0\n"
                        "[model]\npreset = \"custom\"\ninit_from = \"hf\"\n");
  RunResult b = run_in(dir, mpirun(2) + " train --config b.toml");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const std::string resolved = slurp(dir / "runs" / "b" / "config.toml");
  EXPECT_NE(resolved.find("d_model = 32"), std::string::npos) << resolved;
  EXPECT_NE(resolved.find("n_layers = 1"), std::string::npos) << resolved;
  EXPECT_NE(b.out.find("hf/config.json"), std::string::npos) << "the shape keys' origin in the config table: " << b.out;
  // One shape key set: it wins, config.json gives the rest (it stopped the read, the rest kept the
  // tiny defaults, and the job failed loading the weights).
  RunResult part = run_in(dir, mpirun(1) + " train --config b.toml --set run.name=part --set model.max_seq_len=256");
  ASSERT_EQ(part.exit_code, 0) << part.err;
  const std::string part_resolved = slurp(dir / "runs" / "part" / "config.toml");
  EXPECT_NE(part_resolved.find("max_seq_len = 256"), std::string::npos) << part_resolved;
  EXPECT_NE(part_resolved.find("d_model = 32"), std::string::npos) << part_resolved;
  EXPECT_NE(part_resolved.find("n_layers = 1"), std::string::npos) << part_resolved;
  // A tensor the model has no parameter for (an old checkpoint's rotary_emb.inv_freq buffer) is
  // not read, and named (it was dropped without a word).
  fs::create_directories(dir / "hf_extra");
  fs::copy_file(dir / "hf" / "config.json", dir / "hf_extra" / "config.json");
  {
    const shardrl::SafetensorsFile hf(dir / "hf" / "model.safetensors");
    std::vector<std::vector<float>> values;
    for (const shardrl::StTensor& t : hf.header().tensors) values.push_back(hf.read_f32(t.name, 0, t.numel()));
    std::vector<shardrl::StWrite> tensors;
    for (std::size_t i = 0; i < values.size(); ++i)
      tensors.push_back({hf.header().tensors[i].name, hf.header().tensors[i].shape, shardrl::StDtype::f32,
                         values[i].data()});
    const std::vector<float> inv_freq(8, 1.0f);
    tensors.push_back({"model.rotary_emb.inv_freq", {8}, shardrl::StDtype::f32, inv_freq.data()});
    shardrl::write_safetensors(dir / "hf_extra" / "model.safetensors", tensors, {});
  }
  RunResult extra = run_in(dir, mpirun(2) + " train --config b.toml --set run.name=extra --set model.init_from=hf_extra");
  ASSERT_EQ(extra.exit_code, 0) << extra.err;
  EXPECT_NE(extra.out.find("hf_extra: 1 tensor the model has no parameter for, not read: model.rotary_emb.inv_freq"),
            std::string::npos)
      << extra.out;
  EXPECT_EQ(b.out.find("no parameter for"), std::string::npos) << b.out;
  // The imported job's weights are the exported ones: exported again, the same bytes.
  RunResult again = run_in(dir, shardrl_binary() + " convert --from runs/b/checkpoints/iter_00000000.h5 "
                                                   "--to-safetensors hf_again --dtype fp32");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  shardrl::SafetensorsFile first(dir / "hf" / "model.safetensors"), second(dir / "hf_again" / "model.safetensors");
  ASSERT_EQ(first.header().tensors.size(), second.header().tensors.size());
  for (const shardrl::StTensor& t : first.header().tensors)
    EXPECT_EQ(first.read_f32(t.name), second.read_f32(t.name)) << t.name;
  // An index beside model.safetensors (transformers loads the file, the index's shards were read
  // here): refused, naming both.
  write(dir / "hf_again" / "model.safetensors.index.json", "{\"weight_map\": {}}");
  RunResult both = run_in(dir, mpirun(2) + " train --config b.toml --set run.name=both --set model.init_from=hf_again");
  EXPECT_EQ(both.exit_code, 2) << both.out << both.err;
  EXPECT_NE(both.err.find("hf_again holds both model.safetensors and model.safetensors.index.json"), std::string::npos)
      << both.err;

  // A directory only rank 0 can see (a relative path, rank 1 started elsewhere; rank 0 reads
  // config.json for the shape keys not given): rank 1's failure to read the weights reaches rank
  // 0, which has read its weights and waits in the load's agreement; every rank stops with rank
  // 1's message (it hung there before).
  fs::create_directories(dir / "elsewhere");
  write(dir / "d.toml", "[run]\nname = \"d\"\ndir = \"runs\"\niterations = 0\n[rl]\nsft_steps = 0\n"
                        "[model]\npreset = \"custom\"\ninit_from = \"hf\"\nd_model = 32\nn_layers = 1\nn_heads = 2\n"
                        "n_kv_heads = 1\nhead_dim = 16\nd_ff = 48\n");
  // (The run directory absolute: every rank must see it, or the job stops naming it first.)
  RunResult d = run_in(dir, mpirun_in_two_dirs(dir, dir / "elsewhere", " train --config " + (dir / "d.toml").string() +
                                                                           " --set run.dir=" + (dir / "runs").string()));
  EXPECT_EQ(d.exit_code, 2) << d.out << d.err;
  EXPECT_NE(d.err.find("hf/config.json"), std::string::npos) << d.err;
  EXPECT_LT(d.seconds, 60.0);

  // A shape from config.json that the job refuses names config.json, not the --set it was passed
  // on as (which the user never typed).
  fs::create_directories(dir / "small");
  std::string small = slurp(dir / "hf" / "config.json");
  const std::size_t vocab = small.find("\"vocab_size\": 259");
  ASSERT_NE(vocab, std::string::npos) << small;
  small.replace(vocab, std::string("\"vocab_size\": 259").size(), "\"vocab_size\": 100");
  write(dir / "small" / "config.json", small);
  write(dir / "s.toml", "[model]\npreset = \"custom\"\ninit_from = \"small\"\n");
  RunResult s = run_in(dir, mpirun(2) + " train --config s.toml");
  EXPECT_EQ(s.exit_code, 2) << s.out << s.err;
  EXPECT_NE(s.err.find("small/config.json: model.vocab_size = 100"), std::string::npos) << s.err;
  EXPECT_EQ(s.err.find("--set model.vocab_size"), std::string::npos) << s.err;

  // Without config.json that is the error, alone: the default shape's (max_seq_len 256) are not
  // the job's, and the sequence the job sets past them was listed first.
  write(dir / "c.toml", "[model]\npreset = \"custom\"\ninit_from = \"missing\"\n[train]\nseq_len = 2048\n");
  RunResult c = run_in(dir, mpirun(2) + " train --config c.toml");
  EXPECT_EQ(c.exit_code, 2);
  EXPECT_NE(c.err.find("c.toml:3:13: model.init_from = \"missing\" with preset = \"custom\" takes the shape from "
                       "'missing/config.json', which cannot be read"),
            std::string::npos)
      << c.err;
  EXPECT_EQ(c.err.find("seq_len"), std::string::npos) << c.err;
}

}  // namespace
