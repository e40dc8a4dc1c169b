// cuBLAS backend of Gemm (GPU builds): cublasGemmEx / cublasGemmStridedBatchedEx on the execution
// space's stream, fp32 accumulation (CUBLAS_COMPUTE_32F, no TF32), no host synchronisation.
// Row-major through the column-major identity: a row-major (m, n) C is a column-major (n, m)
// C^T = op(B)^T op(A)^T, so cuBLAS is called with the operands swapped: (opB, opA, n, m, k, B, A).
//
// Also compiled on CPU builds that have the CUDA toolkit (shardrl_blas_cuda, a compile check):
// there the Serial Kokkos has no cuda_stream() and a null stream stands in.
#include "blas/gemm.hpp"

#include <cstdint>
#include <type_traits>

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "blas/cublas_check.hpp"
#include "blas/cublas_handle.hpp"
#include "core/cuda_check.hpp"
#include "core/ledger_view.hpp"

// shardrl::bf16 buffers are handed to cuBLAS as CUDA_R_16BF: same size, alignment and bits.
static_assert(sizeof(shardrl::bf16) == sizeof(__nv_bfloat16) && alignof(shardrl::bf16) == alignof(__nv_bfloat16),
              "shardrl::bf16 must be layout-compatible with __nv_bfloat16");

namespace shardrl {

namespace {

cudaStream_t stream_of_space([[maybe_unused]] const ExecSpace& space) {
#if defined(KOKKOS_ENABLE_CUDA)
  return space.cuda_stream();
#else
  return nullptr;   // compile check only: this build never runs cuBLAS
#endif
}

template <class T>
constexpr cudaDataType_t cuda_type() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, bf16>, "float or bf16 operands");
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

cublasOperation_t to_cublas(Op op) { return op == Op::N ? CUBLAS_OP_N : CUBLAS_OP_T; }

}  // namespace

// cuBLAS's workspace, fixed (NVIDIA's size for Hopper): cuBLAS then never allocates one itself,
// which it must not do while a step is captured as a CUDA graph.
constexpr std::size_t kCublasWorkspaceBytes = std::size_t(32) << 20;

struct Gemm::Backend {
  CublasHandle handle;
  // In the model's arena phase where it has one: its address is known once the arena is
  // committed, so it is handed to cuBLAS at the first product.
  LedgerView<char> workspace;
  bool workspace_set = false;
  // Operand addresses of a grouped call on the device (3 per product), sized by reserve_groups.
  LedgerView<std::uintptr_t> group_pointers;
  // Type combinations cuBLAS's grouped GEMM refused (cuBLAS documents its supported list); those
  // products then run one by one.
  bool grouped_unsupported[3] = {false, false, false};

  cublasHandle_t ready() {
    if (!workspace_set) {
      SHARDRL_CHECK(workspace.data() != nullptr, "a GEMM before the arena holding its workspace was committed");
      SHARDRL_CHECK_CUBLAS(cublasSetWorkspace(handle.get(), workspace.data(), kCublasWorkspaceBytes));
      workspace_set = true;
    }
    return handle.get();
  }

