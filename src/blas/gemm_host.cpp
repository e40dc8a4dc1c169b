// Host backend of Gemm (CPU builds): cblas_sgemm, row-major, on the calling thread. bf16 operands
// are widened to fp32 in the Backend's workspace; a bf16 C is widened (only when beta != 0), the
// product computed in fp32 and rounded back once, to nearest even.
//
// The workspace grows in reserve() or, failing that, lazily on the first product that needs more.
// A train step must not grow it (graph-safe invariant: no allocation after setup), so the model
// calls reserve() with its largest shapes at setup.
#include "blas/gemm.hpp"

#include "core/memory_ledger.hpp"

#include <cblas.h>

#include <type_traits>
#include <vector>

namespace shardrl {

static_assert(Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible,
              "the host GEMM backend needs tensors in host-accessible memory");

struct Gemm::Backend {
  // fp32 copies of bf16 operands: A as stored, then B, then C. A Kokkos allocation in the device
  // space (the host on these builds), so allocation hooks see it as they see every other buffer.
  Kokkos::View<float*, MemSpace> workspace;
};

namespace {

float* grow(Kokkos::View<float*, MemSpace>& workspace, std::size_t floats) {
  if (workspace.size() < floats) {
    MemoryLedger::instance().add(MemoryCategory::workspace,
                                 static_cast<std::int64_t>((floats - workspace.size()) * sizeof(float)));
    workspace = Kokkos::View<float*, MemSpace>();   // contents are scratch: free before allocating anew
    workspace = Kokkos::View<float*, MemSpace>(Kokkos::view_alloc("gemm_workspace", Kokkos::WithoutInitializing), floats);
  }
  return workspace.data();
}

CBLAS_TRANSPOSE to_cblas(Op op) { return op == Op::N ? CblasNoTrans : CblasTrans; }

// Copies a (rows, cols) row-major block with row stride ld into dst, packed (row stride cols).
void widen(const bf16* src, int rows, int cols, int ld, float* dst) {
  for (long i = 0; i < rows; ++i)
    for (long j = 0; j < cols; ++j) dst[i * cols + j] = static_cast<float>(src[i * ld + j]);
}

template <class T>
constexpr bool is_bf16 = std::is_same_v<T, bf16>;

// One product; arguments already checked, m > 0 and n > 0.
template <class TA, class TB, class TC>
void host_gemm(Kokkos::View<float*, MemSpace>& workspace, Op opA, Op opB, int m, int n, int k, float alpha, const TA* A,
               int lda, const TB* B, int ldb, float beta, TC* C, int ldc) {
  static_assert(std::is_same_v<TA, TB> && (std::is_same_v<TA, float> || is_bf16<TA>),
                "operands are both float or both bf16");
  // Stored shapes: A is (m, k) or (k, m), B is (k, n) or (n, k).
  const int a_rows = opA == Op::N ? m : k, a_cols = opA == Op::N ? k : m;
  const int b_rows = opB == Op::N ? k : n, b_cols = opB == Op::N ? n : k;
  const std::size_t a_size = is_bf16<TA> ? static_cast<std::size_t>(a_rows) * a_cols : 0;
  const std::size_t b_size = is_bf16<TB> ? static_cast<std::size_t>(b_rows) * b_cols : 0;
  const std::size_t c_size = is_bf16<TC> ? static_cast<std::size_t>(m) * n : 0;
  float* ws = grow(workspace, a_size + b_size + c_size);

  const float* a = nullptr;
  const float* b = nullptr;
  int lda_f = lda, ldb_f = ldb;
  if constexpr (is_bf16<TA>) {
    widen(A, a_rows, a_cols, lda, ws);
    a = ws;
    lda_f = std::max(1, a_cols);
  } else {
    a = A;
  }
  if constexpr (is_bf16<TB>) {
    widen(B, b_rows, b_cols, ldb, ws + a_size);
    b = ws + a_size;
    ldb_f = std::max(1, b_cols);
  } else {
    b = B;
  }

  if constexpr (is_bf16<TC>) {
    float* c = ws + a_size + b_size;
    if (beta != 0.0f) widen(C, m, n, ldc, c);   // beta = 0: C may hold NaN, never read it
    cblas_sgemm(CblasRowMajor, to_cblas(opA), to_cblas(opB), m, n, k, alpha, a, lda_f, b, ldb_f, beta, c, n);
    for (long i = 0; i < m; ++i)
      for (long j = 0; j < n; ++j) C[i * ldc + j] = bf16(c[i * n + j]);
  } else {
    // cblas_sgemm with beta = 0 writes C without reading it; beta = 1 accumulates in place.
    cblas_sgemm(CblasRowMajor, to_cblas(opA), to_cblas(opB), m, n, k, alpha, a, lda_f, b, ldb_f, beta, C, ldc);
  }
}

}  // namespace

Gemm::Gemm(const ExecSpace& space, ArenaPlacement) : space_(space), backend_(std::make_unique<Backend>()) {}

Gemm::~Gemm() {
  MemoryLedger::instance().add(MemoryCategory::workspace, -static_cast<std::int64_t>(workspace_bytes()));
}

template <class TA, class TB, class TC>
void Gemm::gemm(Op opA, Op opB, int m, int n, int k, float alpha, const TA* A, int lda, const TB* B, int ldb,
                float beta, TC* C, int ldc) {
  if (!check_and_count(opA, opB, m, n, k, lda, ldb, ldc, 0, 0, 0, 1)) return;
  space_.fence();   // earlier kernels on the space have written the operands
  host_gemm(backend_->workspace, opA, opB, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <class TA, class TB, class TC>
void Gemm::gemm_strided_batched(Op opA, Op opB, int m, int n, int k, float alpha, const TA* A, int lda,
                                long strideA, const TB* B, int ldb, long strideB, float beta, TC* C, int ldc,
                                long strideC, int batch) {
  if (!check_and_count(opA, opB, m, n, k, lda, ldb, ldc, strideA, strideB, strideC, batch)) return;
  space_.fence();
  for (long i = 0; i < batch; ++i)
    host_gemm(backend_->workspace, opA, opB, m, n, k, alpha, A + i * strideA, lda, B + i * strideB, ldb, beta,
              C + i * strideC, ldc);
}

template <class TA, class TB, class TC>
void Gemm::gemm_grouped(Op opA, Op opB, const std::vector<int>& m, const std::vector<int>& n, const std::vector<int>& k,
                        float alpha, const std::vector<const TA*>& A, int lda, const std::vector<const TB*>& B, int ldb,
                        float beta, const std::vector<TC*>& C, int ldc) {
  check_grouped(m.size(), n.size(), k.size(), A.size(), B.size(), C.size());
  counters_.grouped_as_loop += 1;
  for (std::size_t i = 0; i < m.size(); ++i)
    if (m[i] > 0 && n[i] > 0) gemm(opA, opB, m[i], n[i], k[i], alpha, A[i], lda, B[i], ldb, beta, C[i], ldc);
}

void Gemm::reserve_groups(int) {}   // the host loop needs no address buffer

void Gemm::reserve(long m, long n, long k) {
  SHARDRL_CHECK(m >= 0 && n >= 0 && k >= 0, "Gemm::reserve sizes must be non-negative");
  grow(backend_->workspace, static_cast<std::size_t>(m * k + k * n + m * n));
}

std::size_t Gemm::workspace_bytes() const { return backend_->workspace.size() * sizeof(float); }

#define SHARDRL_GEMM_INSTANTIATE(TA, TB, TC)                                                             \
  template void Gemm::gemm<TA, TB, TC>(Op, Op, int, int, int, float, const TA*, int, const TB*, int, float, \
                                       TC*, int);                                                        \
  template void Gemm::gemm_strided_batched<TA, TB, TC>(Op, Op, int, int, int, float, const TA*, int, long, \
                                                       const TB*, int, long, float, TC*, int, long, int); \
  template void Gemm::gemm_grouped<TA, TB, TC>(Op, Op, const std::vector<int>&, const std::vector<int>&,    \
                                               const std::vector<int>&, float, const std::vector<const TA*>&, \
                                               int, const std::vector<const TB*>&, int, float,             \
                                               const std::vector<TC*>&, int);
SHARDRL_GEMM_INSTANTIATE(float, float, float)
SHARDRL_GEMM_INSTANTIATE(bf16, bf16, bf16)
SHARDRL_GEMM_INSTANTIATE(bf16, bf16, float)
#undef SHARDRL_GEMM_INSTANTIATE

}  // namespace shardrl
