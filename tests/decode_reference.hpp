// fp64 host references of a decode step's pieces, for the decode kernels' tests: one new head's
// norm and rotation (kernels/qk_rope_cache.hpp) and the attention of new tokens over a KV cache
// of any layout (kernels/attention_decode.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cache_shape.hpp"

namespace shardrl::test {

// rope(norm(x)) of one head in fp64: norm(x) = x / rms(x) * w, rounded to T as the kernel's
// input to the rotation is; angle_i = pos * theta^(-2i/hd).
template <class T>
std::vector<double> head_reference(const double* x, const std::vector<double>* w, int hd, int pos, float eps) {
  const int half = hd / 2;
  std::vector<double> n(x, x + hd);
  if (w) {
    double ss = 0;
    for (int d = 0; d < hd; ++d) ss += x[d] * x[d];
    const double r = 1.0 / std::sqrt(ss / hd + eps);
    for (int d = 0; d < hd; ++d) n[d] = static_cast<float>(T(static_cast<float>(x[d] * r * (*w)[d])));
  }
  std::vector<double> out(hd);
  for (int i = 0; i < half; ++i) {
    const double angle = pos * std::pow(10000.0, -2.0 * i / hd);
    out[i] = n[i] * std::cos(angle) - n[i + half] * std::sin(angle);
    out[i + half] = n[i + half] * std::cos(angle) + n[i] * std::sin(angle);
  }
  return out;
}

// The fp64 reference of attention_decode over any cache layout: `entry(seq, pos)` as the
// CacheShape addresses it, on the host.
template <class Entry>
std::vector<double> decode_reference(const kernels::CacheShape& s, const std::vector<int>& slot,
                                     const std::vector<int>& pos, const std::vector<double>& q,
                                     const std::vector<double>& kc, const std::vector<double>& vc, Entry entry) {
  const int H = s.n_heads, G = s.n_kv_heads, hd = s.hd, group = H / G;
  std::vector<double> want(static_cast<std::size_t>(s.rows) * H * hd, 0.0);
  for (int r = 0; r < s.rows; ++r)
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      std::vector<double> sc(pos[r] + 1);
      double mx = -1e300, z = 0;
      for (int j = 0; j <= pos[r]; ++j) {
        const long e = entry(slot[r], j);
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += q[(long(r) * H + h) * hd + d] * kc[(e * G + g) * hd + d];
        sc[j] = dot / std::sqrt(double(hd));
        mx = std::max(mx, sc[j]);
      }
      for (auto& e : sc) z += (e = std::exp(e - mx));
      for (int j = 0; j <= pos[r]; ++j) {
        const long e = entry(slot[r], j);
        for (int d = 0; d < hd; ++d) want[(long(r) * H + h) * hd + d] += sc[j] / z * vc[(e * G + g) * hd + d];
      }
    }
  return want;
}

}  // namespace shardrl::test
