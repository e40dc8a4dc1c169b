// cuBLAS backend of Gemm (GPU builds): cublasGemmEx / cublasGemmStridedBatchedEx on the execution
// space's stream, fp32 accumulation (CUBLAS_COMPUTE_32F, no TF32), no host synchronisation.
// Row-major through the column-major identity: a row-major (m, n) C is a column-major (n, m)
// C^T = op(B)^T op(A)^T, so cuBLAS is called with the operands swapped: (opB, opA, n, m, k, B, A).
//
// Also compiled on CPU builds that have the CUDA toolkit (shardrl_blas_cuda, a compile check):
// there the Serial Kokkos has no cuda_stream() and a null stream stands in.
#include "blas/gemm.hpp"

#include <type_traits>

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "blas/cublas_check.hpp"
#include "blas/cublas_handle.hpp"
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

void Gemm::reserve(long, long, long) {}   // cuBLAS needs no conversion workspace

std::size_t Gemm::workspace_bytes() const { return kCublasWorkspaceBytes; }

#define SHARDRL_GEMM_INSTANTIATE(TA, TB, TC)                                                             \
  template void Gemm::gemm<TA, TB, TC>(Op, Op, int, int, int, float, const TA*, int, const TB*, int, float, \
                                       TC*, int);                                                        \
  template void Gemm::gemm_strided_batched<TA, TB, TC>(Op, Op, int, int, int, float, const TA*, int, long, \
                                                       const TB*, int, long, float, TC*, int, long, int);
SHARDRL_GEMM_INSTANTIATE(float, float, float)
SHARDRL_GEMM_INSTANTIATE(bf16, bf16, bf16)
SHARDRL_GEMM_INSTANTIATE(bf16, bf16, float)
#undef SHARDRL_GEMM_INSTANTIATE

}  // namespace shardrl
