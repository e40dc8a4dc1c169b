// A plain fp64 host implementation of the transformer's forward (loops, no Kokkos), written
// independently of src/model and src/kernels. It checks the model's forward, and its finite
// differences are the reference for the model's hand-written backward: in fp64 they are exact
// to ~1e-9, where fp32 finite differences drown in rounding (~1e-7 of the loss / h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/model_presets.hpp"
#include "model/param_spec.hpp"

namespace shardrl::test {

class ReferenceModel {
 public:
  // `weights[u]` is unit u's flat buffer (as in the model), in double.
  ReferenceModel(const ModelShape& s, std::vector<UnitSpec> units, std::vector<std::vector<double>> weights)
      : s_(s), units_(std::move(units)), w_(std::move(weights)) {}

  // Every unit's weights (to build a reference of another shape with the same weights).
  const std::vector<std::vector<double>>& weights() const { return w_; }

  std::vector<double>& unit(int u) { return w_[u]; }
  // The load-balancing losses of the last logp(), summed over MoE layers (unweighted).
  double aux_loss() const { return aux_; }

  // Per-token log-probabilities of `targets` for B sequences of S tokens. With `row_tokens`
  // (B) the load-balancing loss counts row b's first row_tokens[b] tokens only (the rest is
  // padding, as HF's attention_mask marks it).
  std::vector<double> logp(const std::vector<std::int32_t>& tokens, const std::vector<std::int32_t>& targets, int B,
                           int S, const std::vector<std::int32_t>& row_tokens = {}) const {
    const int N = B * S, D = s_.d_model, hd = s_.head_dim, H = s_.n_heads, Hk = s_.n_kv_heads, F = s_.d_ff;
    aux_ = 0;
    std::vector<bool> counted(N, true);
    for (std::size_t b = 0; b < row_tokens.size(); ++b)
      for (int t = row_tokens[b]; t < S; ++t) counted[b * S + t] = false;
    std::vector<double> x(std::size_t(N) * D);
    const double* emb = p(0, "model.embed_tokens.weight");
    for (int n = 0; n < N; ++n)
      for (int d = 0; d < D; ++d) x[n * D + d] = emb[std::size_t(tokens[n]) * D + d];
    for (int l = 0; l < s_.n_layers; ++l) {
      const int u = 1 + l;
      const std::string pre = "model.layers." + std::to_string(l) + ".";
      auto h = rmsnorm(x, N, D, p(u, pre + "input_layernorm.weight"));
      auto q = adapted(h, N, D, u, pre + "self_attn.q_proj", H * hd);
      auto k = adapted(h, N, D, u, pre + "self_attn.k_proj", Hk * hd);
      auto v = adapted(h, N, D, u, pre + "self_attn.v_proj", Hk * hd);
      if (s_.qk_norm) {
        q = rmsnorm(q, N * H, hd, p(u, pre + "self_attn.q_norm.weight"));
        k = rmsnorm(k, N * Hk, hd, p(u, pre + "self_attn.k_norm.weight"));
      }
      rope(q, N, S, H);
      rope(k, N, S, Hk);
      std::vector<double> att(std::size_t(N) * H * hd, 0.0);
      for (int b = 0; b < B; ++b)
        for (int i = 0; i < S; ++i)
          for (int hh = 0; hh < H; ++hh) {
            const int g = hh / (H / Hk), n = b * S + i;
            std::vector<double> sc(i + 1);
            double mx = -1e300;
            for (int j = 0; j <= i; ++j) {
              double dot = 0;
              for (int d = 0; d < hd; ++d) dot += q[(std::size_t(n) * H + hh) * hd + d] * k[(std::size_t(b * S + j) * Hk + g) * hd + d];
              sc[j] = dot / std::sqrt(double(hd));
              mx = std::max(mx, sc[j]);
            }
            double z = 0;
            for (auto& e : sc) z += (e = std::exp(e - mx));
            for (int j = 0; j <= i; ++j)
              for (int d = 0; d < hd; ++d)
                att[(std::size_t(n) * H + hh) * hd + d] += sc[j] / z * v[(std::size_t(b * S + j) * Hk + g) * hd + d];
          }
      auto o = adapted(att, N, H * hd, u, pre + "self_attn.o_proj", D);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] += o[i];
      auto h2 = rmsnorm(x, N, D, p(u, pre + "post_attention_layernorm.weight"));
      if (s_.moe_layer(l)) {
        moe(h2, N, u, pre, counted, x);
        continue;
      }
      auto gt = adapted(h2, N, D, u, pre + "mlp.gate_proj", F);
      auto up = adapted(h2, N, D, u, pre + "mlp.up_proj", F);
      for (std::size_t i = 0; i < gt.size(); ++i) gt[i] = gt[i] / (1.0 + std::exp(-gt[i])) * up[i];
      auto m = adapted(gt, N, F, u, pre + "mlp.down_proj", D);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] += m[i];
    }
    const int head = static_cast<int>(units_.size()) - 1, V = s_.vocab_size;
    auto hf = rmsnorm(x, N, D, p(head, "model.norm.weight"));
    auto logits = linear(hf, N, D, s_.tie_embeddings ? emb : p(head, "lm_head.weight"), V);
    std::vector<double> out(N);
    for (int n = 0; n < N; ++n) {
      double mx = -1e300, z = 0;
      for (int v = 0; v < V; ++v) mx = std::max(mx, logits[std::size_t(n) * V + v]);
      for (int v = 0; v < V; ++v) z += std::exp(logits[std::size_t(n) * V + v] - mx);
      out[n] = logits[std::size_t(n) * V + targets[n]] - mx - std::log(z);
    }
    return out;
  }

 private:
  // Qwen3-MoE MLP: softmax router, top k (ties to the lower index), gates renormalised; each
  // expert a SwiGLU; plus the shared expert; x += the result. Adds the layer's load-balancing
  // loss E * sum_e (c_e / Nc) * mean_n p(n, e) to aux_, over the Nc counted tokens n.
  void moe(const std::vector<double>& h2, int N, int u, const std::string& pre, const std::vector<bool>& counted,
           std::vector<double>& x) const {
    const int D = s_.d_model, E = s_.n_experts, k = s_.top_k, Fe = s_.d_ff_expert;
    auto logits = linear(h2, N, D, p(u, pre + "mlp.gate.weight"), E);
    std::vector<double> count(E, 0), mean_p(E, 0);
    const double Nc = static_cast<double>(std::count(counted.begin(), counted.end(), true));
    // An expert (with its LoRA adapters where the unit has them: lora.experts).
    auto swiglu_expert = [&](const std::vector<double>& in, const std::string& name) {
      auto gt = adapted(in, 1, D, u, name + "gate_proj", Fe);
      auto up = adapted(in, 1, D, u, name + "up_proj", Fe);
      for (int f = 0; f < Fe; ++f) gt[f] = gt[f] / (1.0 + std::exp(-gt[f])) * up[f];
      return adapted(gt, 1, Fe, u, name + "down_proj", D);
    };
    for (int n = 0; n < N; ++n) {
      std::vector<double> pr(logits.begin() + std::size_t(n) * E, logits.begin() + std::size_t(n + 1) * E);
      const double mx = *std::max_element(pr.begin(), pr.end());
      double z = 0;
      for (auto& v : pr) z += (v = std::exp(v - mx));
      for (int e = 0; e < E; ++e) {
        pr[e] /= z;
        if (counted[n]) mean_p[e] += pr[e] / Nc;
      }
      std::vector<int> picked;
      std::vector<bool> used(E, false);
      for (int s = 0; s < k; ++s) {
        int best = -1;
        for (int e = 0; e < E; ++e)
          if (!used[e] && (best < 0 || pr[e] > pr[best])) best = e;
        used[best] = true;
        picked.push_back(best);
        if (counted[n]) count[best] += 1;
      }
      double sum = 0;
      for (int e : picked) sum += pr[e];
      const std::vector<double> in(h2.begin() + std::size_t(n) * D, h2.begin() + std::size_t(n + 1) * D);
      for (int e : picked) {
        auto y = swiglu_expert(in, pre + "mlp.experts." + std::to_string(e) + ".");
        for (int d = 0; d < D; ++d) x[std::size_t(n) * D + d] += pr[e] / sum * y[d];
      }
      if (s_.shared_expert) {
        auto y = swiglu_expert(in, pre + "mlp.shared_expert.");
        for (int d = 0; d < D; ++d) x[std::size_t(n) * D + d] += y[d];
      }
    }
    for (int e = 0; Nc > 0 && e < E; ++e) aux_ += E * (count[e] / Nc) * mean_p[e];
  }

  // A dense layer's linear module (its base weight `module`.weight), plus its LoRA adapter when
  // the unit has one: (alpha / rank) (x A^T) B^T, A (rank, in), B (out, rank).
  std::vector<double> adapted(const std::vector<double>& x, int N, int in, int u, const std::string& module,
                              int out) const {
    auto y = linear(x, N, in, p(u, module + ".weight"), out);
    bool has = false;
    for (const auto& ps : units_[u].params) has |= ps.name == module + ".lora_A.weight";
    if (!has) return y;
    const int r = s_.lora.rank;
    const double scale = double(s_.lora.alpha) / r;
    auto xa = linear(x, N, in, p(u, module + ".lora_A.weight"), r);
    auto delta = linear(xa, N, r, p(u, module + ".lora_B.weight"), out);
    for (std::size_t i = 0; i < y.size(); ++i) y[i] += scale * delta[i];
    return y;
  }

  const double* p(int u, const std::string& name) const {
    for (const auto& ps : units_[u].params)
      if (ps.name == name) return w_[u].data() + ps.offset;
    throw std::runtime_error("reference model: no parameter " + name);
  }
  std::vector<double> rmsnorm(const std::vector<double>& x, int R, int C, const double* w) const {
    std::vector<double> y(x.size());
    for (int r = 0; r < R; ++r) {
      double ss = 0;
      for (int c = 0; c < C; ++c) ss += x[std::size_t(r) * C + c] * x[std::size_t(r) * C + c];
      double rs = 1.0 / std::sqrt(ss / C + s_.norm_eps);
      for (int c = 0; c < C; ++c) y[std::size_t(r) * C + c] = x[std::size_t(r) * C + c] * rs * w[c];
    }
    return y;
  }
  // y (N, out) = x (N, in) W^T, W (out, in)
  static std::vector<double> linear(const std::vector<double>& x, int N, int in, const double* W, int out) {
    std::vector<double> y(std::size_t(N) * out, 0.0);
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < out; ++o) {
        double acc = 0;
        for (int i = 0; i < in; ++i) acc += x[std::size_t(n) * in + i] * W[std::size_t(o) * in + i];
        y[std::size_t(n) * out + o] = acc;
      }
    return y;
  }
  // Llama 3's scaling in fp64 (transformers' _compute_llama3_parameters): wavelengths below
  // original / high are kept, above original / low divided by the factor, between interpolated.
  double inv_freq(int i, int hd) const {
    const double f = std::pow(double(s_.rope_theta), -2.0 * i / hd);
    if (s_.rope_scaling_factor <= 0) return f;
    const double factor = s_.rope_scaling_factor, low = s_.rope_low_freq_factor, high = s_.rope_high_freq_factor;
    const double original = s_.rope_original_max_position, wavelen = 2 * M_PI / f;
    if (wavelen < original / high) return f;
    if (wavelen > original / low) return f / factor;
    const double smooth = (original / wavelen - low) / (high - low);
    return (1 - smooth) * f / factor + smooth * f;
  }
  void rope(std::vector<double>& x, int N, int S, int heads) const {
    const int hd = s_.head_dim, half = hd / 2;
    for (int n = 0; n < N; ++n)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < half; ++i) {
          double ang = (n % S) * inv_freq(i, hd);
          double* v = &x[(std::size_t(n) * heads + h) * hd];
          double a = v[i], b = v[i + half];
          v[i] = a * std::cos(ang) - b * std::sin(ang);
          v[i + half] = b * std::cos(ang) + a * std::sin(ang);
        }
  }

  ModelShape s_;
  std::vector<UnitSpec> units_;
  std::vector<std::vector<double>> w_;
  mutable double aux_ = 0;   // of the last logp()
};

}  // namespace shardrl::test
