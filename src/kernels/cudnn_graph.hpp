// cuDNN's backend graph API, wrapped for building operation graphs in a few lines each: owned
// descriptors, tensors (real, virtual, by-value scalars), the pointwise, reduction, matmul and
// reshape operations, the top-left causal mask, and the plan of the first deterministic engine
// cuDNN's heuristics offer. Internal to kernels/cudnn_attention.cpp (its only user), which
// builds the attention graphs from these pieces; GPU builds with cuDNN only.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"

namespace shardrl::kernels::cudnn_graph {

inline std::string cudnn_error(cudnnStatus_t status, const char* what) {
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  return fmt::format("{}: {} {}", what, cudnnGetErrorString(status), detail);
}

// Building a graph fails softly (the caller keeps the flash kernels); running one does not.
struct BuildError {
  std::string what;
};

inline void check_build(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) throw BuildError{cudnn_error(status, what)};
}

inline void check_run(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) SHARDRL_FATAL(cudnn_error(status, what));
}

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) { check_build(cudnnBackendCreateDescriptor(type, &d_), "create"); }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc& operator=(Desc&&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

  template <class V>
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const V& value) {
    check_build(cudnnBackendSetAttribute(d_, name, type, 1, &value), "set attribute");
    return *this;
  }
  template <class V>
  Desc& set_array(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const std::vector<V>& values) {
    check_build(cudnnBackendSetAttribute(d_, name, type, static_cast<int64_t>(values.size()), values.data()),
                "set attribute");
    return *this;
  }
  Desc& finalize(const char* what) {
    check_build(cudnnBackendFinalize(d_), what);
    return *this;
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::array<int64_t, 4>;

// A graph under construction: its tensors (by uid) and operations.
class GraphBuilder {
 public:
  // A real tensor (bound to a pointer in the variant pack) or a virtual one.
  cudnnBackendDescriptor_t tensor(int64_t uid, const Dims& dims, const Dims& strides, cudnnDataType_t type,
                                  bool is_virtual, bool by_value = false) {
    Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;
    std::vector<int64_t> d(dims.begin(), dims.end()), s(strides.begin(), strides.end());
    t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, type)
        .set_array(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, d)
        .set_array(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, s)
        .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid)
        .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, alignment)
        .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, is_virtual);
    if (by_value) t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, true);
    t.finalize("tensor");
    return keep(std::move(t));
  }
  // A virtual intermediate with a fresh uid.
  cudnnBackendDescriptor_t temp(const Dims& dims, const Dims& strides, cudnnDataType_t type) {
    return tensor(next_uid_++, dims, strides, type, true);
  }
  // A scalar passed by value (its host address goes into the variant pack under `uid`), with
  // the rank of the tensors it meets (a pointwise operation's operands share their rank).
  cudnnBackendDescriptor_t scalar(int64_t uid, cudnnDataType_t type) {
    const Dims one{1, 1, 1, 1};
    return tensor(uid, one, one, type, false, true);
  }

  // y = op(x[, b[, t]]) elementwise; `axis` for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t compute, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                 int64_t axis = -1) {
    Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode)
        .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, compute);
    if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, axis);
    pw.finalize("pointwise");
    Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, pw.get())
        .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, x);
    if (b) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, b);
    if (t) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, t);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, y).finalize("pointwise operation");
    keep(std::move(pw));
    ops_.push_back(keep(std::move(op)));
  }
  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    Desc red(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    red.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
        .set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, mode)
        .finalize("reduction");
    Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, red.get())
        .set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, x)
        .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, y)
        .finalize("reduction operation");
    keep(std::move(red));
    ops_.push_back(keep(std::move(op)));
  }
  // c = a b over the last two dimensions, batched (and broadcast from kv heads) over the first two.
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    Desc mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT).finalize("matmul");
    Desc op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, a)
        .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, b)
        .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, c)
        .set(CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, mm.get())
        .finalize("matmul operation");
    keep(std::move(mm));
    ops_.push_back(keep(std::move(op)));
  }
  // The same data seen with other dimensions and strides (a transpose).
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    Desc op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, x)
        .set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, y)
        .finalize("reshape operation");
    ops_.push_back(keep(std::move(op)));
  }

  // The top-left causal mask: scores of key j > query i become -inf.
  cudnnBackendDescriptor_t causal_mask(cudnnBackendDescriptor_t scores, const Dims& dims, const Dims& strides,
                                       cudnnBackendDescriptor_t minus_infinity) {
    auto row = temp(dims, strides, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, scores, nullptr, nullptr, row, 2);
    auto col = temp(dims, strides, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, scores, nullptr, nullptr, col, 3);
    auto keep_it = temp(dims, strides, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, nullptr, keep_it);
    auto masked = temp(dims, strides, CUDNN_DATA_FLOAT);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, scores, minus_infinity, keep_it, masked);
    return masked;
  }

  // Finalizes the graph and the first engine heuristics offer that is deterministic and builds.
  Desc plan(cudnnHandle_t handle, std::size_t* workspace) {
    Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    graph.set_array(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops_)
        .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle)
        .finalize("operation graph");
    std::string reasons;
    for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
      heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, graph.get())
          .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode);
      if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) continue;
      int64_t count = 0;
      check_build(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                           0, &count, nullptr),
                  "engine count");
      std::vector<Desc> configs;
      std::vector<cudnnBackendDescriptor_t> raw;
      for (int64_t i = 0; i < count; ++i) {
        configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        raw.push_back(configs.back().get());
      }
      int64_t got = 0;
      check_build(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                           count, &got, raw.data()),
                  "engine configs");
      for (int64_t i = 0; i < got; ++i) {
        if (!deterministic(configs[i].get())) {
          reasons += " (an engine marked non-deterministic skipped)";
          continue;
        }
        Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, handle)
            .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, configs[i].get());
        const cudnnStatus_t status = cudnnBackendFinalize(plan.get());
        if (status != CUDNN_STATUS_SUCCESS) {
          reasons += " (" + cudnn_error(status, "plan") + ")";
          continue;
        }
        int64_t bytes = 0, n = 0;
        check_build(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                             &n, &bytes),
                    "workspace size");
        *workspace = static_cast<std::size_t>(bytes);
        return plan;
      }
    }
    throw BuildError{"no cuDNN engine for the attention graph" + reasons};
  }

 private:
  cudnnBackendDescriptor_t keep(Desc&& d) {
    descs_.push_back(std::move(d));
    return descs_.back().get();
  }
  static bool deterministic(cudnnBackendDescriptor_t config) {
    Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t e = engine.get();
    int64_t n = 0;
    check_build(cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e),
                "engine of a config");
    std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
    n = 0;
    check_build(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                         static_cast<int64_t>(notes.size()), &n, notes.data()),
                "numerical notes");
    for (int64_t i = 0; i < n; ++i)
      if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return false;
    return true;
  }

  std::vector<Desc> descs_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_uid_ = 1000;
};

}  // namespace shardrl::kernels::cudnn_graph
