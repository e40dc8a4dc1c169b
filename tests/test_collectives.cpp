// Collectives of this build's backend (MPI on CPU, NCCL on GPU) against values every rank
// computes on the host: float and bf16, sizes 0, 1, not divisible by the world size, and
// 64 MiB; in-place forms; every root; every reduction; all-to-all with variable counts.
#include <gtest/gtest.h>

#include <vector>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"
#include "mpi/communicator.hpp"

namespace shardrl {
namespace {

Communicator& comm() {
  static std::unique_ptr<Communicator> c = make_communicator(
      has_backend(CommBackendKind::nccl) ? CommBackendKind::nccl : CommBackendKind::mpi, MPI_COMM_WORLD, 120.0);
  return *c;
}

// Small integers: every sum, average over 1, 2 or 4 ranks and max is exact in bf16 and fp32.
double value(long rank, long i) { return double((i * 7 + rank * 3) % 11) - 5.0; }

template <class T>
DeviceView<T> filled(long n, long rank, long offset = 0) {
  DeviceView<T> v("v", n);
  auto h = Kokkos::create_mirror_view(v);
  for (long i = 0; i < n; ++i) h(i) = T(static_cast<float>(value(rank, offset + i)));
  Kokkos::deep_copy(v, h);
  return v;
}

template <class T>
std::vector<double> to_host(const DeviceView<T>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<double> out(v.extent(0));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(h(i));
  return out;
}

template <class T>
class Collectives : public ::testing::Test {};
using ElementTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(Collectives, ElementTypes);

const std::vector<long> kSizes = {0, 1, 1001, 7 * 1024 + 3};
constexpr long kBytes64Mi = 64l << 20;

// The reduction over ranks of value(r, i), in fp64.
double reduced(ReduceOp op, int ranks, long i) {
  double sum = 0, mx = -1e30;
  for (int r = 0; r < ranks; ++r) {
    sum += value(r, i);
    mx = std::max(mx, value(r, i));
  }
  return op == ReduceOp::sum ? sum : op == ReduceOp::average ? sum / ranks : mx;
}

template <class T>
void check_all_reduce(long n, ReduceOp op, bool in_place) {
  Communicator& c = comm();
  const int ws = c.size();
  DeviceView<T> send = filled<T>(n, c.rank());
  DeviceView<T> recv = in_place ? send : DeviceView<T>("recv", n);
  c.all_reduce(send.data(), recv.data(), n, op, stream_of(ExecSpace()));
  c.synchronize(stream_of(ExecSpace()));
  auto got = to_host(recv);
  for (long i = 0; i < n; ++i) ASSERT_EQ(got[i], reduced(op, ws, i)) << "n=" << n << " i=" << i;
}

TYPED_TEST(Collectives, AllReduce) {
  for (long n : kSizes)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max}) {
      check_all_reduce<TypeParam>(n, op, false);
      check_all_reduce<TypeParam>(n, op, true);
    }
}

TYPED_TEST(Collectives, AllReduce64MiB) { check_all_reduce<TypeParam>(kBytes64Mi / sizeof(TypeParam), ReduceOp::sum, false); }

template <class T>
void check_all_gather(long n, bool in_place) {
  Communicator& c = comm();
  const int ws = c.size(), me = c.rank();
  DeviceView<T> recv("recv", n * ws);
  DeviceView<T> send;
  if (in_place) {
    send = Kokkos::subview(recv, std::make_pair(me * n, (me + 1) * n));
    Kokkos::deep_copy(send, filled<T>(n, me));
  } else {
    send = filled<T>(n, me);
  }
  c.all_gather(send.data(), recv.data(), n, stream_of(ExecSpace()));
  c.synchronize(stream_of(ExecSpace()));
  auto got = to_host(recv);
  for (int r = 0; r < ws; ++r)
    for (long i = 0; i < n; ++i) ASSERT_EQ(got[r * n + i], value(r, i)) << "n=" << n << " r=" << r;
}

TYPED_TEST(Collectives, AllGather) {
  for (long n : kSizes) {
    check_all_gather<TypeParam>(n, false);
    check_all_gather<TypeParam>(n, true);
  }
}

TYPED_TEST(Collectives, AllGather64MiB) {
  check_all_gather<TypeParam>(kBytes64Mi / sizeof(TypeParam) / comm().size(), false);
}

template <class T>
void check_reduce_scatter(long n, ReduceOp op, bool in_place) {
  Communicator& c = comm();
  const int ws = c.size(), me = c.rank();
  DeviceView<T> send = filled<T>(n * ws, me);
  DeviceView<T> recv = in_place ? DeviceView<T>(Kokkos::subview(send, std::make_pair(me * n, (me + 1) * n)))
                                : DeviceView<T>("recv", n);
  c.reduce_scatter(send.data(), recv.data(), n, op, stream_of(ExecSpace()));
  c.synchronize(stream_of(ExecSpace()));
  auto got = to_host(recv);
  for (long i = 0; i < n; ++i) ASSERT_EQ(got[i], reduced(op, ws, me * n + i)) << "n=" << n << " i=" << i;
}

TYPED_TEST(Collectives, ReduceScatter) {
  for (long n : kSizes)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max}) {
      check_reduce_scatter<TypeParam>(n, op, false);
      check_reduce_scatter<TypeParam>(n, op, true);
    }
}

TYPED_TEST(Collectives, ReduceScatter64MiB) {
  check_reduce_scatter<TypeParam>(kBytes64Mi / sizeof(TypeParam) / comm().size(), ReduceOp::sum, false);
}

