#include "job/async_checkpoint_save.hpp"

#include <fmt/format.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <exception>

#include "core/error.hpp"
#include "mpi/host_exchange.hpp"
#include "mpi/mpi_check.hpp"

namespace shardrl {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::size_t elements_of(Policy& policy) {
  const ShardedTrainer& trainer = policy.trainer();
  std::size_t n = 0;
  const int units = policy.model().unit_count();
  std::vector<SliceState> states{SliceState::main, SliceState::exp_avg, SliceState::exp_avg_sq};
  if (trainer.keeps_reference()) states.push_back(SliceState::reference);
  for (SliceState s : states)
    for (int u = 0; u < units; ++u) n += static_cast<std::size_t>(trainer.state_elements(u, s));
  return n;
}

}  // namespace

std::size_t AsyncCheckpointSave::state_bytes(Policy& policy) { return elements_of(policy) * sizeof(float); }

std::string AsyncCheckpointSave::unavailable() {
  int provided = MPI_THREAD_SINGLE;
  SHARDRL_CHECK_MPI(MPI_Query_thread(&provided));
  if (provided >= MPI_THREAD_MULTIPLE) return "";
  return "checkpoint.async = true needs an MPI library with MPI_THREAD_MULTIPLE (the save's writer thread makes MPI "
         "calls beside the training's); this one provides less: set checkpoint.async = false";
}

AsyncCheckpointSave::AsyncCheckpointSave(Policy& policy, MPI_Comm comm) : policy_(policy), world_(comm) {
  if (const std::string why = unavailable(); !why.empty()) throw InputError(why);
  MPI_Comm dup = MPI_COMM_NULL;
  SHARDRL_CHECK_MPI(MPI_Comm_dup(comm, &dup));
  comm_ = MpiComm(dup);
  cpu_set_t cores;
  if (sched_getaffinity(0, sizeof cores, &cores) == 0 && CPU_COUNT(&cores) == 1)
    spdlog::warn("checkpoint.async: this rank may run on one core only, which the save's writer thread shares with "
                 "training: give each rank a few cores (srun --cpus-per-task=8 as slurm/train.sbatch does; mpirun "
                 "--map-by slot:PE=8 or --bind-to none)");
  snapshot_ = Kokkos::View<float*, PinnedHostSpace>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "checkpoint_snapshot"),
                                                    elements_of(policy));
}

AsyncCheckpointSave::~AsyncCheckpointSave() {
  if (writer_.joinable()) writer_.join();
}

double AsyncCheckpointSave::start(const std::filesystem::path& dir, const JobPosition& position,
                                  const std::string& config_toml) {
  SHARDRL_CHECK(!in_flight_, "AsyncCheckpointSave::start: wait() for the save in flight first");
  const auto t0 = std::chrono::steady_clock::now();
  CheckpointManifest m = checkpoint_manifest(position, policy_, config_toml, world_);
  SHARDRL_CHECK(static_cast<std::size_t>(m.state_elements()) == snapshot_.extent(0),
                "AsyncCheckpointSave: the checkpoint's slices are not the snapshot's");
  slice_at_.clear();
  std::int64_t at = 0;
  for (const CheckpointManifest::Slice& s : m.slices) {
    slice_at_.push_back(at);
    policy_.trainer().copy_slice_to_host(s.unit, s.state, snapshot_.data() + at);
    at += s.elements;
  }
  // Every rank has its snapshot before any writes (so a pause is the slowest rank's copy).
  SHARDRL_CHECK_MPI(MPI_Barrier(world_));
  const double pause = seconds_since(t0);
  done_ = false;
  in_flight_ = true;
  error_.clear();
  iteration_ = m.iteration;
  writer_ = std::thread([this, dir, m = std::move(m)] {
    // Below training's priority: where the rank has one core, the writer takes what the main
    // thread leaves (a save that runs longer costs nothing; a slower iteration does).
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
    const auto begun = std::chrono::steady_clock::now();
    try {
      write_checkpoint(
          dir, m, [this](std::size_t i) -> const float* { return snapshot_.data() + slice_at_[i]; }, comm_.get(),
          /*show_progress=*/false);
    } catch (const InputError& e) {   // the same on every rank (the writer agrees before throwing)
      error_ = e.what();
    } catch (const std::exception& e) {
      fatal(fmt::format("checkpoint writer: {}", e.what()), __FILE__, __LINE__);
    } catch (...) {
      fatal("checkpoint writer: an exception that is not a std::exception", __FILE__, __LINE__);
    }
    seconds_ = seconds_since(begun);
    done_ = true;
  });
  return pause;
}

std::optional<AsyncCheckpointSave::Finished> AsyncCheckpointSave::poll() {
  // On the job's communicator: the writer may be inside a collective on its own.
  if (any_rank(world_, in_flight_ && !done_)) return std::nullopt;
  return wait();
}

std::optional<AsyncCheckpointSave::Finished> AsyncCheckpointSave::wait() {
  if (!in_flight_) return std::nullopt;
  writer_.join();
  in_flight_ = false;
  if (!error_.empty()) throw InputError(error_);
  return Finished{iteration_, seconds_};
}

}  // namespace shardrl
