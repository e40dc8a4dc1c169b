// The tensor-core attention (kernels/flash_attention.hpp, GPU builds) against the fp64 host
// reference of tests/attention_reference.hpp, right-padded and packed, head dims 64 and 128,
// lengths that do and do not fill its tiles; against the batched-GEMM attention on the same
// device at a length (2048) the reference is too slow for; bit-identical repeats. On CPU builds
// every test reports itself skipped: the kernels exist only for CUDA.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attention_reference.hpp"
#include "kernel_test_util.hpp"
#include "kernels/flash_attention.hpp"
#include "model/gemm_attention.hpp"

namespace shardrl::test {
namespace {

#define SKIP_WITHOUT_FLASH()                                                                \
  if (!kernels::flash_attention_available())                                              \
  GTEST_SKIP() << "the tensor-core attention exists only in GPU builds (SHARDRL_ENABLE_CUDA)"

// One problem's device buffers (bf16), outputs poisoned before each call.
struct FlashProblem {
  AttentionShape s;
  Inputs x;
  Buffer<bf16> q, k, v, dout, out, dq, dk, dv;
  Buffer<float> lse, delta;
  DeviceView<std::int32_t> pos;

  FlashProblem(const AttentionShape& shape, std::uint64_t seed, std::vector<std::int32_t> positions = {})
      : s(shape),
        q(random_buffer<bf16>(q_size(s), seed + 1, &x.q, -2.0, 2.0)),
        k(random_buffer<bf16>(kv_size(s), seed + 2, &x.k, -2.0, 2.0)),
        v(random_buffer<bf16>(kv_size(s), seed + 3, &x.v)),
        dout(random_buffer<bf16>(q_size(s), seed + 4, &x.dout)),
        out(q_size(s)),
        dq(q_size(s)),
        dk(kv_size(s)),
        dv(kv_size(s)),
        lse(lse_size(s)),
        delta(lse_size(s)),
        pos("positions", static_cast<std::size_t>(tokens_of(s))) {
    x.pos = positions.empty() ? right_padded_positions(s) : std::move(positions);
    auto h = Kokkos::create_mirror_view(pos);
    for (long n = 0; n < tokens_of(s); ++n) h(n) = x.pos[n];
    Kokkos::deep_copy(pos, h);
  }

  void forward() {
    out.poison();
    lse.poison();
    kernels::flash_attention_forward(stream_of(ExecSpace()), s, pos.data(), q.data(), k.data(), v.data(), out.data(),
                                     lse.data());
    Kokkos::fence();
  }
  void backward() {
    dq.poison();
    dk.poison();
    dv.poison();
    kernels::flash_attention_backward(stream_of(ExecSpace()), s, pos.data(), q.data(), k.data(), v.data(), out.data(),
                                      lse.data(), dout.data(), dq.data(), dk.data(), dv.data(), delta.data());
    Kokkos::fence();
  }