  Backend(cudaStream_t stream, ArenaPlacement at)
      : handle(stream), workspace(at, MemoryCategory::workspace, "cublas_workspace", kCublasWorkspaceBytes) {
    // Default math: fp32 operands stay true fp32 (TF32 only if asked for), so fp32 products
    // meet fp32 error bounds; bf16 operands use tensor cores with fp32 accumulation.
    // DISALLOW_REDUCED_PRECISION_REDUCTION: without it, cuBLAS reduces split-k partial sums in
    // the output type, and a bf16 C of a large unaligned product (1024^3, ld not a multiple of
    // 8) came out far outside fp32-accumulation bounds (H100, cuBLAS 13.1). What no math mode
    // changes: bf16-output kernels for aligned shapes round alpha*op(A)op(B) to bf16 before
    // adding beta*C, so a bf16 C with beta != 0 may see two bf16 roundings (tests allow it).
    SHARDRL_CHECK_CUBLAS(cublasSetMathMode(
        handle.get(),
        static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  }
};

Gemm::Gemm(const ExecSpace& space, ArenaPlacement at)
    : space_(space), backend_(std::make_unique<Backend>(stream_of_space(space), at)) {}


Gemm::~Gemm() = default;

template <class TA, class TB, class TC>
void Gemm::gemm(Op opA, Op opB, int m, int n, int k, float alpha, const TA* A, int lda, const TB* B, int ldb,
                float beta, TC* C, int ldc) {
  if (!check_and_count(opA, opB, m, n, k, lda, ldb, ldc, 0, 0, 0, 1)) return;
  SHARDRL_CHECK_CUBLAS(cublasGemmEx(backend_->ready(), to_cublas(opB), to_cublas(opA), n, m, k, &alpha,
                                    B, cuda_type<TB>(), ldb, A, cuda_type<TA>(), lda, &beta, C, cuda_type<TC>(),
                                    ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

template <class TA, class TB, class TC>
void Gemm::gemm_strided_batched(Op opA, Op opB, int m, int n, int k, float alpha, const TA* A, int lda,
                                long strideA, const TB* B, int ldb, long strideB, float beta, TC* C, int ldc,
                                long strideC, int batch) {
  if (!check_and_count(opA, opB, m, n, k, lda, ldb, ldc, strideA, strideB, strideC, batch)) return;
  SHARDRL_CHECK_CUBLAS(cublasGemmStridedBatchedEx(
      backend_->ready(), to_cublas(opB), to_cublas(opA), n, m, k, &alpha, B, cuda_type<TB>(), ldb, strideB, A,
      cuda_type<TA>(), lda, strideA, &beta, C, cuda_type<TC>(), ldc, strideC, batch, CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

template <class TA, class TB, class TC>
void Gemm::gemm_grouped(Op opA, Op opB, const std::vector<int>& m, const std::vector<int>& n, const std::vector<int>& k,
                        float alpha, const std::vector<const TA*>& A, int lda, const std::vector<const TB*>& B, int ldb,
                        float beta, const std::vector<TC*>& C, int ldc) {
  check_grouped(m.size(), n.size(), k.size(), A.size(), B.size(), C.size());
  const int combo = std::is_same_v<TA, float> ? 0 : (std::is_same_v<TC, bf16> ? 1 : 2);
  // Row-major through the column-major identity, per product: (opB, opA, n, m, k, B, A).
  std::vector<int> gm, gn, gk, glda, gldb, gldc, size;
  std::vector<cublasOperation_t> ta, tb;
  std::vector<float> alphas, betas;
  std::vector<const void*> pointers;   // the A arrays, then the B arrays, then the C arrays
  std::vector<const void*> a_ptr, b_ptr, c_ptr;
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (m[i] <= 0 || n[i] <= 0) continue;
    if (!check_and_count(opA, opB, m[i], n[i], k[i], lda, ldb, ldc, 0, 0, 0, 1)) continue;
    gm.push_back(n[i]);
    gn.push_back(m[i]);
    gk.push_back(k[i]);
    glda.push_back(ldb);
    gldb.push_back(lda);
    gldc.push_back(ldc);
    ta.push_back(to_cublas(opB));
    tb.push_back(to_cublas(opA));
    alphas.push_back(alpha);
    betas.push_back(beta);
    size.push_back(1);
    a_ptr.push_back(B[i]);
    b_ptr.push_back(A[i]);
    c_ptr.push_back(C[i]);
  }
  const int groups = static_cast<int>(gm.size());
  if (groups == 0) return;
  if (!backend_->grouped_unsupported[combo]) {
    SHARDRL_CHECK(static_cast<std::size_t>(3 * groups) <= backend_->group_pointers.size(),
                  "gemm_grouped: more products than reserve_groups made room for");
    pointers.insert(pointers.end(), a_ptr.begin(), a_ptr.end());
    pointers.insert(pointers.end(), b_ptr.begin(), b_ptr.end());
    pointers.insert(pointers.end(), c_ptr.begin(), c_ptr.end());
    void** dev = reinterpret_cast<void**>(backend_->group_pointers.data());
    // From pageable memory: the call returns once the host array has been read.
    SHARDRL_CHECK_CUDA(cudaMemcpyAsync(dev, pointers.data(), pointers.size() * sizeof(void*), cudaMemcpyHostToDevice,
                                       stream_of_space(space_)));
    const cublasStatus_t status = cublasGemmGroupedBatchedEx(
        backend_->ready(), ta.data(), tb.data(), gm.data(), gn.data(), gk.data(), alphas.data(), dev,
        cuda_type<TB>(), glda.data(), dev + groups, cuda_type<TA>(), gldb.data(), betas.data(), dev + 2 * groups,
        cuda_type<TC>(), gldc.data(), groups, size.data(), CUBLAS_COMPUTE_32F);
    if (status == CUBLAS_STATUS_SUCCESS) {
      counters_.grouped_as_one += 1;
      return;
    }
    SHARDRL_CHECK(status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE,
                  std::string("cublasGemmGroupedBatchedEx failed: ") + cublasGetStatusName(status));
    backend_->grouped_unsupported[combo] = true;
  }
  counters_.grouped_as_loop += 1;
  for (int g = 0; g < groups; ++g)
    SHARDRL_CHECK_CUBLAS(cublasGemmEx(backend_->ready(), ta[g], tb[g], gm[g], gn[g], gk[g], &alpha, a_ptr[g],
                                      cuda_type<TB>(), ldb, b_ptr[g], cuda_type<TA>(), lda, &beta,
                                      const_cast<void*>(c_ptr[g]), cuda_type<TC>(), ldc, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
}

void Gemm::reserve_groups(int groups) {
  if (static_cast<std::size_t>(3 * groups) > backend_->group_pointers.size())
    backend_->group_pointers = LedgerView<std::uintptr_t>(MemoryCategory::workspace, "gemm_group_pointers",
                                                          static_cast<std::size_t>(3 * groups));
}

void Gemm::reserve(long, long, long) {}   // cuBLAS needs no conversion workspace

std::size_t Gemm::workspace_bytes() const { return kCublasWorkspaceBytes; }

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
