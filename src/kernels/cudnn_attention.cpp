// cuDNN fused attention through the backend graph API (interface and scope:
// cudnn_attention.hpp). The graphs are the ones the cuDNN frontend's composite SDPA nodes
// build for a top-left causal mask, a scalar scale and softmax statistics (forward), and its
// deterministic Hopper backward (dQ straight from the dS x K product, no fp32 accumulator):
// cuDNN's runtime-fusion engines recognise exactly these patterns, so each operation, data
// type and stride below follows them.
#include "kernels/cudnn_attention.hpp"

#include <cudnn.h>

#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "kernels/cudnn_graph.hpp"

namespace shardrl::kernels {
namespace {

using cudnn_graph::BuildError;
using cudnn_graph::check_build;
using cudnn_graph::check_run;
using cudnn_graph::Desc;
using cudnn_graph::Dims;
using cudnn_graph::GraphBuilder;

// Uids of the tensors bound in the variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kScale, kMinusInf, kOne, kDO, kDQ, kDK, kDV, kDelta };

struct Layouts {
  Dims q, q_st;      // (B, H, S, D) over (B*S, H, D)
  Dims kt, kt_st;    // K^T or V^T: (B, G, D, S) over (B*S, G, D)
  Dims kv, kv_st;    // K or V: (B, G, S, D)
  Dims ss, ss_st;    // scores (B, H, S, S), row-major
  Dims sst_st;       // the scores transposed: (B, H, S_kv, S_q) over the same data
  Dims st, st_st;    // statistics (B, H, S, 1) over (B, heads, S)
  Dims full, full_st;   // per-query-head dK or dV before the group sum: (B, H, S, D) row-major
};

// A call's dims are its own (c: its rows, its H query heads over G kv heads); the tensors' strides
// are those of the whole batch's `heads` x `kv_heads` layout, so a call over some of the heads
// reads and writes them where they lie.
Layouts layouts(const AttentionShape& c, int heads, int kv_heads) {
  const int64_t B = c.B, S = c.S, H = c.n_heads, G = c.n_kv_heads, D = c.hd;
  const int64_t HA = heads, GA = kv_heads;
  Layouts l;
  l.q = {B, H, S, D};
  l.q_st = {S * HA * D, D, HA * D, 1};
  l.kv = {B, G, S, D};
  l.kv_st = {S * GA * D, D, GA * D, 1};
  l.kt = {B, G, D, S};
  l.kt_st = {S * GA * D, D, 1, GA * D};
  l.ss = {B, H, S, S};
  l.ss_st = {H * S * S, S * S, S, 1};
  l.sst_st = {H * S * S, S * S, 1, S};
  l.st = {B, H, S, 1};
  l.st_st = {HA * S, S, 1, 1};
  l.full = {B, H, S, D};
  l.full_st = {H * S * D, S * D, D, 1};
  return l;
}

// Forward: O = softmax(mask(scale Q K^T)) V, and Stats = max + log(sum exp) per query row.
Desc forward_plan(cudnnHandle_t handle, const Layouts& l, std::size_t* workspace) {
  GraphBuilder g;
  auto q = g.tensor(kQ, l.q, l.q_st, CUDNN_DATA_BFLOAT16, false);
  auto kt = g.tensor(kK, l.kt, l.kt_st, CUDNN_DATA_BFLOAT16, false);
  auto v = g.tensor(kV, l.kv, l.kv_st, CUDNN_DATA_BFLOAT16, false);
  auto o = g.tensor(kO, l.q, l.q_st, CUDNN_DATA_BFLOAT16, false);
  auto stats = g.tensor(kStats, l.st, l.st_st, CUDNN_DATA_FLOAT, false);
  auto scale = g.scalar(kScale, CUDNN_DATA_FLOAT);
  auto minus_inf = g.scalar(kMinusInf, CUDNN_DATA_FLOAT);

  auto raw = g.temp(l.ss, l.ss_st, CUDNN_DATA_FLOAT);
  g.matmul(q, kt, raw);
  auto scaled = g.temp(l.ss, l.ss_st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, raw, scale, nullptr, scaled);
  auto masked = g.causal_mask(scaled, l.ss, l.ss_st, minus_inf);
  // Softmax with statistics, as the frontend's composite softmax node.
  auto mx = g.temp(l.st, l.st_st, CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, mx);
  auto centred = g.temp(l.ss, l.ss_st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, masked, mx, nullptr, centred);
  auto e = g.temp(l.ss, l.ss_st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, centred, nullptr, nullptr, e);
  auto sum = g.temp(l.st, l.st_st, CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  auto log_sum = g.temp(l.st, l.st_st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, sum, nullptr, nullptr, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, mx, log_sum, nullptr, stats);
  auto p = g.temp(l.ss, l.ss_st, CUDNN_DATA_BFLOAT16);
  g.pointwise(CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, e, sum, nullptr, p);
  g.matmul(p, v, o);
  return g.plan(handle, workspace);
}

// out = xt y for each query head (a key or value gradient), summed over each kv head's group of
// query heads when the heads are grouped.
void group_summed_product(GraphBuilder& g, const Layouts& l, bool grouped, cudnnBackendDescriptor_t xt,
                          cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t out) {
  if (!grouped) return g.matmul(xt, y, out);
  auto full = g.temp(l.full, l.full_st, CUDNN_DATA_BFLOAT16);
  g.matmul(xt, y, full);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
}

// Backward, deterministic form: delta = rowsum(dO * O); P = exp(mask(scale Q K^T) - Stats);
// dV = P^T dO; dS = scale P (dO V^T - delta); dK = dS^T Q; dQ = dS K (group sums for GQA).
Desc backward_plan(cudnnHandle_t handle, const Layouts& l, bool grouped, std::size_t* workspace) {
  GraphBuilder g;
  auto q = g.tensor(kQ, l.q, l.q_st, CUDNN_DATA_BFLOAT16, false);
  auto kt = g.tensor(kK, l.kt, l.kt_st, CUDNN_DATA_BFLOAT16, false);
  auto vt = g.tensor(kV, l.kt, l.kt_st, CUDNN_DATA_BFLOAT16, false);
  auto o = g.tensor(kO, l.q, l.q_st, CUDNN_DATA_BFLOAT16, false);
  auto d_o = g.tensor(kDO, l.q, l.q_st, CUDNN_DATA_BFLOAT16, false);
  auto stats = g.tensor(kStats, l.st, l.st_st, CUDNN_DATA_FLOAT, false);
  auto dq = g.tensor(kDQ, l.q, l.q_st, CUDNN_DATA_BFLOAT16, false);
  auto dk = g.tensor(kDK, l.kv, l.kv_st, CUDNN_DATA_BFLOAT16, false);
  auto dv = g.tensor(kDV, l.kv, l.kv_st, CUDNN_DATA_BFLOAT16, false);
  auto delta = g.tensor(kDelta, l.st, l.st_st, CUDNN_DATA_FLOAT, false);
  auto scale = g.scalar(kScale, CUDNN_DATA_FLOAT);
  auto minus_inf = g.scalar(kMinusInf, CUDNN_DATA_FLOAT);
  auto one = g.scalar(kOne, CUDNN_DATA_FLOAT);

  // delta
  const Dims odo_st{l.q[1] * l.q[2] * l.q[3], l.q[2] * l.q[3], l.q[1] * l.q[3], 1};
  auto odo = g.temp(l.q, odo_st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, d_o, o, nullptr, odo);
  auto rowsum = g.temp(l.st, l.st_st, CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, odo, rowsum);
  g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, rowsum, one, nullptr, delta);

  // P, recomputed from the statistics
  auto raw = g.temp(l.ss, l.ss_st, CUDNN_DATA_FLOAT);
  g.matmul(q, kt, raw);
  auto scaled = g.temp(l.ss, l.ss_st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, raw, scale, nullptr, scaled);
  auto centred = g.temp(l.ss, l.ss_st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, scaled, stats, nullptr, centred);
  auto masked = g.causal_mask(centred, l.ss, l.ss_st, minus_inf);
  auto p = g.temp(l.ss, l.ss_st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, masked, nullptr, nullptr, p);

  // dV = P^T dO
  auto pt = g.temp(l.ss, l.sst_st, CUDNN_DATA_BFLOAT16);
  g.reshape(p, pt);
  group_summed_product(g, l, grouped, pt, d_o, dv);

  // dS = scale P (dO V^T - delta)
  auto dp = g.temp(l.ss, l.ss_st, CUDNN_DATA_FLOAT);
  g.matmul(d_o, vt, dp);
  auto dp_centred = g.temp(l.ss, l.ss_st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, dp, delta, nullptr, dp_centred);
  auto ds_unscaled = g.temp(l.ss, l.ss_st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dp_centred, p, nullptr, ds_unscaled);
  auto ds = g.temp(l.ss, l.ss_st, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, ds_unscaled, scale, nullptr, ds);

  // dK = dS^T Q
  auto dst = g.temp(l.ss, l.sst_st, CUDNN_DATA_BFLOAT16);
  g.reshape(ds, dst);
  group_summed_product(g, l, grouped, dst, q, dk);

  // dQ = dS K
  auto k = g.temp(l.kv, l.kv_st, CUDNN_DATA_BFLOAT16);
  g.reshape(kt, k);
  g.matmul(ds, k, dq);
  return g.plan(handle, workspace);
}

struct Plan {
  Desc plan;
  std::size_t workspace = 0;
};

// How a batch is cut into calls: `rows` rows at a time and, within a row, `kv_heads` kv heads
// (each with its group of query heads) at a time.
struct Split {
  int rows = 0, kv_heads = 0;
};

// One call's shape: `rows` rows and `kv_heads` of s's kv heads with their query heads.
AttentionShape call_shape(const AttentionShape& s, int rows, int kv_heads) {
  AttentionShape c = s;
  c.B = rows;
  c.n_kv_heads = kv_heads;
  c.n_heads = s.n_heads / s.n_kv_heads * kv_heads;
  return c;
}

}  // namespace

struct CudnnAttention::Plans {
  cudnnHandle_t handle = nullptr;
  // A call's B, S, H, G, D and direction, and the batch's H and G (its tensors' strides).
  using PlanKey = std::tuple<int, int, int, int, int, bool, int, int>;
  std::map<PlanKey, Plan> plans;
  // A shape's calls: how forward and backward split the batch, and the workspace.
  struct Calls {
    bool ok = false;
    Split forward, backward;
    std::size_t workspace = 0;
    std::string why;
  };
  using ShapeKey = std::tuple<int, int, int, int, int, bool, std::size_t>;   // + training, budget
  std::map<ShapeKey, Calls> shapes;
  std::string why;