// A global tensor whose length the world size does not divide travels as padded shards.
TYPED_TEST(Collectives, PaddedShardsOfIndivisibleLength) {
  Communicator& c = comm();
  const int ws = c.size(), me = c.rank();
  const long total = 1001 + ws;   // not a multiple of 2 (1003) or 4 (1005)
  const long shard = static_cast<long>(padded_shard(total, ws));
  EXPECT_GE(shard * ws, total);
  EXPECT_LT(shard * ws - total, ws);
  // Each rank holds its slice of value(0, i) for i < total, zero in the padding.
  DeviceView<TypeParam> mine("mine", shard);
  auto h = Kokkos::create_mirror_view(mine);
  for (long i = 0; i < shard; ++i) {
    long g = me * shard + i;
    h(i) = TypeParam(g < total ? static_cast<float>(value(0, g)) : 0.0f);
  }
  Kokkos::deep_copy(mine, h);
  DeviceView<TypeParam> full("full", shard * ws);
  c.all_gather(mine.data(), full.data(), shard, stream_of(ExecSpace()));
  c.synchronize(stream_of(ExecSpace()));
  auto got = to_host(full);
  for (long g = 0; g < total; ++g) ASSERT_EQ(got[g], value(0, g)) << g;
  // And back: every rank contributes the full tensor, each receives the sum of its slice.
  DeviceView<TypeParam> reduced("reduced", shard);
  c.reduce_scatter(full.data(), reduced.data(), shard, ReduceOp::sum, stream_of(ExecSpace()));
  c.synchronize(stream_of(ExecSpace()));
  auto back = to_host(reduced);
  for (long i = 0; i < shard; ++i) {
    long g = me * shard + i;
    ASSERT_EQ(back[i], g < total ? ws * value(0, g) : 0.0) << g;
  }
}

TYPED_TEST(Collectives, BroadcastFromEveryRoot) {
  Communicator& c = comm();
  for (long n : kSizes)
    for (int root = 0; root < c.size(); ++root) {
      DeviceView<TypeParam> buf = filled<TypeParam>(n, c.rank());
      c.broadcast(buf.data(), n, root, stream_of(ExecSpace()));
      c.synchronize(stream_of(ExecSpace()));
      auto got = to_host(buf);
      for (long i = 0; i < n; ++i) ASSERT_EQ(got[i], value(root, i)) << "root=" << root;
    }
}

// All-to-all with variable counts (zero among them), segments at arbitrary offsets: sent in
// destination order with gaps, received in reverse source order. Element i from s to d is
// small-integer coded by (s, d, i), exact in bf16.
template <class T>
void check_all_to_all(long unit) {
  Communicator& c = comm();
  const int ws = c.size(), me = c.rank();
  auto count = [&](int src, int dst) { return static_cast<std::size_t>(((src * 3 + dst * 5) % 4) * unit); };
  auto code = [](int src, int dst, long i) { return double((src * 7 + dst * 3 + i) % 61) - 30.0; };
  std::vector<std::size_t> sc(ws), so(ws), rc(ws), ro(ws);
  std::size_t send_total = 0, recv_total = 0;
  for (int d = 0; d < ws; ++d) {
    sc[d] = count(me, d);
    so[d] = send_total;
    send_total += sc[d] + 3;
  }
  for (int s = ws - 1; s >= 0; --s) {
    rc[s] = count(s, me);
    ro[s] = recv_total;
    recv_total += rc[s];
  }
  DeviceView<T> send("send", send_total), recv("recv", recv_total);
  auto h = Kokkos::create_mirror_view(send);
  for (int d = 0; d < ws; ++d)
    for (std::size_t i = 0; i < sc[d]; ++i) h(so[d] + i) = T(static_cast<float>(code(me, d, long(i))));
  Kokkos::deep_copy(send, h);
  c.all_to_all_v(send.data(), sc.data(), so.data(), recv.data(), rc.data(), ro.data(), data_type_of<T>(),
                 stream_of(ExecSpace()));
  c.synchronize(stream_of(ExecSpace()));
  auto got = to_host(recv);
  for (int s = 0; s < ws; ++s)
    for (std::size_t i = 0; i < rc[s]; ++i)
      ASSERT_EQ(got[ro[s] + i], code(s, me, long(i))) << "from " << s << " element " << i << " unit " << unit;
}

TYPED_TEST(Collectives, AllToAllWithVariableCounts) {
  for (long unit : {1L, 1001L, 64L * 1024}) check_all_to_all<TypeParam>(unit);
}

TEST(CollectivesMisc, IntegerAllReduceAndBarrier) {
  Communicator& c = comm();
  DeviceView<std::int64_t> v("v", 3);
  auto h = Kokkos::create_mirror_view(v);
  for (int i = 0; i < 3; ++i) h(i) = (std::int64_t(1) << 40) + c.rank() * (i + 1);
  Kokkos::deep_copy(v, h);
  c.all_reduce(v.data(), v.data(), 3, ReduceOp::sum, stream_of(ExecSpace()));
  c.synchronize(stream_of(ExecSpace()));
  Kokkos::deep_copy(h, v);
  const std::int64_t ws = c.size(), rank_sum = ws * (ws - 1) / 2;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(h(i), ws * (std::int64_t(1) << 40) + rank_sum * (i + 1));
  c.barrier();
  EXPECT_EQ(c.rank(), [] { int r; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }());
}

}  // namespace
}  // namespace shardrl
