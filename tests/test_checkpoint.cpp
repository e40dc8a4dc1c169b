// Job checkpoints end to end on the tiny model (np 1, 2, 4):
// - a run stopped after 3 iterations and resumed equals an uninterrupted run byte for byte
//   (fp32 and bf16, warm-up, KL reference, optimizer counters included);
// - a file saved by N ranks loads on M ranks (every N, M up to the world size): the weights are
//   bitwise those saved, and the next iteration equals the saver's next iteration to rounding;
// - saved with expert parallelism, loaded without (and the reverse): the same weights;
// - a model of another shape and an unknown format version are refused, naming file and tensor.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "io/checkpoint_dir.hpp"
#include "io/safetensors.hpp"
#include "job/checkpoint_format.hpp"
#include "job/hf_config.hpp"
#include "job/hf_weights.hpp"
#include "mpi/host_exchange.hpp"
#include "job/async_checkpoint_save.hpp"
#include "job/job_checkpoint.hpp"
#include "rl_test_job.hpp"
#include "mpi_world.hpp"

namespace shardrl {
namespace {

namespace fs = std::filesystem;

using test::world_rank;
using test::world_size;

// A fresh directory, named by rank 0 and known to every rank.
fs::path fresh_dir(const std::string& what) {
  std::string path;
  if (world_rank() == 0) {
    path = (fs::temp_directory_path() / ("shardrl_ckpt_" + std::to_string(getpid()) + "_" + what)).string();
    fs::remove_all(path);
    fs::create_directories(path);
  }
  broadcast_string(MPI_COMM_WORLD, path, 0);
  return path;
}

std::vector<std::vector<float>> all_weights(Job& job) {
  std::vector<std::vector<float>> w;
  for (int u = 0; u < job.model.unit_count(); ++u) w.push_back(job.trainer.gather_main_weights(u));
  return w;
}

void run_iterations(Job& job, std::int64_t from, std::int64_t to) {
  for (std::int64_t it = from; it < to; ++it) job.loop.train(job.loop.rollout(it));
}

void save(Job& job, const fs::path& dir, std::int64_t iterations, std::int64_t warmup, MPI_Comm comm) {
  save_job_checkpoint(dir, JobPosition{iterations, warmup}, job.policy, "[run]\n", comm);
}

void expect_bitwise(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t u = 0; u < got.size(); ++u) {
    ASSERT_EQ(got[u].size(), want[u].size());
    EXPECT_EQ(std::memcmp(got[u].data(), want[u].data(), got[u].size() * sizeof(float)), 0) << what << ", unit " << u;
  }
}

void resume_is_bit_exact(Precision precision, const std::string& name, bool cuda_graphs = false,
                         const Config& base = small_config()) {
  Config c = base;
  c.model.precision = precision;
  if (cuda_graphs) {
    c.train.cuda_graph = TrainGraph::full;
    c.rollout.cuda_graph = RolloutGraph::decode;
  }
  c.rl.sft_steps = 3;
  const fs::path dir = fresh_dir(name);
  std::vector<std::vector<float>> straight, resumed;
  {
    Job job(c, MPI_COMM_WORLD);
    job.warm_up();
    run_iterations(job, 0, 6);
    straight = all_weights(job);
  }
  std::vector<std::vector<float>> at_save;
  {
    Job job(c, MPI_COMM_WORLD);
    job.warm_up();
    run_iterations(job, 0, 3);
    save(job, dir, 3, 3, MPI_COMM_WORLD);
    at_save = all_weights(job);
  }
  {
    Job job(c, MPI_COMM_WORLD);   // fresh weights from the seed, then the checkpoint over them
    const JobPosition p = load_job_checkpoint(checkpoint_path(dir, 3), job.policy, MPI_COMM_WORLD);
    EXPECT_EQ(p.iterations_done, 3);
    EXPECT_EQ(p.warmup_steps_done, 3);
    EXPECT_EQ(job.trainer.metrics().step, 3 + 3 * c.rl.minibatches);
    expect_bitwise(all_weights(job), at_save, "weights right after loading");
    run_iterations(job, 3, 6);
    resumed = all_weights(job);
  }
  // Bitwise on every device: no kernel sums with atomics (the embedding gradient groups repeats
  // of a token and sums them in position order), so two uninterrupted runs are the same bits.
  expect_bitwise(resumed, straight, "weights after 3 + 3 iterations");
  bool moved = false;
  for (std::size_t u = 0; u < at_save.size(); ++u) moved |= at_save[u] != straight[u];
  EXPECT_TRUE(moved) << "the last 3 iterations changed nothing: the comparison proves little";
  if (world_rank() == 0) fs::remove_all(dir);
}

TEST(Checkpoint, ResumeIsBitExactFp32) { resume_is_bit_exact(Precision::fp32, "exact_fp32"); }
TEST(Checkpoint, ResumeIsBitExactBf16) { resume_is_bit_exact(Precision::bf16, "exact_bf16"); }
// With the train steps and the decode steps captured as CUDA graphs: the resumed job captures
// its own graphs after loading and ends on the same bits as the uninterrupted one.
TEST(Checkpoint, ResumeWithCapturedStepsIsBitExact) {
  if (!CapturedGraph::native()) GTEST_SKIP() << "CUDA graphs need a GPU build";
  resume_is_bit_exact(Precision::bf16, "exact_graphs", true);
}

// checkpoint.async: the save after iteration 3 is written by the background thread while
// iterations 4-6 train (a pause of 10 ms per tensor makes the write last about a second, so the
// poll right after start() must find it still writing: start() returns before the file is
// written). The file holds the state at the save, tensor for tensor the bytes a synchronous save
// of that state writes, and a job resumed from it ends on the uninterrupted job's bits.
TEST(Checkpoint, AsyncSaveWritesItsSnapshotWhileTrainingGoesOn) {
  Config c = small_config();
  c.rl.sft_steps = 3;
  c.checkpoint.async = true;
  const fs::path sync_dir = fresh_dir("async_sync"), async_dir = fresh_dir("async");
  std::vector<std::vector<float>> straight, at_save;
  {
    Job job(c, MPI_COMM_WORLD);
    job.warm_up();
    run_iterations(job, 0, 6);
    straight = all_weights(job);
  }
  c.debug.save_pause_ms = 10;
  {
    Job job(c, MPI_COMM_WORLD);
    AsyncCheckpointSave background(job.policy, MPI_COMM_WORLD);
    job.warm_up();
    run_iterations(job, 0, 3);
    at_save = all_weights(job);
    background.start(async_dir, JobPosition{3, 3}, "[run]\n");
    EXPECT_FALSE(background.poll()) << "start() returned only after the file was written";
    run_iterations(job, 3, 6);
    const std::optional<AsyncCheckpointSave::Finished> done = background.wait();
    ASSERT_TRUE(done);
    EXPECT_EQ(done->iteration, 3);
    EXPECT_FALSE(background.wait()) << "one save, reported once";
    expect_bitwise(all_weights(job), straight, "the job that saved in the background, after 6 iterations");
  }
  {
    // The same state saved synchronously by a job that trained the same 3 iterations.
    Job job(c, MPI_COMM_WORLD);
    job.warm_up();
    run_iterations(job, 0, 3);
    save(job, sync_dir, 3, 3, MPI_COMM_WORLD);
  }
  {
    ShardedFileReader a(checkpoint_path(async_dir, 3), MPI_COMM_WORLD), s(checkpoint_path(sync_dir, 3), MPI_COMM_WORLD);
    EXPECT_EQ(a.datasets(), s.datasets());
    int tensors = 0;
    for (const std::string& name : s.datasets()) {
      if (!checkpoint_format::is_tensor(name)) continue;
      const std::vector<std::uint64_t> shape = s.shape(name);
      std::uint64_t n = 1;
      for (std::uint64_t e : shape) n *= e;
      std::vector<float> va(n), vs(n);   // the whole tensor on every rank (ranges may overlap)
      a.read(name, shape, 0, n, va.data(), false);
      s.read(name, shape, 0, n, vs.data(), false);
      EXPECT_EQ(std::memcmp(va.data(), vs.data(), n * sizeof(float)), 0) << name;
      ++tensors;
    }
    EXPECT_GT(tensors, 50);
    EXPECT_EQ(a.read_int64(checkpoint_format::kOptimStep), s.read_int64(checkpoint_format::kOptimStep));
  }
  {
    Job job(c, MPI_COMM_WORLD);
    const JobPosition p = load_job_checkpoint(checkpoint_path(async_dir, 3), job.policy, MPI_COMM_WORLD);
    EXPECT_EQ(p.iterations_done, 3);
    expect_bitwise(all_weights(job), at_save, "weights loaded from the background save");
    run_iterations(job, 3, 6);
    expect_bitwise(all_weights(job), straight, "resumed from the background save, after 3 + 3 iterations");
  }
  if (world_rank() == 0) {
    fs::remove_all(sync_dir);
    fs::remove_all(async_dir);
  }
}

// N -> M for every N, M <= world size: ranks < N save (the others wait), ranks < M load.
// model.init_from: a Hugging Face directory written from one job's weights starts another job
// whose options differ (bf16 compute, unfused weight gradients): the weights arrive bit for bit
// (fp32 files) and the importing job runs with its own config's options, which the counters
// show (the first upstream failure was an option lost on exactly such a path).
// `weights` (every unit whole, as all_weights gives them) as a Hugging Face directory of `job`'s
// shape, written by rank 0 and readable by every rank on return.
void write_hf_directory(Job& job, const std::vector<std::vector<float>>& weights, const fs::path& dir) {
  if (world_rank() == 0) {
    std::vector<StWrite> tensors;
    for (int u = 0; u < job.model.unit_count(); ++u)
      for (const ParamSpec& p : job.model.units()[u].params)
        tensors.push_back({p.name, p.shape, StDtype::f32, weights[u].data() + p.offset});
    write_safetensors(dir / "model.safetensors", tensors);
    std::ofstream(dir / "config.json") << hf_config_json(job.model.options().shape, "float32");
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(Checkpoint, InitFromHonoursTheJobsOwnOptions) {
  Config c = small_config();
  c.rl.sft_steps = 2;
  const fs::path dir = fresh_dir("hf");
  std::vector<std::vector<float>> source;
  {
    Job job(c, MPI_COMM_WORLD);
    job.warm_up();
    source = all_weights(job);
    write_hf_directory(job, source, dir);
  }
  Config imported = c;
  imported.model.precision = Precision::bf16;
  imported.train.gradient_accumulation_fusion = false;
  imported.model.init_from = dir.string();
  Job job(imported, MPI_COMM_WORLD);
  job.policy.load_init_from(MPI_COMM_WORLD, /*adapters=*/true);
  expect_bitwise(all_weights(job), source, "weights imported");
  EXPECT_EQ(job.model.compute_type_size(), 2u) << "bf16 compute on the imported path";
  job.loop.warmup_step(0);
  EXPECT_GT(job.model.wgrad_counters().unfused, 0);
  EXPECT_EQ(job.model.wgrad_counters().fused, 0) << "gradient_accumulation_fusion = false on the imported path";
  if (world_rank() == 0) fs::remove_all(dir);
}

// A NaN or an Inf in an imported model is refused naming the file, the tensor and the element,
// on every rank, though only the rank whose slice holds it reads it.
TEST(Checkpoint, NonFiniteImportedWeightsAreRefused) {
  Config c = small_config();
  c.rl.sft_steps = 0;
  const fs::path dir = fresh_dir("nan");
  {
    Job job(c, MPI_COMM_WORLD);
    std::vector<std::vector<float>> w = all_weights(job);
    const ParamSpec& last = job.model.units().back().params.back();   // lm_head.weight: the last rank's slice
    const std::int64_t element = last.numel() - 3;
    w.back()[static_cast<std::size_t>(last.offset + element)] = std::numeric_limits<float>::quiet_NaN();
    write_hf_directory(job, w, dir);
    Config imported = c;
    imported.model.init_from = dir.string();
    Job target(imported, MPI_COMM_WORLD);
    std::string error;
    try {
      target.policy.load_init_from(MPI_COMM_WORLD, /*adapters=*/true);
    } catch (const InputError& e) {
      error = e.what();
    }
    EXPECT_EQ(error, (dir / "model.safetensors").string() + ": tensor '" + last.name + "' holds nan at element " +
                         std::to_string(element) + ": a model's weights are finite");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove_all(dir);
}

// A sharded index's weight_map names files of the model directory only: a path that leaves it
// (`../x`, an absolute path, a subdirectory) is refused naming the index and the tensor, on every
// rank, before any file it names is opened.
TEST(Checkpoint, AnIndexNamingFilesOutsideTheDirectoryIsRefused) {
  Config c = small_config();
  c.rl.sft_steps = 0;
  for (const std::string target : {"../elsewhere.safetensors", "/etc/passwd", "sub/model.safetensors"}) {
    const fs::path dir = fresh_dir("index");
    {
      Job job(c, MPI_COMM_WORLD);
      if (world_rank() == 0) {
        std::ofstream(dir / "config.json") << hf_config_json(job.model.options().shape, "float32");
        std::ofstream(dir / "model.safetensors.index.json")
            << "{\"metadata\": {}, \"weight_map\": {\"model.norm.weight\": \"" << target << "\"}}";
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
    Config imported = c;
    imported.model.init_from = dir.string();
    Job job(imported, MPI_COMM_WORLD);
    std::string error;
    try {
      job.policy.load_init_from(MPI_COMM_WORLD, /*adapters=*/true);
    } catch (const InputError& e) {
      error = e.what();
    }
    EXPECT_EQ(error, (dir / "model.safetensors.index.json").string() + ": weight_map of 'model.norm.weight' names \"" +
                         target + "\", which is not a file of the model directory");
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(dir);
  }
}

// What a job saved and did next: its weights at the checkpoint, and its next training step.
struct SavedRun {
  std::vector<std::vector<float>> weights;
  double next_loss = 0, next_norm = 0;
};

// A `config` job on `comm`: the warm-up (3 steps), one iteration, saved to `dir` as iteration 1,
// then one more training step.
SavedRun save_after_one_iteration(const Config& config, const fs::path& dir, MPI_Comm comm) {
  SavedRun run;
  Job job(config, comm);
  job.warm_up();
  run_iterations(job, 0, 1);
  save(job, dir, 1, 3, comm);
  run.weights = all_weights(job);
  const TrainStats t = job.loop.train(job.loop.rollout(1));
  run.next_loss = t.loss;
  run.next_norm = t.grad_norm;
  return run;
}

// `dir`'s iteration 1 loaded into a `config` job on the first `ranks` ranks: on rank 0 (in every
// saver and loader) the weights are bitwise those saved and the next step is the saver's to
// rounding. Collective over the world.
void expect_resumes(const Config& config, const fs::path& dir, int ranks, const SavedRun& saved,
                    const std::string& what) {
  MPI_Comm loader = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < ranks ? 0 : MPI_UNDEFINED, world_rank(), &loader);
  if (loader != MPI_COMM_NULL) {
    Job job(config, loader);
    load_job_checkpoint(checkpoint_path(dir, 1), job.policy, loader);
    const std::vector<std::vector<float>> loaded = all_weights(job);
    const TrainStats t = job.loop.train(job.loop.rollout(1));
    if (world_rank() == 0) {
      expect_bitwise(loaded, saved.weights, what);
      EXPECT_NEAR(t.loss, saved.next_loss, 1e-4 * std::abs(saved.next_loss) + 1e-7) << what;
      EXPECT_NEAR(t.grad_norm, saved.next_norm, 1e-4 * saved.next_norm) << what;
    }
    MPI_Comm_free(&loader);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(Checkpoint, LoadsOnAnyNumberOfRanks) {
  Config c = small_config();
  c.rl.sft_steps = 3;
  const int W = world_size();
  for (int N = 1; N <= W; ++N) {
    const fs::path dir = fresh_dir("reshard_" + std::to_string(N));
    MPI_Comm saver = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank() < N ? 0 : MPI_UNDEFINED, world_rank(), &saver);
    SavedRun saved;
    if (saver != MPI_COMM_NULL) {
      saved = save_after_one_iteration(c, dir, saver);
      MPI_Comm_free(&saver);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int M = 1; M <= W; ++M)
      expect_resumes(c, dir, M, saved, "saved on " + std::to_string(N) + ", loaded on " + std::to_string(M));
    if (world_rank() == 0) fs::remove_all(dir);
  }
}

// Resharding at scale (run at np 8 too, oversubscribed on the CPU): saved by every rank, loaded
// on 2 and on 1.
TEST(Checkpoint, SavedOnAllRanksResumesOnTwoAndOne) {
  Config c = small_config();
  c.rl.sft_steps = 3;
  const int W = world_size();
  const fs::path dir = fresh_dir("reshard_down");
  const SavedRun saved = save_after_one_iteration(c, dir, MPI_COMM_WORLD);
  for (int M : {2, 1})
    if (M <= W) expect_resumes(c, dir, M, saved, "saved on " + std::to_string(W) + ", loaded on " + std::to_string(M));
  if (world_rank() == 0) fs::remove_all(dir);
}

// Expert parallelism keeps a rank's experts whole, sharding keeps 1 / W of each: the same
// checkpoint either way. Saved with expert parallelism, loaded without (on all ranks and on one)
// and the reverse.
TEST(Checkpoint, ExpertParallelAndShardedExpertsShareCheckpoints) {
  const Config c = small_moe_config();
  Config ep = c;
  ep.fsdp.expert_parallel = true;
  for (const bool saved_with_ep : {true, false}) {
    const fs::path dir = fresh_dir(saved_with_ep ? "ep_saved" : "ep_loaded");
    const SavedRun saved = save_after_one_iteration(saved_with_ep ? ep : c, dir, MPI_COMM_WORLD);
    for (const int ranks : {world_size(), 1})
      expect_resumes(saved_with_ep ? c : ep, dir, ranks, saved,
                     std::string(saved_with_ep ? "saved with" : "saved without") + " expert parallelism, loaded " +
                         (saved_with_ep ? "without" : "with") + " on " + std::to_string(ranks) + " rank(s)");
    if (world_rank() == 0) fs::remove_all(dir);
  }
}

std::string load_error(Job& job, const fs::path& file) {
  try {
    load_job_checkpoint(file, job.policy, MPI_COMM_WORLD);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Checkpoint, AnotherModelShapeIsRefusedNamingTheTensor) {
  Config c = small_config();
  c.rl.sft_steps = 1;
  const fs::path dir = fresh_dir("shape");
  {
    Job job(c, MPI_COMM_WORLD);
    job.warm_up();
    save(job, dir, 0, 1, MPI_COMM_WORLD);
  }
  Config other = c;
  other.model.preset = "custom";
  other.model.d_model = 32;
  other.model.head_dim = 8;
  Job job(other, MPI_COMM_WORLD);
  const std::string file = checkpoint_path(dir, 0).string();
  const std::string e = load_error(job, file);
  EXPECT_NE(e.find(file), std::string::npos) << e;
  EXPECT_NE(e.find("/model/model.embed_tokens.weight"), std::string::npos) << e;
  if (world_rank() == 0) fs::remove_all(dir);
}

TEST(Checkpoint, UnknownFormatVersionIsRefused) {
  Config c = small_config();
  c.rl.sft_steps = 0;
  const fs::path dir = fresh_dir("version");
  Job job(c, MPI_COMM_WORLD);
  save(job, dir, 0, 0, MPI_COMM_WORLD);
  const fs::path file = checkpoint_path(dir, 0);
  if (world_rank() == 0) {   // a future writer's file: only the version differs
    hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/meta/format_version", H5P_DEFAULT);
    const std::int64_t v = 99;
    H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v);
    H5Dclose(d);
    H5Fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(load_error(job, file),
            file.string() + ": checkpoint format version 99 is not one this shardrl reads (it reads 1)");
  if (world_rank() == 0) fs::remove_all(dir);
}

// LoRA (rank 4 on every linear layer; the KL reference is the base): resumed equals uninterrupted
// byte for byte, base included; the checkpoint holds the adapters and their moments alone, with
// the base's identity, and a job over another base (another seed) is refused; saved on all
// ranks, it loads on one.
Config lora_config() {
  Config c = small_config();
  c.lora.rank = 4;
  c.lora.alpha = 8;
  return c;
}
TEST(Checkpoint, LoraResumeIsBitExactFp32) { resume_is_bit_exact(Precision::fp32, "lora_fp32", false, lora_config()); }
TEST(Checkpoint, LoraResumeIsBitExactBf16) { resume_is_bit_exact(Precision::bf16, "lora_bf16", false, lora_config()); }
TEST(Checkpoint, LoraCheckpointsHoldTheAdaptersOverTheirBase) {
  Config c = lora_config();
  c.rl.sft_steps = 3;
  const fs::path dir = fresh_dir("lora_contents");
  {
    Job job(c, MPI_COMM_WORLD);
    job.warm_up();
    save(job, dir, 0, 3, MPI_COMM_WORLD);
  }
  {
    const std::unique_ptr<ShardedFileReader> in = open_checkpoint(checkpoint_path(dir, 0), MPI_COMM_WORLD);
    EXPECT_TRUE(in->has("/model/model.layers.0.self_attn.q_proj.lora_A.weight"));
    EXPECT_TRUE(in->has("/optim/exp_avg_sq/model.layers.1.mlp.down_proj.lora_B.weight"));
    EXPECT_FALSE(in->has("/model/model.layers.0.self_attn.q_proj.weight")) << "the frozen base is not saved";
    EXPECT_FALSE(in->has("/model/model.embed_tokens.weight"));
    EXPECT_FALSE(in->has("/reference/model.norm.weight")) << "the base is the reference";
    EXPECT_NE(in->read_string("/meta/lora_base").find("run.seed = 1234"), std::string::npos);
  }
  Config other = c;
  other.run.seed = 99;
  Job job(other, MPI_COMM_WORLD);
  const std::string e = load_error(job, checkpoint_path(dir, 0));
  EXPECT_NE(e.find("trained over another base"), std::string::npos) << e;
  EXPECT_NE(e.find("run.seed = 99"), std::string::npos) << e;
  if (world_rank() == 0) fs::remove_all(dir);
}
TEST(Checkpoint, LoraSavedOnAllRanksLoadsOnOne) {
  Config c = lora_config();
  c.rl.sft_steps = 3;
  const fs::path dir = fresh_dir("lora_reshard");
  const SavedRun saved = save_after_one_iteration(c, dir, MPI_COMM_WORLD);
  expect_resumes(c, dir, 1, saved, "LoRA saved on " + std::to_string(world_size()) + ", loaded on 1");
  if (world_rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace shardrl
