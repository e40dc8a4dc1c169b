// PhaseArena: the two phases' buffers overlap in one allocation of max(train, rollout) bytes,
// the ledger counts it once, and a buffer used outside its phase (or before the arena exists)
// stops the job instead of reading the other phase's data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/ledger_view.hpp"
#include "core/phase_arena.hpp"

namespace shardrl {
namespace {

std::vector<float> to_host(const float* p, std::size_t n) {
  Kokkos::View<float*, Kokkos::HostSpace> h("h", n);
  Kokkos::deep_copy(h, Kokkos::View<const float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(p, n));
  return std::vector<float>(h.data(), h.data() + n);
}

TEST(PhaseArena, PhasesOverlapInOneAllocationOfTheLargerSize) {
  const std::int64_t before = MemoryLedger::instance().total();
  PhaseArena arena(ExecSpace{});
  LedgerView<float> slots({&arena, Phase::train}, MemoryCategory::gather, "slots", 1000);
  LedgerView<float> acts({&arena, Phase::train}, MemoryCategory::activations, "acts", 3000);
  LedgerView<char> weights({&arena, Phase::rollout}, MemoryCategory::gather, "weights", 2500 * 4);
  LedgerView<float> cache({&arena, Phase::rollout}, MemoryCategory::kv_cache, "cache", 10);
  EXPECT_EQ(MemoryLedger::instance().total(), before) << "nothing is counted before the arena exists";
  arena.commit();

  // Train: 4000 + 3000 * 4 bytes... rounded to 256-byte boundaries per buffer.
  EXPECT_EQ(arena.phase_bytes(Phase::train), 4096 + 12032);
  EXPECT_EQ(arena.phase_bytes(Phase::rollout), 10240 + 256);
  EXPECT_EQ(arena.bytes(), 4096 + 12032 + 256) << "the larger phase, and room to align the start";
  // The ledger holds the larger phase's categories; padding counts as workspace.
  EXPECT_EQ(MemoryLedger::instance().total() - before, arena.bytes());
  EXPECT_EQ(arena.phase_bytes(Phase::train, MemoryCategory::activations), 12000);

  // Both phases start at the arena's beginning: the rollout weights reuse training's memory.
  arena.enter(Phase::train);
  const char* slots_at = reinterpret_cast<const char*>(slots.data());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(slots_at) % 256, 0u) << "buffers start on 256-byte boundaries";
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(acts.data()) % 256, 0u);
  arena.enter(Phase::rollout);
  EXPECT_EQ(reinterpret_cast<const char*>(weights.data()), slots_at);
  EXPECT_EQ(reinterpret_cast<const char*>(cache.data()), slots_at + 10240);
}

TEST(PhaseArena, LedgerReturnsToWhereItWasWhenTheArenaGoes) {
  const std::int64_t before = MemoryLedger::instance().total();
  {
    PhaseArena arena(ExecSpace{});
    LedgerView<float> a({&arena, Phase::rollout}, MemoryCategory::kv_cache, "a", 77);
    arena.commit();
    EXPECT_GT(MemoryLedger::instance().total(), before);
  }
  EXPECT_EQ(MemoryLedger::instance().total(), before);
}

TEST(PhaseArena, PoisonOnEnterFillsTheArenaWithNaN) {
  PhaseArena arena(ExecSpace{}, /*poison_on_enter=*/true);
  LedgerView<float> a({&arena, Phase::train}, MemoryCategory::activations, "a", 64);
  LedgerView<float> b({&arena, Phase::rollout}, MemoryCategory::activations, "b", 64);
  arena.commit();
  arena.enter(Phase::train);
  Kokkos::deep_copy(Kokkos::View<float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(a.data(), 64), 1.0f);
  arena.enter(Phase::rollout);
  for (float x : to_host(b.data(), 64)) EXPECT_TRUE(std::isnan(x));
}

TEST(PhaseArena, BufferOfTheOtherPhaseStopsTheJob) {
  PhaseArena arena(ExecSpace{});
  LedgerView<float> slots({&arena, Phase::train}, MemoryCategory::gather, "gather_slot", 16);
  LedgerView<float> cache({&arena, Phase::rollout}, MemoryCategory::kv_cache, "kv_cache_k", 16);
  EXPECT_DEATH((void)slots.data(), "buffer 'gather_slot' of the train phase used before the phase arena was allocated");
  arena.commit();
  EXPECT_DEATH((void)slots.data(), "buffer 'gather_slot' of the train phase used during the no phase");
  arena.enter(Phase::rollout);
  EXPECT_NE(cache.data(), nullptr);
  EXPECT_DEATH((void)slots.data(), "buffer 'gather_slot' of the train phase used during the rollout phase");
  EXPECT_DEATH(LedgerView<float>({&arena, Phase::train}, MemoryCategory::gather, "late", 4),
               "reserved in the phase arena after it was allocated");
}

