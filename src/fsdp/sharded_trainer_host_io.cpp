// The trainer's state between the device and the host, slice by slice: what checkpoints save
// and load, Hugging Face imports write, asynchronous saves snapshot, and tests read. Off the
// train step; every function synchronises with the device.
#include "fsdp/sharded_trainer.hpp"

#include <type_traits>

#include "core/error.hpp"
#include "kernels/elementwise.hpp"

namespace shardrl {
namespace {

using DeviceFloats = Kokkos::View<float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// The first `n` elements of a device staging buffer on the host, once the device is done.
std::vector<float> to_host(const ExecSpace& space, const LedgerView<float>& staging, std::size_t n) {
  space.fence();
  std::vector<float> out(n);
  Kokkos::deep_copy(Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(out.data(), n),
                    DeviceFloats(staging.data(), n));
  return out;
}

}  // namespace

std::int64_t ShardedTrainer::state_elements(int u, SliceState state) const {
  const UnitShard& s = layout_.unit(u);
  return state == SliceState::reference ? s.shard : s.trainable;
}

std::vector<float> ShardedTrainer::read_slice(int u, SliceState state) const {
  std::vector<float> out(static_cast<std::size_t>(state_elements(u, state)));
  copy_slice_to_host(u, state, out.data());
  return out;
}

void ShardedTrainer::copy_slice_to_host(int u, SliceState state, float* host) const {
  const std::size_t n = static_cast<std::size_t>(state_elements(u, state));
  const Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> to(host, n);
  slices(state).visit(u, [&](const auto* p) {
    if constexpr (std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(p)>>, float>) {
      space_.fence();   // fp32 state: straight to the host, no staging buffer
      Kokkos::deep_copy(to, Kokkos::View<const float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(p, n));
    } else {
      LedgerView<float> staging(MemoryCategory::workspace, "checkpoint_slice", n);
      kernels::cast(space_, p, staging.data(), static_cast<long>(n));
      space_.fence();
      Kokkos::deep_copy(to, DeviceFloats(staging.data(), n));
    }
  });
}

std::vector<float> ShardedTrainer::read_gradient_slice(int u) const {
  const long n = static_cast<long>(layout_.unit(u).trainable);
  if (grad_empty_[static_cast<std::size_t>(u)]) return std::vector<float>(static_cast<std::size_t>(n), 0.0f);
  LedgerView<float> staging(MemoryCategory::workspace, "gradient_slice", static_cast<std::size_t>(n));
  grad_.visit(u, [&](const auto* g) { kernels::cast(space_, g, staging.data(), n); });
  return to_host(space_, staging, static_cast<std::size_t>(n));
}

void ShardedTrainer::write_slice(int u, SliceState state, const std::vector<float>& values) {
  const long n = static_cast<long>(state_elements(u, state));
  SHARDRL_CHECK(static_cast<long>(values.size()) == n, "write_slice: one value per element of the slice");
  LedgerView<float> staging(MemoryCategory::workspace, "checkpoint_slice", static_cast<std::size_t>(n));
  Kokkos::deep_copy(DeviceFloats(staging.data(), values.size()),
                    Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                        values.data(), values.size()));
  slices(state).visit(u, [&](auto* p) { kernels::cast(space_, staging.data(), p, n); });
  if (state == SliceState::main && !compute_.empty()) {   // the compute copy follows its main weights
    const std::int64_t at = layout_.unit(u).trainable_offset;
    compute_.visit(u, [&](auto* c) { kernels::cast(space_, static_cast<const float*>(main_.as<float>(u)), c + at, n); });
  }
  space_.fence();
}

// With LoRA the weights' slice is the compute-type base (its only copy) and the fp32 adapters:
// formed in `slice` (s.shard elements) on the device.
void ShardedTrainer::form_lora_slice(int u, float* slice) const {
  const UnitShard& s = layout_.unit(u);
  compute_.visit(u, [&](const auto* c) { kernels::cast(space_, c, slice, s.shard); });
  kernels::cast(space_, static_cast<const float*>(main_.as<float>(u)), slice + s.trainable_offset, s.trainable);
}

std::vector<float> ShardedTrainer::read_weights(int u) const {
  if (!lora()) return read_slice(u, SliceState::main);
  const std::size_t n = static_cast<std::size_t>(layout_.unit(u).shard);
  LedgerView<float> staging(MemoryCategory::workspace, "weights_slice", n);
  form_lora_slice(u, staging.data());
  return to_host(space_, staging, n);
}

void ShardedTrainer::write_weights(int u, const std::vector<float>& values) {
  if (!lora()) return write_slice(u, SliceState::main, values);
  const UnitShard& s = layout_.unit(u);
  SHARDRL_CHECK(static_cast<std::int64_t>(values.size()) == s.shard, "write_weights: one value per element of the slice");
  LedgerView<float> staging(MemoryCategory::workspace, "weights_slice", values.size());
  Kokkos::deep_copy(DeviceFloats(staging.data(), values.size()),
                    Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                        values.data(), values.size()));
  compute_.visit(u, [&](auto* c) { kernels::cast(space_, static_cast<const float*>(staging.data()), c, s.shard); });
  kernels::cast(space_, static_cast<const float*>(staging.data()) + s.trainable_offset, main_.as<float>(u),
                s.trainable);
  space_.fence();
}

std::vector<float> ShardedTrainer::gather_main_weights(int u) {
  const UnitShard& s = layout_.unit(u);
  LedgerView<float> full(MemoryCategory::workspace, "gathered_main", static_cast<std::size_t>(s.padded));
  LedgerView<float> slice;
  const void* source = main_.address(u);
  if (lora()) {
    slice = LedgerView<float>(MemoryCategory::workspace, "main_slice", static_cast<std::size_t>(s.shard));
    form_lora_slice(u, slice.data());
    source = slice.data();
  }
  space_.fence();
  all_gather_unit(u, source, full.data(), DataType::f32, stream_of(space_));
  comm_.synchronize(stream_of(space_));
  return to_host(space_, full, static_cast<std::size_t>(s.numel));
}

}  // namespace shardrl
