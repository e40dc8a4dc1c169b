#include "job/policy.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "job/hf_weights.hpp"
#include "job/peft_adapter.hpp"
#include "job/memory_plan.hpp"
#include "job/options.hpp"
#include "mpi/mpi_check.hpp"
#include "mpi/polled_wait.hpp"

namespace shardrl {
namespace {

const char* name_of(Precision p) { return p == Precision::bf16 ? "bf16" : "fp32"; }
const char* name_of(GradDtype d) { return d == GradDtype::bf16 ? "bf16" : "fp32"; }
const char* name_of(LrSchedule s) { return s == LrSchedule::cosine ? "cosine" : "constant"; }

// `config` as the policy is built from it, once every rank agrees that its memory plan fits
// (job/memory_plan.hpp): checked before the first member allocates anything. A policy that is
// only sampled never trains: the model's training buffers, which it always has, are sized for a
// micro-batch of one sequence (no completion depends on the micro-batch), and no train step is
// captured (train.cuda_graph's input slots and its head on every token are the train phase's).
Config fitting(const Config& config, Communicator& comm, const PolicyUse& use) {
  Config built = config;
  if (use.sampled_only) {
    built.train.micro_batch_size = 1;
    built.train.cuda_graph = TrainGraph::none;
  }
  check_memory_plan(built, use.rl_loop, comm.host_comm(), use.generator, !use.sampled_only);
  return built;
}

}  // namespace

ModelOptions Policy::placed_model_options() {
  ModelOptions o = model_options(config_);
  o.arena = ArenaPlacement{&arena_, Phase::train};
  // With fsdp.expert_parallel (and MoE layers) the model computes its own experts for every
  // rank's tokens through this exchange; the trainer refuses a model built without it.
  if (config_.fsdp.expert_parallel && o.shape.n_experts > 0) {
    expert_exchange_ = std::make_unique<CommExpertExchange>(comm_, ExecSpace());
    o.expert_exchange = expert_exchange_.get();
  }
  return o;
}

Communicator* Policy::tensor_parallel_group() {
  const int T = static_cast<int>(config_.rollout.tensor_parallel);
  if (T <= 1) return nullptr;
  SHARDRL_CHECK(comm_.size() % T == 0, "rollout.tensor_parallel divides the ranks (the config checks it)");
  MPI_Comm group = MPI_COMM_NULL;
  SHARDRL_CHECK_MPI(MPI_Comm_split(comm_.host_comm(), comm_.rank() / T, comm_.rank(), &group));
  tensor_parallel_mpi_ = MpiComm(group);
  tensor_parallel_ = make_communicator(std::string(comm_.backend_name()) == "nccl" ? CommBackendKind::nccl
                                                                                   : CommBackendKind::mpi,
                                       group, config_.comm.timeout_s);
  return tensor_parallel_.get();
}

Policy::Policy(const Config& config, Communicator& comm, const PolicyUse& use)
    : config_(fitting(config, comm, use)), comm_(comm), arena_(ExecSpace(), config.debug.check_released),
      model_(placed_model_options(), ExecSpace()), trainer_(model_, comm_, [&] {
        FsdpOptions f = fsdp_options(config_);
        f.profile = use.profile;
        f.trains = !use.sampled_only;
        return f;
      }(), optimizer_options(config_)) {
  // The rollout's generator and weight set take the arena's rollout region; then it is allocated.
  if (use.rl_loop) {
    GrpoLoopOptions loop_options = grpo_loop_options(config_);
    loop_options.task.training_split = !use.sampled_only;
    loop_ = std::make_unique<GrpoLoop>(loop_options, model_, trainer_, comm_, arena_, tensor_parallel_group());
  }
  arena_.commit(arena_storage());
  arena_.enter(Phase::train);
  trainer_.initialize(static_cast<std::uint64_t>(config_.run.seed), static_cast<float>(config_.model.init_std));
  lora_base_.description = fmt::format("random initialisation: model.preset = {}, run.seed = {}, model.init_std = {}",
                                       config_.model.preset, config_.run.seed, config_.model.init_std);
}

Policy::~Policy() = default;

// With copy-engine gathers the arena is the communicator's symmetric memory. Its all-gathers
// then need each buffer at the same offset on every rank, which holds when every rank reserved
// the same buffers in the same order: the arenas' layout fingerprints are compared first, and a
// difference keeps the gathers on SM kernels ("auto") or stops the job ("copy").
std::unique_ptr<DeviceAllocation> Policy::arena_storage() {
  const GatherEngine engine = config_.comm.gather_engine;
  if (engine == GatherEngine::kernels || comm_.size() == 1) return nullptr;
  // Equal on every rank when the lowest fingerprint and the lowest complement agree (the latter
  // is the highest's complement): one reduction, polled against comm.timeout_s, so that a rank
  // that never comes stops the job before the communicator's blocking set-up.
  const unsigned long long fingerprint = arena_.layout_fingerprint();
  unsigned long long lowest[2] = {fingerprint, ~fingerprint};
  all_reduce_polled(comm_.host_comm(), lowest, 2, MPI_UNSIGNED_LONG_LONG, MPI_MIN, config_.comm.timeout_s,
                    "the agreement on the phase arenas' layout");
  if (lowest[0] != ~lowest[1]) {
    if (engine == GatherEngine::copy)
      SHARDRL_FATAL("comm.gather_engine = \"copy\": the ranks placed their phase arenas' buffers differently, so "
                    "the buffers' offsets would not match across ranks (use \"auto\" or \"sm\")");
    return nullptr;
  }
  std::unique_ptr<DeviceAllocation> storage = comm_.allocate_symmetric(arena_.required_bytes());
  if (!storage && engine == GatherEngine::copy)
    SHARDRL_FATAL(fmt::format("comm.gather_engine = \"copy\" needs copy-engine collectives on symmetric memory, "
                              "which the {} backend here lacks (NCCL 2.28 or later, with the GPUs able to map "
                              "each other's memory; use \"auto\" or \"sm\")",
                              comm_.backend_name()));
  return storage;
}

GrpoLoop& Policy::loop() {
  SHARDRL_CHECK(loop_ != nullptr, "the policy was built without its RL loop (PolicyUse::rl_loop)");
  return *loop_;
}

void Policy::load_init_from(MPI_Comm world, bool adapters) {
  SHARDRL_CHECK(!config_.model.init_from.empty(), "load_init_from without model.init_from");
  const std::uint32_t checksum =
      load_hf_weights(config_.model.init_from, trainer_, model_.units(), model_.options().shape, world);
  lora_base_ = LoraBase{"model.init_from = " + config_.model.init_from, checksum};
  if (adapters && !config_.lora.init_from.empty())
    load_peft_adapters(config_.lora.init_from, trainer_, model_.units(), model_.options().shape, world);
}

std::string Policy::build_report() const {
  const ModelOptions& m = model_.options();
  const FsdpOptions& f = trainer_.options();
  const OptimizerOptions& o = trainer_.optimizer_options();
  std::string out;
  auto line = [&](const char* name, const std::string& value) { out += fmt::format("  {:<24} {}\n", name, value); };
  line("compute precision", name_of(m.precision));
  line("weight gradients", m.gradient_accumulation_fusion ? "fused (GEMM accumulates into the fp32 gradient)"
                                                          : "unfused (GEMM into a buffer, then added)");
  line("attention", m.attention == AttentionImpl::flash   ? "flash (tensor cores, no S x S scores)"
                    : m.attention == AttentionImpl::cudnn ? "cudnn (fused, right-padded rows; flash otherwise)"
                                                          : "batched GEMMs (scores materialised per block)");
  line("activation recompute", m.activation_recompute ? "on" : "off");
  if (m.shape.n_experts > 0) {
    line("MoE expert GEMMs", m.moe_impl == MoeImpl::grouped ? "grouped" : "loop (expert by expert)");
    line("expert parallelism", m.expert_exchange ? fmt::format("on ({} ranks)", m.expert_exchange->ranks()) : "off");
  }
  line("reshard after forward", f.reshard_after_forward ? "on" : "off");
  line("weight all-gathers", arena_.external() ? "copy engines (the phase arena in symmetric memory)" : "SM kernels");
  line("reduce-scatter dtype", name_of(f.reduce_dtype));
  line("main gradient dtype", name_of(f.main_grad_dtype));
  line("Adam moment dtype", name_of(f.state_dtype));
  line("lr schedule", fmt::format("{} (peak {}, warm-up {} steps)", name_of(o.schedule), o.lr, o.warmup_steps));
  // A LoRA run's KL reference is its frozen base, which it holds anyway (no copy is kept).
  line("reference policy", trainer_.keeps_reference()                         ? "kept (rl.kl_coef > 0)"
                           : trainer_.lora() && config_.rl.kl_coef > 0 ? "the frozen base (LoRA; rl.kl_coef > 0)"
                                                                        : "none");
  if (loop_) {
    line("train step", loop_->step_graphs() ? "CUDA graph (train.cuda_graph = \"full\")" : "eager");
    line("decode step", loop_->decode_graphs() ? "CUDA graphs (rollout.cuda_graph = \"decode\")" : "eager");
    line("rollout engine", loop_->options().engine.engine == RolloutEngine::paged
                               ? "paged (a prompt prefilled once for its samples; blocks as rows grow)"
                               : "static (every row prefilled; rows x positions of KV cache)");
  }
  return out;
}

}  // namespace shardrl
