// The generation tests' models (test_generation*.cpp): options, logits on the host, LoRA's B set so
// that adapters take part, and the rig of a tiny model whose completions are checked.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "config/model_presets.hpp"
#include "model/dense_parameters.hpp"
#include "model/transformer.hpp"
#include "rollout/generator.hpp"

namespace shardrl::generation_test {

inline ModelOptions opts(const ModelShape& s, Precision p, int rows, int len) {
  ModelOptions o;
  o.shape = s;
  o.precision = p;
  o.max_batch = rows;
  o.max_seq_len = len;
  return o;
}

template <class T>
inline std::vector<float> host_logits(const Transformer& m, int rows) {
  const int V = m.options().shape.vocab_size;
  Kokkos::View<const T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> d(static_cast<const T*>(m.logits()),
                                                                              std::size_t(rows) * V);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d);
  std::vector<float> out(std::size_t(rows) * V);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(h(i));
  return out;
}

// LoRA's B is zero at initialisation (the adapters then change nothing): set every B to a fixed
// pattern, the same for every model of the shape, so that the adapters take part (about as much
// as the base's own products: larger adapters scale the activations, and bf16's absolute
// rounding with them).
inline void set_lora_b(const Transformer& m, DenseParameters& params) {
  for (int u = 0; u < m.unit_count(); ++u) {
    std::vector<float> w(params.numel(u));
    using Device = Kokkos::View<float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    using Host = Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(Host(w.data(), w.size()), Device(params.main_weights(u), w.size()));
    for (const auto& p : m.units()[u].params)
      if (p.name.find(".lora_B.") != std::string::npos)
        for (std::int64_t i = 0; i < p.numel(); ++i) w[p.offset + i] = 0.01f * std::sin(0.7f * float(i + u));
    Kokkos::deep_copy(Device(params.main_weights(u), w.size()), Host(w.data(), w.size()));
  }
  params.refresh_compute_weights();
}

// The tiny model with `lora`'s adapters; with adapters on experts, its MLPs MoE (4 experts, top
// 2, a shared expert).
inline ModelShape with_adapters(LoraShape lora) {
  ModelShape s = resolve_model_shape(ModelConfig{});
  s.lora = lora;
  if (lora.experts) {
    s.n_experts = 4;
    s.top_k = 2;
    s.d_ff_expert = 32;
    s.shared_expert = true;
  }
  return s;
}

struct GenerationRig {
  ModelShape s;
  Transformer full{opts(s, Precision::fp32, 1, 40), ExecSpace()};
  DenseParameters params{full, ExecSpace()};
  std::vector<const void*> weights;
  // The tiny model, with `lora`'s adapters (B set, so that they take part) where it has some.
  explicit GenerationRig(LoraShape lora = {}) : s(with_adapters(lora)) {
    params.initialize(21, 0.3f);   // a larger init than usual, so distributions are far from uniform
    if (lora.on()) set_lora_b(full, params);
    for (int u = 0; u < full.unit_count(); ++u) weights.push_back(params.compute_weights(u));
  }
  std::vector<GenerationRow> rows() const {
    std::vector<GenerationRow> r(3);
    r[0].prompt = {10, 20, 30, 40, 50};
    r[1].prompt = {7};
    r[2].prompt = {1, 2, 3};
    for (int i = 0; i < 3; ++i) {
      r[i].prompt_index = 100 + i;
      r[i].sample_index = i % 2;
    }
    return r;
  }
  // log softmax of the full model at each position of `seq`, (len, V).
  std::vector<double> log_probs(const std::vector<std::int32_t>& seq) {
    const int L = static_cast<int>(seq.size()), V = s.vocab_size;
    std::vector<std::int32_t> targets(L, 0);
    full.set_batch(seq.data(), targets.data(), 1, L);
    for (int u = 0; u < full.unit_count(); ++u) full.forward_unit(u, weights[u], nullptr);
    std::vector<float> logits = host_logits<float>(full, L);
    std::vector<double> out(logits.size());
    for (int t = 0; t < L; ++t) {
      double mx = -1e30, z = 0;
      for (int v = 0; v < V; ++v) mx = std::max(mx, double(logits[t * V + v]));
      for (int v = 0; v < V; ++v) z += std::exp(logits[t * V + v] - mx);
      for (int v = 0; v < V; ++v) out[t * V + v] = logits[t * V + v] - mx - std::log(z);
    }
    return out;
  }
};

}  // namespace shardrl::generation_test
