// cuDNN's fused attention (kernels/cudnn_attention.hpp, GPU builds configured with cuDNN)
// against the fp64 host reference of tests/attention_reference.hpp: right-padded rows (its
// scope), head dims 64 and 128, grouped heads, lengths on and off its tiles; the batch's rows
// run in calls that fit a small workspace budget, and a row over it in calls of some of its
// heads; bit-identical repeats (its deterministic backward); a row over the budget refused; the
// memory plan's workspace formula against what the built plans ask for. Every test reports
// itself skipped where cuDNN's attention is absent.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "attention_reference.hpp"
#include "kernel_test_util.hpp"
#include "kernels/cudnn_attention.hpp"

namespace shardrl::test {
namespace {

#define SKIP_WITHOUT_CUDNN()                                                                         \
  if (!kernels::cudnn_attention_available())                                                        \
  GTEST_SKIP() << "cuDNN's attention exists only in GPU builds configured with cuDNN (CUDNN_ROOT)"

constexpr std::size_t kBudget = std::size_t(1) << 30;

// One problem's device buffers (bf16), outputs poisoned before each call.
struct CudnnProblem {
  AttentionShape s;
  Inputs x;
  Buffer<bf16> q, k, v, dout, out, dq, dk, dv;
  Buffer<float> lse, delta;
  Buffer<char> workspace;
  kernels::CudnnAttention cudnn;

  CudnnProblem(const AttentionShape& shape, std::uint64_t seed, std::size_t budget = kBudget)
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
        workspace(1) {
    x.pos = right_padded_positions(s);
    EXPECT_TRUE(cudnn.prepare(s, true, budget)) << cudnn.why();
    workspace = Buffer<char>(static_cast<long>(std::max<std::size_t>(cudnn.workspace_bytes(s), 1)));
  }