  // The batched-GEMM attention on the same inputs and device: {out, lse, dq, dk, dv}.
  std::vector<std::vector<double>> gemm_results() {
    Gemm gemm{ExecSpace()};
    const AttentionWorkspaceSizes w = attention_workspace_bytes(s, sizeof(bf16), true);
    Buffer<float> scores(static_cast<long>(w.scores / 4)), wdk(static_cast<long>(w.dkv / 4)),
        wdv(static_cast<long>(w.dkv / 4));
    Buffer<char> probs(static_cast<long>(w.probs));
    reserve_attention_gemms(gemm, s);
    const AttentionWorkspace ws{scores.data(), probs.data(), wdk.data(), wdv.data()};
    Buffer<bf16> o(q_size(s)), gq(q_size(s)), gk(kv_size(s)), gv(kv_size(s));
    Buffer<float> l(lse_size(s));
    gemm_attention_forward<bf16>(ExecSpace(), gemm, s, pos.data(), q.data(), k.data(), v.data(), o.data(), l.data(),
                                 ws);
    gemm_attention_backward<bf16>(ExecSpace(), gemm, s, pos.data(), q.data(), k.data(), v.data(), o.data(), l.data(),
                                  dout.data(), gq.data(), gk.data(), gv.data(), ws);
    return {o.host(), l.host(), gq.host(), gk.host(), gv.host()};
  }
};

void expect_matches_reference(FlashProblem& p) {
  p.forward();
  p.backward();
  const Forward ref = reference_forward(p.s, p.x);
  expect_close(p.out.host(), ref.out, out_rtol<bf16>(), out_rtol<bf16>() * max_abs(ref.out), "out");
  expect_close(p.lse.host(), ref.lse, lse_tol(), lse_tol(), "lse");
  const Grads g = reference_backward(p.s, p.x);
  expect_close(p.dq.host(), g.dq, grad_rtol<bf16>(), grad_atol_rel<bf16>() * dq_scale(p.s, p.x, g.dq), "dq");
  expect_close(p.dk.host(), g.dk, grad_rtol<bf16>(), grad_atol_rel<bf16>() * dk_scale(p.s, p.x, g.dk), "dk");
  expect_close(p.dv.host(), g.dv, grad_rtol<bf16>(), grad_atol_rel<bf16>() * max_abs(g.dv), "dv");
}

// Lengths around the kernels' tiles (16 rows a warp, 32/64-row tiles): 1, under one tile, one
// tile exactly, one past it, several tiles with a ragged end.
std::vector<AttentionShape> shapes() {
  std::vector<AttentionShape> out;
  const int heads[3][2] = {{1, 1}, {4, 2}, {6, 3}};
  const int rows[5][2] = {{1, 1}, {2, 17}, {1, 64}, {2, 65}, {1, 203}};
  for (int hd : {64, 128})
    for (const auto& hh : heads)
      for (const auto& bs : rows) out.push_back(AttentionShape{bs[0], bs[1], hh[0], hh[1], hd});
  return out;
}

TEST(FlashAttention, MatchesReferenceRightPadded) {
  SKIP_WITHOUT_FLASH();
  std::uint64_t seed = 300;
  for (const AttentionShape& s : shapes()) {
    SCOPED_TRACE(describe(s));
    FlashProblem p(s, seed += 10);
    expect_matches_reference(p);
  }
}

// Several sequences per row (length-1 ones, one filling a row, ragged ends), and rows long
// enough that sequences straddle the kernels' tiles.
TEST(FlashAttention, MatchesReferencePacked) {
  SKIP_WITHOUT_FLASH();
  std::uint64_t seed = 700;
  for (const AttentionShape& s : {AttentionShape{3, 33, 4, 2, 64}, AttentionShape{3, 150, 6, 3, 64},
                                  AttentionShape{4, 97, 2, 1, 128}, AttentionShape{3, 260, 4, 4, 128}}) {
    const RowLengths rows = random_row_lengths(s, seed += 10);
    SCOPED_TRACE(describe(s) + " lengths " + describe(rows));
    FlashProblem p(s, seed, packed_positions(s, rows));
    expect_matches_reference(p);
  }
}

// At S = 2048 (llama-1b's and qwen3-0.6b's heads) against the batched-GEMM attention on the
// device: both within the sum of their tolerances against exact attention.
TEST(FlashAttention, MatchesGemmAttentionAtLength2048) {
  SKIP_WITHOUT_FLASH();
  for (const AttentionShape& s : {AttentionShape{1, 2048, 32, 8, 64}, AttentionShape{1, 2048, 16, 8, 128}}) {
    SCOPED_TRACE(describe(s));
    FlashProblem p(s, 1234);
    p.forward();
    p.backward();
    const std::vector<std::vector<double>> want = p.gemm_results();
    const std::vector<double> got[5] = {p.out.host(), p.lse.host(), p.dq.host(), p.dk.host(), p.dv.host()};
    const char* names[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int t = 0; t < 5; ++t) {
      const double rtol = t == 1 ? 2 * lse_tol() : 2 * (t == 0 ? out_rtol<bf16>() : grad_rtol<bf16>());
      const double atol = t == 1 ? 2 * lse_tol() : 2 * (t == 0 ? out_rtol<bf16>() : grad_atol_rel<bf16>()) *
                                                       max_abs(want[t]);
      expect_close(got[t], want[t], rtol, atol, names[t]);
    }
  }
}

// Same inputs, same bits: no atomics, a fixed order of every sum.
TEST(FlashAttention, Deterministic) {
  SKIP_WITHOUT_FLASH();
  const AttentionShape s{3, 300, 8, 2, 128};
  FlashProblem p(s, 55, packed_positions(s, random_row_lengths(s, 56)));
  p.forward();
  p.backward();
  const std::vector<double> first[5] = {p.out.host(), p.lse.host(), p.dq.host(), p.dk.host(), p.dv.host()};
  p.forward();
  p.backward();
  const std::vector<double> again[5] = {p.out.host(), p.lse.host(), p.dq.host(), p.dk.host(), p.dv.host()};
  const char* names[5] = {"out", "lse", "dq", "dk", "dv"};
  for (int t = 0; t < 5; ++t)
    expect_identical(first[t], again[t], 0, static_cast<long>(first[t].size()), names[t]);
}

TEST(FlashAttention, HeadDimensionsTaken) {
  EXPECT_TRUE(kernels::flash_attention_supports_head_dim(64));
  EXPECT_TRUE(kernels::flash_attention_supports_head_dim(128));
  for (int hd : {8, 32, 96, 256}) EXPECT_FALSE(kernels::flash_attention_supports_head_dim(hd)) << hd;
  EXPECT_EQ(kernels::flash_attention_backward_workspace_bytes(AttentionShape{3, 5, 4, 2, 64}), 3u * 5 * 4 * 4);
}

}  // namespace
}  // namespace shardrl::test
