// Matrix products for the model, one interface with two backends: cuBLAS (cublasGemmEx /
// cublasGemmStridedBatchedEx, bf16 or fp32 inputs, fp32 accumulation, bound to the execution
// space's stream) on GPU builds, and host BLAS (cblas_sgemm; bf16 operands converted to fp32
// in a workspace) on CPU builds. Row-major everywhere.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/kokkos.hpp"
#include "core/phase_arena.hpp"

namespace shardrl {

enum class Op { N, T };   // use the operand as stored, or transposed

// Counts kept by a Gemm, for tests and benchmarks.
struct GemmCounters {
  std::int64_t calls = 0;
  double flops = 0;   // 2*m*n*k per product
  // How gemm_grouped requests ran: as one library call for all their products, or product by
  // product (the host backend always; cuBLAS for a type combination it refuses to group).
  std::int64_t grouped_as_one = 0;
  std::int64_t grouped_as_loop = 0;
};

class Gemm {
 public:
  // `at`: where the cuBLAS backend's fixed workspace lives (a phase of an arena, or its own
  // allocation); the host backend's grows on the heap.
  explicit Gemm(const ExecSpace& space, ArenaPlacement at = {});
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // C (m, n) = alpha * op(A) * op(B) + beta * C, accumulated in fp32.
  //   op(A) is (m, k): A is stored (m, k) with row stride lda >= k when opA = N, or (k, m) with
  //   lda >= m when opA = T. Likewise op(B) is (k, n). C is (m, n) with ldc >= n.
  // Type combinations: (float, float -> float), (bf16, bf16 -> bf16), (bf16, bf16 -> float).
  // beta = 0 never reads C (it may hold NaN); beta = 1 accumulates into it. A bf16 C with
  // beta != 0 may be rounded twice on cuBLAS (alpha*op(A)op(B) to bf16, then the sum): cuBLAS
  // does so for aligned shapes whatever the math mode; the host backend rounds once.
  template <class TA, class TB, class TC>
  void gemm(Op opA, Op opB, int m, int n, int k, float alpha, const TA* A, int lda, const TB* B, int ldb,
            float beta, TC* C, int ldc);

  // `batch` independent products; operand i starts at A + i*strideA, B + i*strideB, C + i*strideC.
  template <class TA, class TB, class TC>
  void gemm_strided_batched(Op opA, Op opB, int m, int n, int k, float alpha, const TA* A, int lda,
                            long strideA, const TB* B, int ldb, long strideB, float beta, TC* C, int ldc,
                            long strideC, int batch);

  // Products that share ops, element types and leading dimensions but not sizes or operands:
  // product i is C_i (m[i], n[i]) = alpha op(A_i) op(B_i) + beta C_i with inner size k[i]; an
  // empty one is skipped. One grouped call on GPU builds (cublasGemmGroupedBatchedEx, with the
  // operand addresses uploaded to a buffer sized by reserve_groups), a loop on the host.
  template <class TA, class TB, class TC>
  void gemm_grouped(Op opA, Op opB, const std::vector<int>& m, const std::vector<int>& n, const std::vector<int>& k,
                    float alpha, const std::vector<const TA*>& A, int lda, const std::vector<const TB*>& B, int ldb,
                    float beta, const std::vector<TC*>& C, int ldc);
  // Room for grouped calls of up to `groups` products (allocated here, never during a step).
  void reserve_groups(int groups);

  // Host backend only: grows the fp32 conversion workspace so that products up to these sizes
  // never allocate during a step. No-op on GPU builds.
  void reserve(long m, long n, long k);
  std::size_t workspace_bytes() const;

  const GemmCounters& counters() const { return counters_; }
  // Products a replayed CUDA graph ran without this object's host code.
  void add_replayed_counts(const GemmCounters& replayed) {
    counters_.calls += replayed.calls;
    counters_.flops += replayed.flops;
  }

 private:
  struct Backend;   // cuBLAS handle, or host workspace
  ExecSpace space_;
  std::unique_ptr<Backend> backend_;
  GemmCounters counters_;

  // Shared by both backends: checks sizes, leading dimensions and batch strides (a bad one is a
  // bug in the caller, so fatal), then counts the call. False when there is nothing to compute.
  bool check_and_count(Op opA, Op opB, int m, int n, int k, int lda, int ldb, int ldc, long strideA,
                       long strideB, long strideC, int batch);
  static void check_grouped(std::size_t m, std::size_t n, std::size_t k, std::size_t a, std::size_t b, std::size_t c) {
    SHARDRL_CHECK(n == m && k == m && a == m && b == m && c == m,
                  "gemm_grouped: one size and operand of each kind per product");
  }
};

inline bool Gemm::check_and_count(Op opA, Op opB, int m, int n, int k, int lda, int ldb, int ldc,
                                  long strideA, long strideB, long strideC, int batch) {
  const auto what = [&] {
    return "gemm(opA=" + std::string(opA == Op::N ? "N" : "T") + ", opB=" + (opB == Op::N ? "N" : "T") +
           ", m=" + std::to_string(m) + ", n=" + std::to_string(n) + ", k=" + std::to_string(k) +
           ", lda=" + std::to_string(lda) + ", ldb=" + std::to_string(ldb) + ", ldc=" + std::to_string(ldc) +
           ", strides=" + std::to_string(strideA) + "/" + std::to_string(strideB) + "/" +
           std::to_string(strideC) + ", batch=" + std::to_string(batch) + ")";
  };
  SHARDRL_CHECK(m >= 0 && n >= 0 && k >= 0 && batch >= 0, what());
  // Row strides cover a stored row (BLAS also asks for at least 1 when a dimension is 0).
  SHARDRL_CHECK(lda >= std::max(1, opA == Op::N ? k : m), what());
  SHARDRL_CHECK(ldb >= std::max(1, opB == Op::N ? n : k), what());
  SHARDRL_CHECK(ldc >= std::max(1, n), what());
  if (batch > 1 && m > 0 && n > 0) {
    // Inputs may be shared between products (stride 0); outputs must not overlap: each product
    // either below the previous one, or beside it within the same rows (e.g. the heads of a
    // (tokens, heads * hd) matrix).
    SHARDRL_CHECK(strideA >= 0 && strideB >= 0, what());
    const bool stacked = strideC >= static_cast<long>(m - 1) * ldc + n;
    const bool side_by_side = strideC >= n && static_cast<long>(batch - 1) * strideC + n <= ldc;
    SHARDRL_CHECK(stacked || side_by_side, what());
  }
  counters_.calls += 1;
  counters_.flops += 2.0 * m * n * k * batch;
  return m > 0 && n > 0 && batch > 0;
}

}  // namespace shardrl
