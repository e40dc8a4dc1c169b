// The shardrl side of the comparison with Hugging Face transformers (tests/gpu/hf_parity.py):
// imports a Hugging Face model directory through `model.init_from`'s path (the one Config, the
// FSDP trainer, each rank reading its own slices), runs the given token rows and writes what
// PyTorch is compared on: the logits of a forward pass and the gradient of
//   L = mean over rows and positions 0..S-2 of -log p(token[n + 1] | tokens[..n])
// for every parameter, under its Hugging Face name. Rows are split across the ranks (each
// rank's share of L is scaled by the global token count; the reduce-scatter sums).
//
//   mpirun -np N hf_parity --model DIR --tokens TOKENS.json --precision fp32|bf16 --out OUT.safetensors
//          [--save RUN_DIR] [--set key=value ...]
//
// With LoRA (--set lora.rank=R ..., and lora.init_from=PEFT_DIR for given adapters) DIR is the
// frozen base and only the adapters' gradients are written (tests/gpu/peft_parity.py). --save
// writes the loaded policy as a job checkpoint, RUN_DIR/checkpoints/iter_00000000.h5, before the
// forward, for `convert` to export.
// TOKENS.json: {"tokens": [[...], ...]}, rows of equal length, divisible by N.
#include <mpi.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "app/job_config.hpp"
#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/kokkos.hpp"
#include "fsdp/sharded_trainer.hpp"
#include "io/safetensors.hpp"
#include "mpi/communicator.hpp"
#include "mpi/device.hpp"
#include "mpi/layout.hpp"
#include "mpi/session.hpp"
#include "config/print.hpp"
#include "job/hf_config.hpp"
#include "job/job_checkpoint.hpp"
#include "job/policy.hpp"

namespace {

using namespace shardrl;

struct Args {
  std::string model, tokens, precision = "fp32", out, save;
  std::vector<std::string> overrides;   // --set key=value, as the job's command line takes them
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--tokens") a.tokens = v;
    else if (k == "--precision") a.precision = v;
    else if (k == "--out") a.out = v;
    else if (k == "--save") a.save = v;
    else if (k == "--set") a.overrides.push_back(v);
    else throw InputError("unknown argument " + k);
  }
  if (a.model.empty() || a.tokens.empty() || a.out.empty())
    throw InputError("usage: hf_parity --model DIR --tokens TOKENS.json --precision fp32|bf16 --out OUT.safetensors");
  return a;
}

std::vector<std::vector<std::int32_t>> read_rows(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot open " + path);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<std::vector<std::int32_t>> rows = j.at("tokens").get<std::vector<std::vector<std::int32_t>>>();
  if (rows.empty() || rows[0].size() < 2) throw InputError(path + ": no rows of two or more tokens");
  for (const auto& r : rows)
    if (r.size() != rows[0].size()) throw InputError(path + ": rows of different lengths");
  return rows;
}

// n values of the compute type at a device address, as fp32 on the host.
std::vector<float> to_host(const void* device, std::size_t n, bool bf16_values) {
  std::vector<float> out(n);
  if (bf16_values) {
    Kokkos::View<const bf16*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> v(static_cast<const bf16*>(device),
                                                                                         n);
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(h(i));
  } else {
    Kokkos::View<const float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> v(
        static_cast<const float*>(device), n);
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
    std::copy(h.data(), h.data() + n, out.begin());
  }
  return out;
}

