// Internal to the model: how a weight gradient dW (out, in) += dY^T X over `rows` rows reaches
// the unit's fp32 gradient. Fused (train.gradient_accumulation_fusion): one GEMM with beta = 1
// straight into it; unfused: a GEMM into a scratch of the largest weight's size, then added. Every
// GEMM is counted by its path, the proof that the option took effect. The dense layers, the head
// and the MoE layers' experts all go through this one object.
#pragma once

#include <cstdint>

#include "blas/gemm.hpp"
#include "core/kokkos.hpp"
#include "model/activations.hpp"
#include "model/transformer.hpp"

namespace shardrl {

class WeightGradients {
 public:
  WeightGradients(bool fused, Gemm& gemm, const ExecSpace& space) : fused_(fused), gemm_(gemm), space_(space) {}
  bool fused() const { return fused_; }
  // The unfused path's scratch: (largest weight) fp32, in the model's train buffers.
  void allocate_scratch(BufferMaker& make, std::size_t largest_weight) {
    if (!fused_) scratch_ = make("wgrad_tmp", largest_weight * sizeof(float), MemoryCategory::workspace);
  }

  // dW (out, in) += dY^T X; dY is (rows, out) with row stride ld_dy, X is (rows, in) with ld_x.
  template <class T>
  void add(const T* dY, int ld_dy, const T* X, int ld_x, float* dW, int out, int in, int rows);
  template <class T>
  void add(const T* dY, const T* X, float* dW, int out, int in, int rows) {
    add(dY, out, X, in, dW, out, in, rows);
  }
  // Products issued elsewhere (the MoE layers' grouped GEMMs with beta = 1, replayed graphs).
  void count_fused(std::int64_t n) { counters_.fused += n; }
  void count(const WgradCounters& replayed) {
    counters_.fused += replayed.fused;
    counters_.unfused += replayed.unfused;
  }
  const WgradCounters& counters() const { return counters_; }

 private:
  bool fused_;
  Gemm& gemm_;
  ExecSpace space_;
  DeviceBytes scratch_;
  WgradCounters counters_;
};

}  // namespace shardrl
