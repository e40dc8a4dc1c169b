#include "model/weight_gradients.hpp"

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "kernels/elementwise.hpp"

namespace shardrl {

template <class T>
void WeightGradients::add(const T* dY, int ld_dy, const T* X, int ld_x, float* dW, int out, int in, int rows) {
  if (fused_) {
    gemm_.gemm(Op::T, Op::N, out, in, rows, 1.0f, dY, ld_dy, X, ld_x, 1.0f, dW, in);
    ++counters_.fused;
    return;
  }
  SHARDRL_CHECK(scratch_.bytes() > 0, "unfused weight gradients without their scratch");
  float* scratch = scratch_.as<float>();
  gemm_.gemm(Op::T, Op::N, out, in, rows, 1.0f, dY, ld_dy, X, ld_x, 0.0f, scratch, in);
  kernels::add_scaled(space_, scratch, dW, 1.0f, long(out) * in);
  ++counters_.unfused;
}

template void WeightGradients::add<float>(const float*, int, const float*, int, float*, int, int, int);
template void WeightGradients::add<bf16>(const bf16*, int, const bf16*, int, float*, int, int, int);

}  // namespace shardrl
