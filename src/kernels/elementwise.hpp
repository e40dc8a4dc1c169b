// Element-wise helpers: cast between float and bf16, y += alpha * x, scale, fill.
// The kernels move 16-byte packs (kernels/packed.hpp) where the pointers allow; each element's
// arithmetic is the same in a pack and alone, so the results do not depend on alignment. Plain
// copies and zeroing go through Kokkos' deep_copy, which is a memcpy or memset on GPUs.
#pragma once

#include <type_traits>

#include "core/bf16.hpp"
#include "core/kokkos.hpp"
#include "kernels/packed.hpp"

namespace shardrl::kernels {

// out[i] = To(in[i])   (bf16 <- float rounds to nearest even)
// in and out are distinct ranges, or the same one.
template <class From, class To>
void cast(const ExecSpace& space, const From* in, To* out, long count) {
  if constexpr (std::is_same_v<From, To>) {
    // Through float this is the identity (bar quieting a signalling bf16 NaN), so it is a copy:
    // cudaMemcpyAsync on GPUs, where the element kernel moved 67 MB copies at about 1 TB/s.
    if (count > 0 && in != out) {
      using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
      Kokkos::View<const From*, MemSpace, Unmanaged> src(in, static_cast<std::size_t>(count));
      Kokkos::View<To*, MemSpace, Unmanaged> dst(out, static_cast<std::size_t>(count));
      Kokkos::deep_copy(space, dst, src);
    }
  } else {
    // Through float: exact for bf16 -> float, one rounding for float -> bf16. An item covers 16
    // bytes of bf16, so the float side moves two packs.
    constexpr int W = pack_width<From, To>;
    const PackedRange range = packed_range<From, To>(count, packs_aligned(in, out));
    Kokkos::parallel_for(
        "cast", Kokkos::RangePolicy<ExecSpace>(space, 0, range.items), KOKKOS_LAMBDA(const long item) {
          if (item < range.packs) {
            const long i = item * W;
            const Packed<From, W> x = load_packed<W>(in + i);
            Packed<To, W> y;
            SHARDRL_UNROLL_LANES
            for (int k = 0; k < W; ++k) y.v[k] = To(static_cast<float>(x.v[k]));
            store_packed(out + i, y);
          } else {
            const long i = range.tail_element(item);
            out[i] = To(static_cast<float>(in[i]));
          }
        });
  }
}

// y[i] = y[i] + alpha * x[i], computed in fp32
template <class TX, class TY>
void add_scaled(const ExecSpace& space, const TX* x, TY* y, float alpha, long count) {
  constexpr int W = pack_width<TX, TY>;
  const PackedRange range = packed_range<TX, TY>(count, packs_aligned(x, y));
  Kokkos::parallel_for(
      "add_scaled", Kokkos::RangePolicy<ExecSpace>(space, 0, range.items), KOKKOS_LAMBDA(const long item) {
        if (item < range.packs) {
          const long i = item * W;
          const Packed<TX, W> xp = load_packed<W>(x + i);
          Packed<TY, W> yp = load_packed<W>(y + i);
          SHARDRL_UNROLL_LANES
          for (int k = 0; k < W; ++k) yp.v[k] = TY(static_cast<float>(yp.v[k]) + alpha * static_cast<float>(xp.v[k]));
          store_packed(y + i, yp);
        } else {
          const long i = range.tail_element(item);
          y[i] = TY(static_cast<float>(y[i]) + alpha * static_cast<float>(x[i]));
        }
      });
}

// x[i] = alpha * x[i]
template <class T>
void scale(const ExecSpace& space, T* x, float alpha, long count) {
  constexpr int W = Packed<T>::width;
  const PackedRange range = packed_range<T>(count, packs_aligned(x));
  Kokkos::parallel_for(
      "scale", Kokkos::RangePolicy<ExecSpace>(space, 0, range.items), KOKKOS_LAMBDA(const long item) {
        if (item < range.packs) {
          const long i = item * W;
          Packed<T> p = load_packed(x + i);
          SHARDRL_UNROLL_LANES
          for (int k = 0; k < W; ++k) p.v[k] = T(alpha * static_cast<float>(p.v[k]));
          store_packed(x + i, p);
        } else {
          const long i = range.tail_element(item);
          x[i] = T(alpha * static_cast<float>(x[i]));
        }
      });
}

// x[i] = value. Zero goes through Kokkos' deep_copy, which sets memory (cudaMemsetAsync on GPUs):
// the plain kernel wrote zeros at about 650 GB/s on an H200, and the train step zeroes
// gradients every step (docs/performance.md).
template <class T>
void fill(const ExecSpace& space, T* x, float value, long count) {
  if (value == 0.0f && count > 0) {
    Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> v(x, static_cast<std::size_t>(count));
    Kokkos::deep_copy(space, v, T(0.0f));
    return;
  }
  constexpr int W = Packed<T>::width;
  const PackedRange range = packed_range<T>(count, packs_aligned(x));
  Kokkos::parallel_for(
      "fill", Kokkos::RangePolicy<ExecSpace>(space, 0, range.items), KOKKOS_LAMBDA(const long item) {
        if (item < range.packs) {
          Packed<T> p;
          SHARDRL_UNROLL_LANES
          for (int k = 0; k < W; ++k) p.v[k] = T(value);
          store_packed(x + item * W, p);
        } else {
          x[range.tail_element(item)] = T(value);
        }
      });
}

}  // namespace shardrl::kernels