// Storage another layer allocated (the communicator's symmetric memory): the buffers are placed
// in it, the ledger counts it as it counts an own allocation, and it is freed with the arena.
class TrackedStorage final : public DeviceAllocation {
 public:
  TrackedStorage(std::size_t bytes, bool& alive) : view_("given", bytes + 256), bytes_(bytes), alive_(alive) {
    alive_ = true;
  }
  ~TrackedStorage() override { alive_ = false; }
  char* data() const override {   // on a 256-byte boundary, as ncclMemAlloc's memory is
    const auto at = reinterpret_cast<std::uintptr_t>(view_.data());
    return view_.data() + (256 - at % 256) % 256;
  }
  std::size_t bytes() const override { return bytes_; }

 private:
  DeviceView<char> view_;
  std::size_t bytes_;
  bool& alive_;
};

TEST(PhaseArena, GivenStorageHoldsTheBuffers) {
  // The death test below allocates device memory: in a child that re-runs the test (a forked one
  // cannot initialise CUDA again).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::int64_t before = MemoryLedger::instance().total();
  bool alive = false;
  {
    PhaseArena arena(ExecSpace{});
    LedgerView<float> slots({&arena, Phase::train}, MemoryCategory::gather, "slots", 1000);
    LedgerView<float> cache({&arena, Phase::rollout}, MemoryCategory::kv_cache, "cache", 10);
    EXPECT_EQ(arena.required_bytes(), 4096u);
    auto given = std::make_unique<TrackedStorage>(8192, alive);   // larger, as when ranks' sizes are agreed
    const char* base = given->data();
    Kokkos::deep_copy(Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(given->data(), 8192),
                      char(1));
    arena.commit(std::move(given));
    EXPECT_TRUE(arena.external());
    EXPECT_EQ(arena.bytes(), 8192);
    EXPECT_EQ(MemoryLedger::instance().total() - before, 8192) << "the padding past the buffers is workspace";
    arena.enter(Phase::train);
    EXPECT_EQ(reinterpret_cast<const char*>(slots.data()), base);
    for (float x : to_host(slots.data(), 1000)) ASSERT_EQ(x, 0.0f) << "given storage is zeroed, as an own allocation is";
    arena.enter(Phase::rollout);
    EXPECT_EQ(reinterpret_cast<const char*>(cache.data()), base);
    EXPECT_TRUE(alive);
  }
  EXPECT_FALSE(alive) << "the arena frees what it was given";
  EXPECT_EQ(MemoryLedger::instance().total(), before);

  PhaseArena small(ExecSpace{});
  LedgerView<float> big({&small, Phase::train}, MemoryCategory::gather, "big", 4096);
  EXPECT_DEATH(small.commit(std::make_unique<TrackedStorage>(1024, alive)),
               "the phase arena needs 16384 bytes, but was given 1024");
}

// Ranks compare fingerprints before their arenas become symmetric memory: equal reservations
// give equal fingerprints; another size, order or phase does not.
TEST(PhaseArena, LayoutFingerprintFollowsEveryReservation) {
  auto fingerprint = [](const std::vector<std::pair<Phase, std::size_t>>& reservations) {
    PhaseArena arena(ExecSpace{});
    for (const auto& [phase, bytes] : reservations) arena.reserve(phase, MemoryCategory::gather, bytes);
    return arena.layout_fingerprint();
  };
  const auto base = fingerprint({{Phase::train, 1000}, {Phase::train, 300}, {Phase::rollout, 64}});
  EXPECT_EQ(fingerprint({{Phase::train, 1000}, {Phase::train, 300}, {Phase::rollout, 64}}), base);
  EXPECT_NE(fingerprint({{Phase::train, 300}, {Phase::train, 1000}, {Phase::rollout, 64}}), base) << "order";
  EXPECT_NE(fingerprint({{Phase::train, 1000}, {Phase::train, 301}, {Phase::rollout, 64}}), base) << "a size";
  EXPECT_NE(fingerprint({{Phase::train, 1000}, {Phase::rollout, 300}, {Phase::rollout, 64}}), base) << "a phase";
  PhaseArena other(ExecSpace{});
  other.reserve(Phase::train, MemoryCategory::activations, 1000);
  other.reserve(Phase::train, MemoryCategory::gather, 300);
  other.reserve(Phase::rollout, MemoryCategory::gather, 64);
  EXPECT_NE(other.layout_fingerprint(), base) << "a category";
}

TEST(PhaseArena, OwnAllocationsAreCountedAsBefore) {
  const std::int64_t before = MemoryLedger::instance().bytes(MemoryCategory::grads);
  {
    LedgerView<float> g(MemoryCategory::grads, "g", 100);
    EXPECT_EQ(MemoryLedger::instance().bytes(MemoryCategory::grads) - before, 400);
    LedgerView<float> moved = std::move(g);
    EXPECT_EQ(MemoryLedger::instance().bytes(MemoryCategory::grads) - before, 400);
    EXPECT_EQ(g.data(), nullptr);
  }
  EXPECT_EQ(MemoryLedger::instance().bytes(MemoryCategory::grads), before);
}

}  // namespace
}  // namespace shardrl