  ~Plans() {
    plans.clear();   // the execution plans before the handle they were built with
    if (handle) cudnnDestroy(handle);
  }
  static ShapeKey shape_key(const AttentionShape& s, bool training, std::size_t budget) {
    return {s.B, s.S, s.n_heads, s.n_kv_heads, s.hd, training, budget};
  }
  // The plan of call shape c within batch shape s.
  const Plan& plan(const AttentionShape& c, const AttentionShape& s, bool backward) {
    const PlanKey key{c.B, c.S, c.n_heads, c.n_kv_heads, c.hd, backward, s.n_heads, s.n_kv_heads};
    auto it = plans.find(key);
    if (it == plans.end()) {
      if (!handle) check_build(cudnnCreate(&handle), "cudnnCreate");
      std::size_t ws = 0;
      const Layouts l = layouts(c, s.n_heads, s.n_kv_heads);
      Desc p = backward ? backward_plan(handle, l, c.n_heads != c.n_kv_heads, &ws) : forward_plan(handle, l, &ws);
      it = plans.emplace(key, Plan{std::move(p), ws}).first;
    }
    return it->second;
  }
  // The calls within `budget`: every head and the most rows (down from B) whose plans, and the
  // last call's, fit; where one row's do not, one row and the most kv heads (a divisor of
  // n_kv_heads) whose plan fits, so that long rows still run here. A call starting at row r0 and
  // query head h0 finds its statistics at (r0 x n_heads + h0) x S floats, which must stay on the
  // 16 bytes the tensors declare: where n_heads x S is not a multiple of 4 the rows per call are a
  // multiple of 4 (or the whole batch), and a call's heads x S is always one.
  Split split_within(const AttentionShape& s, bool backward, std::size_t budget, std::size_t* workspace) {
    const int granule = (long(s.n_heads) * s.S) % 4 == 0 ? 1 : 4;
    const auto fits = [&](std::size_t bytes) {
      if (bytes > budget) return false;
      *workspace = std::max(*workspace, bytes);
      return true;
    };
    int rows = s.B;
    std::size_t most = 0;
    for (;;) {
      most = plan(call_shape(s, rows, s.n_kv_heads), s, backward).workspace;
      if (most <= budget && s.B % rows != 0)   // the last, smaller call has a plan of its own
        most = std::max(most, plan(call_shape(s, s.B % rows, s.n_kv_heads), s, backward).workspace);
      if (fits(most)) return {rows, s.n_kv_heads};
      const int fit = static_cast<int>(double(rows) * double(budget) / double(most));
      const int next = std::min(rows - 1, fit) / granule * granule;
      if (next < 1) break;
      rows = next;
    }
    const int group = s.n_heads / s.n_kv_heads;
    std::size_t fewest_bytes = 0;
    int fewest = 0;   // the fewest kv heads a call could take, and its workspace
    if (granule == 1) {
      // One row with every head first: the rows above stopped on an estimate from more rows.
      if (rows > 1 && fits(plan(call_shape(s, 1, s.n_kv_heads), s, backward).workspace)) return {1, s.n_kv_heads};
      for (int g = s.n_kv_heads - 1; g >= 1; --g) {
        if (s.n_kv_heads % g != 0 || (long(g) * group * s.S) % 4 != 0) continue;
        const std::size_t bytes = plan(call_shape(s, 1, g), s, backward).workspace;
        if (fits(bytes)) return {1, g};
        fewest_bytes = bytes;
        fewest = g;
      }
    }
    std::string heads;
    if (fewest > 0)
      heads = fmt::format(" ({:.0f} MiB with {} queries a call)", fewest_bytes / 1048576.0,
                          fewest == 1 ? std::string("one kv head's") : fmt::format("{} kv heads'", fewest));
    throw BuildError{fmt::format(
        "its {} for {} row{} of {} positions needs a {:.0f} MiB workspace{}, over the {:.0f} MiB allowed "
        "(model.cudnn_workspace_mib){}",
        backward ? "backward" : "forward", rows, rows == 1 ? "" : "s", s.S, most / 1048576.0, heads,
        budget / 1048576.0, granule > 1 ? "; with n_heads x S not a multiple of 4 its calls take rows in fours" : "")};
  }
  const Calls& calls(const AttentionShape& s, bool training, std::size_t budget) {
    auto it = shapes.find(shape_key(s, training, budget));
    if (it != shapes.end()) return it->second;
    Calls c;
    if (!cudnn_attention_supports(s)) {
      c.why = fmt::format("head_dim {} with {} / {} heads is outside cuDNN's fused attention", s.hd, s.n_heads,
                          s.n_kv_heads);
    } else {
      try {
        c.forward = split_within(s, false, budget, &c.workspace);
        if (training) c.backward = split_within(s, true, budget, &c.workspace);
        c.ok = true;
      } catch (const BuildError& e) {
        c.why = e.what;
      }
    }
    return shapes.emplace(shape_key(s, training, budget), std::move(c)).first->second;
  }
  // The calls of a prepared shape (a training entry if there is one: it also holds forward).
  const Calls& prepared(const AttentionShape& s) const {
    const Calls* found = nullptr;
    for (const auto& [key, c] : shapes) {
      const auto& [B, S, H, G, D, training, budget] = key;
      if (c.ok && B == s.B && S == s.S && H == s.n_heads && G == s.n_kv_heads && D == s.hd &&
          (!found || (c.backward.rows > 0 && found->backward.rows == 0)))
        found = &c;
    }
    if (!found) SHARDRL_FATAL("cuDNN attention run before prepare() succeeded for its shape");
    return *found;
  }
  void run(void* stream, const Plan& p, std::vector<int64_t> uids, std::vector<void*> pointers, void* workspace) {
    check_run(cudnnSetStream(handle, static_cast<cudaStream_t>(stream)), "cudnnSetStream");
    try {
      Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
      pack.set_array(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids)
          .set_array(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers)
          .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, workspace)
          .finalize("variant pack");
      check_run(cudnnBackendExecute(handle, p.plan.get(), pack.get()), "cuDNN attention");
    } catch (const BuildError& e) {
      SHARDRL_FATAL(e.what);
    }
  }
};