int run(int argc, char** argv, MpiSession& mpi) {
  const Args args = parse(argc, argv);
  const ProcessLayout layout = ProcessLayout::discover(mpi.world());
  const int rank = layout.world_rank, world = layout.world_size;
  const auto rows = read_rows(args.tokens);
  const int B = static_cast<int>(rows.size()), S = static_cast<int>(rows[0].size());
  if (B % world != 0) throw InputError("the rows must divide among the ranks");
  const int local = B / world;
  const std::string toml = hf_job_config_toml(args.model);
  std::vector<std::string> overrides{"model.precision=" + args.precision,
                                     "train.micro_batch_size=" + std::to_string(local),
                                     "train.seq_len=" + std::to_string(S)};
  // transformers' loss has no load-balancing term unless asked (output_router_logits).
  if (toml.find("n_experts") != std::string::npos) overrides.push_back("model.aux_loss_coef=0");
  // The comparison reads the whole batch's logits after a forward: one chunk holds them all.
  overrides.push_back("train.logits_chunk_tokens=0");
  overrides.insert(overrides.end(), args.overrides.begin(), args.overrides.end());
  const LoadedConfig loaded = parse_job_config(toml, args.model + "/config.json (as a job)", overrides, world);
  if (!loaded.ok()) {
    report_config_errors(loaded, rank);
    return 2;
  }
  const Config& cfg = loaded.config;
  const DeviceBinding device = bind_device(layout);
  KokkosRuntime kokkos(device.device_id);
  {
    auto comm = make_communicator(kDeviceIsGpu ? CommBackendKind::nccl : CommBackendKind::mpi, mpi.world(),
                                  cfg.comm.timeout_s);
    Policy policy(cfg, *comm);
    policy.load_init_from(mpi.world(), /*adapters=*/true);
    if (!args.save.empty())
      save_job_checkpoint(std::filesystem::path(args.save) / "checkpoints", JobPosition{}, policy, to_toml(cfg),
                          mpi.world());
    Transformer& model = policy.model();
    ShardedTrainer& trainer = policy.trainer();

    // This rank's rows; targets are the next tokens, the last position has none (mask 0).
    std::vector<std::int32_t> tokens, targets;
    std::vector<float> mask;
    for (int r = rank * local; r < (rank + 1) * local; ++r)
      for (int n = 0; n < S; ++n) {
        tokens.push_back(rows[r][n]);
        targets.push_back(n + 1 < S ? rows[r][n + 1] : 0);
        mask.push_back(n + 1 < S ? 1.0f : 0.0f);
      }
    model.set_batch(tokens.data(), targets.data(), local, S);
    const std::int64_t V = model.options().shape.vocab_size;
    const bool bf16_compute = model.compute_type_size() == 2;

    DeviceView<float> logp("logp", tokens.size()), dmask("mask", mask.size()), loss("loss", 1);
    trainer.forward_logp(logp.data());
    std::vector<float> logits = to_host(model.logits(), tokens.size() * static_cast<std::size_t>(V), bf16_compute);
    Kokkos::deep_copy(dmask, Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                                 mask.data(), mask.size()));
    trainer.forward_backward(dmask.data(), 1.0f / static_cast<float>(B * (S - 1)), loss.data());
    float my_loss = to_host(loss.data(), 1, false)[0], total_loss = 0;
    MPI_Reduce(&my_loss, &total_loss, 1, MPI_FLOAT, MPI_SUM, 0, mpi.world());

    std::vector<float> all_logits(rank == 0 ? logits.size() * world : 0);
    MPI_Gather(logits.data(), static_cast<int>(logits.size()), MPI_FLOAT, all_logits.data(),
               static_cast<int>(logits.size()), MPI_FLOAT, 0, mpi.world());
    // Every unit's gradient whole on rank 0, then cut into its parameters. With LoRA a rank's
    // gradient slice is its share of the adapters' region, which starts at adapters_begin.
    std::vector<std::vector<float>> grads;
    for (int u = 0; u < model.unit_count(); ++u) {
      const std::vector<float> slice = trainer.read_gradient_slice(u);
      std::vector<float> full(rank == 0 ? slice.size() * world : 0);
      MPI_Gather(slice.data(), static_cast<int>(slice.size()), MPI_FLOAT, full.data(), static_cast<int>(slice.size()),
                 MPI_FLOAT, 0, mpi.world());
      grads.push_back(std::move(full));
    }
    if (rank == 0) {
      std::vector<std::vector<float>> keep;   // the grads' pieces, alive until written
      std::vector<StWrite> tensors{{"logits", {B, S, V}, StDtype::f32, all_logits.data()},
                                   {"loss", {1}, StDtype::f32, &total_loss}};
      const bool lora = trainer.lora();
      for (int u = 0; u < model.unit_count(); ++u)
        for (const ParamSpec& p : model.units()[u].params) {
          if (!model.units()[u].trains(p, lora)) continue;
          const std::int64_t at = p.offset - (lora ? model.units()[u].adapters_begin : 0);
          keep.emplace_back(grads[u].begin() + at, grads[u].begin() + at + p.numel());
          tensors.push_back({"grad." + p.name, p.shape, StDtype::f32, nullptr});
        }
      for (std::size_t i = 2; i < tensors.size(); ++i) tensors[i].values = keep[i - 2].data();
      write_safetensors(args.out, tensors, {{"format", "pt"}});
      std::cout << "hf_parity: " << args.model << " (" << args.precision << ", " << world << " ranks): loss "
                << total_loss << " -> " << args.out << "\n";
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  try {
    return run(argc, argv, mpi);
  } catch (const std::exception& e) {
    std::cerr << "hf_parity: " << e.what() << "\n";
    MPI_Abort(mpi.world(), 2);
  }
  return 2;
}
