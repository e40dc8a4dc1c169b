#include "app/collective_smoke.hpp"

#include <chrono>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"
#include "app/smoke_pattern.hpp"

namespace shardrl {
namespace {

template <class T>
std::size_t count_mismatches(const DeviceView<T>& v, long n, long offset_rank_block, long it,
                             long ranks, int which) {
  // which: 0 all_reduce (i -> sum), 1 all_gather (r*n+i -> smoke_pattern(r,i)), 2 reduce_scatter
  // (i -> sum over ranks of block `offset_rank_block`), 3 broadcast (i -> smoke_pattern(root,i)).
  std::size_t bad = 0;
  Kokkos::parallel_reduce(
      "smoke_check", Kokkos::RangePolicy<ExecSpace>(0, v.extent(0)),
      KOKKOS_LAMBDA(const long k, std::size_t& acc) {
        int expected = 0;
        if (which == 0) expected = smoke_ones_over_ranks(ranks, k, it);
        if (which == 1) expected = smoke_pattern(k / n, k % n, it);
        if (which == 2) expected = smoke_ones_over_ranks(ranks, offset_rank_block * n + k, it);
        if (which == 3) expected = smoke_pattern(offset_rank_block, k, it);
        if (static_cast<float>(v(k)) != static_cast<float>(expected)) acc += 1;
      },
      bad);
  return bad;
}

template <class T>
void fill(const DeviceView<T>& v, long rank, long it) {
  Kokkos::parallel_for(
      "smoke_fill", Kokkos::RangePolicy<ExecSpace>(0, v.extent(0)),
      KOKKOS_LAMBDA(const long k) { v(k) = T(static_cast<float>(smoke_pattern(rank, k, it))); });
}

template <class T>
SmokeRound round_of(Communicator& comm, std::size_t elements, long it) {
  const long n = static_cast<long>(elements), ranks = comm.size(), rank = comm.rank();
  const StreamRef stream = stream_of(ExecSpace());
  SmokeRound out;
  out.elements = elements;

  DeviceView<T> mine("smoke_mine", elements), sum("smoke_sum", elements);
  DeviceView<T> gathered("smoke_gathered", elements * ranks);
  fill(mine, rank, it);

  ExecSpace().fence();
  auto t0 = std::chrono::steady_clock::now();
  comm.all_reduce(mine.data(), sum.data(), elements, ReduceOp::sum, stream);
  comm.synchronize(stream);
  out.all_reduce_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double bytes = static_cast<double>(elements * sizeof(T));
  if (out.all_reduce_seconds > 0)
    out.all_reduce_bus_gbps = 2.0 * (ranks - 1) / ranks * bytes / out.all_reduce_seconds / 1e9;
  out.mismatches += count_mismatches(sum, n, 0, it, ranks, 0);

  comm.all_gather(mine.data(), gathered.data(), elements, stream);
  comm.synchronize(stream);
  out.mismatches += count_mismatches(gathered, n, 0, it, ranks, 1);

  // Every rank's full-length buffer is the pattern over the global index; block r lands on rank r.
  fill(gathered, rank, it);
  comm.reduce_scatter(gathered.data(), sum.data(), elements, ReduceOp::sum, stream);
  comm.synchronize(stream);
  out.mismatches += count_mismatches(sum, n, rank, it, ranks, 2);

  const long root = it % ranks;
  if (rank != root) Kokkos::deep_copy(mine, T(-1.0f));
  ExecSpace().fence();
  comm.broadcast(mine.data(), elements, static_cast<int>(root), stream);
  comm.synchronize(stream);
  out.mismatches += count_mismatches(mine, n, root, it, ranks, 3);
  return out;
}

}  // namespace

SmokeRound run_collective_round(Communicator& comm, Precision precision, std::size_t elements,
                                long iteration) {
  return precision == Precision::bf16 ? round_of<bf16>(comm, elements, iteration)
                                      : round_of<float>(comm, elements, iteration);
}

}  // namespace shardrl