  void forward() {
    out.poison();
    lse.poison();
    cudnn.forward(stream_of(ExecSpace()), s, q.data(), k.data(), v.data(), out.data(), lse.data(), workspace.data());
    Kokkos::fence();
  }
  void backward() {
    dq.poison();
    dk.poison();
    dv.poison();
    cudnn.backward(stream_of(ExecSpace()), s, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(),
                   dq.data(), dk.data(), dv.data(), delta.data(), workspace.data());
    Kokkos::fence();
  }
  // cuDNN's statistics are (B, heads, S); the reference's lse (B*S, heads).
  std::vector<double> lse_by_token() const {
    const std::vector<double> bhs = lse.host();
    std::vector<double> out(bhs.size());
    for (int b = 0; b < s.B; ++b)
      for (int h = 0; h < s.n_heads; ++h)
        for (int i = 0; i < s.S; ++i)
          out[(long(b) * s.S + i) * s.n_heads + h] = bhs[(long(b) * s.n_heads + h) * s.S + i];
    return out;
  }
};

// The workspace of one row of `one`'s shape (B = 1): the unit the budgets below are given in.
std::size_t workspace_of_one_row(const AttentionShape& one) {
  kernels::CudnnAttention probe;
  EXPECT_TRUE(probe.prepare(one, true, kBudget)) << probe.why();
  return probe.workspace_bytes(one);
}

void expect_matches_reference(CudnnProblem& p) {
  p.forward();
  p.backward();
  const Forward ref = reference_forward(p.s, p.x);
  expect_close(p.out.host(), ref.out, out_rtol<bf16>(), out_rtol<bf16>() * max_abs(ref.out), "out");
  expect_close(p.lse_by_token(), ref.lse, lse_tol(), lse_tol(), "lse");
  const Grads g = reference_backward(p.s, p.x);
  expect_close(p.dq.host(), g.dq, grad_rtol<bf16>(), grad_atol_rel<bf16>() * dq_scale(p.s, p.x, g.dq), "dq");
  expect_close(p.dk.host(), g.dk, grad_rtol<bf16>(), grad_atol_rel<bf16>() * dk_scale(p.s, p.x, g.dk), "dk");
  expect_close(p.dv.host(), g.dv, grad_rtol<bf16>(), grad_atol_rel<bf16>() * max_abs(g.dv), "dv");
}

TEST(CudnnAttention, MatchesReferenceRightPadded) {
  SKIP_WITHOUT_CUDNN();
  std::uint64_t seed = 900;
  const int heads[3][2] = {{1, 1}, {4, 2}, {6, 3}};
  const int rows[4][2] = {{1, 1}, {2, 17}, {1, 64}, {2, 203}};
  for (int hd : {64, 128})
    for (const auto& hh : heads)
      for (const auto& bs : rows) {
        const AttentionShape s{bs[0], bs[1], hh[0], hh[1], hd};
        SCOPED_TRACE(describe(s));
        CudnnProblem p(s, seed += 10);
        expect_matches_reference(p);
      }
}

// A budget of two rows' workspace: a batch of 5 runs in calls of 2, 2 and 1 rows, each writing
// its rows' outputs, statistics and gradients, and the whole still matches the reference.
TEST(CudnnAttention, RowsInCallsWithinTheWorkspaceBudget) {
  SKIP_WITHOUT_CUDNN();
  const AttentionShape one{1, 130, 4, 2, 64}, s{5, 130, 4, 2, 64};
  const std::size_t per_row = workspace_of_one_row(one);
  ASSERT_GT(per_row, 0u);
  CudnnProblem p(s, 77, 2 * per_row + per_row / 2);
  EXPECT_LE(p.cudnn.workspace_bytes(s), 2 * per_row + per_row / 2);
  expect_matches_reference(p);
}

// 3 heads x 131 positions (not a multiple of 4): calls after the first would start their
// statistics off 16 bytes unless they take rows in fours. A budget of 4.5 rows' workspace runs
// 5 rows as 4 + 1 and matches the reference; one of 2.5 rows cannot split them so and is refused.
TEST(CudnnAttention, RowsInCallsKeepTheStatisticsAligned) {
  SKIP_WITHOUT_CUDNN();
  const AttentionShape one{1, 131, 3, 1, 64}, s{5, 131, 3, 1, 64};
  const std::size_t per_row = workspace_of_one_row(one);
  ASSERT_GT(per_row, 0u);
  CudnnProblem p(s, 91, 4 * per_row + per_row / 2);
  expect_matches_reference(p);
  kernels::CudnnAttention tight;
  EXPECT_FALSE(tight.prepare(s, true, 2 * per_row + per_row / 2));
  EXPECT_NE(tight.why().find("rows in fours"), std::string::npos) << tight.why();
}

// One row's workspace over the budget (long context): the backward runs in calls of one row and
// some of its kv heads with their query heads, each reading and writing its heads where they lie
// in the batch's tensors. 16 query heads over 8 kv heads at 202 positions (off the tiles), a
// budget of 2.5 kv heads' workspace: calls of 2 kv heads, 4 to a row, 8 in all; the whole matches
// the reference.
TEST(CudnnAttention, HeadsInCallsWhenARowIsOverTheBudget) {
  SKIP_WITHOUT_CUDNN();
  const AttentionShape one{1, 202, 16, 8, 64}, s{2, 202, 16, 8, 64};
  const std::size_t per_row = workspace_of_one_row(one);
  ASSERT_GT(per_row, 0u);
  const std::size_t budget = per_row / 8 * 2 + per_row / 16;
  CudnnProblem p(s, 123, budget);
  EXPECT_LE(p.cudnn.workspace_bytes(s), budget);
  EXPECT_GT(p.cudnn.workspace_bytes(s), per_row / 8) << "calls of 2 kv heads, not of 1";
  expect_matches_reference(p);
}

// Same inputs, same bits: the deterministic backward (no atomic accumulation of dQ).
TEST(CudnnAttention, Deterministic) {
  SKIP_WITHOUT_CUDNN();
  CudnnProblem p(AttentionShape{3, 300, 8, 2, 128}, 55);
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

TEST(CudnnAttention, RefusesARowOverTheBudgetAndNamesTheKey) {
  SKIP_WITHOUT_CUDNN();
  kernels::CudnnAttention cudnn;
  EXPECT_FALSE(cudnn.prepare(AttentionShape{2, 512, 4, 2, 64}, true, 1024));
  EXPECT_NE(cudnn.why().find("model.cudnn_workspace_mib"), std::string::npos) << cudnn.why();
  EXPECT_NE(cudnn.why().find("with one kv head's queries a call"), std::string::npos) << cudnn.why();
  EXPECT_FALSE(cudnn.prepare(AttentionShape{1, 64, 4, 2, 256}, true, kBudget)) << "head_dim 256";
}

// The memory plan's formula (kernels::cudnn_attention_workspace_per_row) against the built
// plans' own figure at the shapes it was read from and one more.
TEST(CudnnAttention, WorkspaceFormulaMatchesThePlans) {
  SKIP_WITHOUT_CUDNN();
  for (const AttentionShape& s : {AttentionShape{1, 2048, 32, 8, 64}, AttentionShape{1, 2048, 16, 8, 128},
                                  AttentionShape{2, 1024, 8, 8, 64}}) {
    SCOPED_TRACE(describe(s));
    kernels::CudnnAttention cudnn;
    ASSERT_TRUE(cudnn.prepare(s, true, std::size_t(1) << 34)) << cudnn.why();
    const double planned = s.B * kernels::cudnn_attention_workspace_per_row(s);
    const double built = double(cudnn.workspace_bytes(s));
    EXPECT_GE(built, 0.9 * planned);
    EXPECT_LE(built, 1.1 * planned);
  }
}

}  // namespace
}  // namespace shardrl::test