namespace {

// bf16 is only declared here (its header needs Kokkos): step over its 2-byte elements by hand.
void* at(const bf16* p, long elements) {
  return const_cast<char*>(reinterpret_cast<const char*>(p)) + elements * 2;
}

// Where a call starting at row r0 and kv head g0 (query head h0 = g0 x group) finds its data,
// in elements: tokens (B*S, heads, hd) and statistics (B, heads, S).
struct CallOffsets {
  long q, kv, stats;
  CallOffsets(const AttentionShape& s, int r0, int g0) {
    const long h0 = long(g0) * (s.n_heads / s.n_kv_heads);
    q = long(r0) * s.S * s.n_heads * s.hd + h0 * s.hd;
    kv = long(r0) * s.S * s.n_kv_heads * s.hd + long(g0) * s.hd;
    stats = long(r0) * s.n_heads * s.S + h0 * s.S;
  }
};

// Runs `run(call shape, offsets)` over the batch's calls: rows, then kv heads within them.
template <class F>
void in_calls(const AttentionShape& s, Split split, F&& run) {
  for (int r0 = 0; r0 < s.B; r0 += split.rows)
    for (int g0 = 0; g0 < s.n_kv_heads; g0 += split.kv_heads)
      run(call_shape(s, std::min(split.rows, s.B - r0), split.kv_heads), CallOffsets(s, r0, g0));
}

}  // namespace

bool cudnn_attention_available() { return true; }

bool cudnn_attention_supports(const AttentionShape& s) {
  return s.hd % 8 == 0 && s.hd <= 128 && s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0;
}

CudnnAttention::CudnnAttention() : plans_(std::make_unique<Plans>()) {}
CudnnAttention::~CudnnAttention() = default;

const std::string& CudnnAttention::why() const { return plans_->why; }

bool CudnnAttention::prepare(const AttentionShape& s, bool training, std::size_t workspace_budget) {
  const Plans::Calls& c = plans_->calls(s, training, workspace_budget);
  if (!c.ok) plans_->why = c.why;
  return c.ok;
}

std::size_t CudnnAttention::workspace_bytes(const AttentionShape& s) const {
  return plans_->prepared(s).workspace;
}

void CudnnAttention::forward(void* stream, const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v,
                             bf16* out, float* lse, void* workspace) {
  float scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
  float minus_inf = -std::numeric_limits<float>::infinity();
  ++forward_calls_;
  in_calls(s, plans_->prepared(s).forward, [&](const AttentionShape& c, const CallOffsets& o) {
    plans_->run(stream, plans_->plan(c, s, false), {kQ, kK, kV, kO, kStats, kScale, kMinusInf},
                {at(q, o.q), at(k, o.kv), at(v, o.kv), at(out, o.q), lse + o.stats, &scale, &minus_inf},
                workspace);
  });
}

void CudnnAttention::backward(void* stream, const AttentionShape& s, const bf16* q, const bf16* k, const bf16* v,
                              const bf16* out, const float* lse, const bf16* dout, bf16* dq, bf16* dk, bf16* dv,
                              float* delta, void* workspace) {
  float scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
  float minus_inf = -std::numeric_limits<float>::infinity();
  float one = 1.0f;
  const Split split = plans_->prepared(s).backward;
  SHARDRL_CHECK(split.rows > 0, "cuDNN attention backward on a shape prepared for forward only");
  ++backward_calls_;
  in_calls(s, split, [&](const AttentionShape& c, const CallOffsets& o) {
    plans_->run(stream, plans_->plan(c, s, true),
                {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kDelta, kScale, kMinusInf, kOne},
                {at(q, o.q), at(k, o.kv), at(v, o.kv), at(out, o.q), at(dout, o.q),
                 const_cast<float*>(lse) + o.stats, at(dq, o.q), at(dk, o.kv), at(dv, o.kv), delta + o.stats, &scale,
                 &minus_inf, &one},
                workspace);
  });
}

}  // namespace shardrl::kernels
