// 16-byte packs of elements for memory-bound kernels: a thread that loads 8 bf16 (or 4 floats)
// with one instruction keeps far more bytes in flight than one loading 2, which is what moves an
// elementwise kernel from about 1 TB/s to near the copy bandwidth on an H100 (docs/performance.md,
// the step's kernel breakdown). The arithmetic per element is unchanged, so a packed kernel gives
// the same bits as its one-element form, on CPU and GPU alike.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/kokkos.hpp"

// Loops over the lanes of a pack are unrolled so that the pack stays in registers on GPUs: a
// lane indexed at run time would put the whole pack in local memory. Device passes only: the
// host compiler warns on the pragma.
#if defined(__CUDA_ARCH__)
#define SHARDRL_UNROLL_LANES _Pragma("unroll")
#else
#define SHARDRL_UNROLL_LANES
#endif

namespace shardrl::kernels {

// The elements one work item handles when a kernel touches the types T...: 16 bytes of the
// narrowest, so that every pointer moves whole 16-byte packs (cast<float, bf16> reads two float
// packs for each bf16 pack it writes).
template <class... T>
inline constexpr int pack_width = static_cast<int>(16 / std::min({sizeof(T)...}));

// W elements of T, read or written as W * sizeof(T) / 16 aligned 16-byte accesses.
template <class T, int W = pack_width<T>>
struct alignas(16) Packed {
  static_assert(W * sizeof(T) % 16 == 0, "a pack is made of whole 16-byte accesses");
  static constexpr int width = W;
  T v[W];
};

// p must be 16-byte aligned (packs_aligned).
template <class T>
KOKKOS_INLINE_FUNCTION Packed<T> load_packed(const T* p) {
  return *reinterpret_cast<const Packed<T>*>(p);
}
template <int W, class T>
KOKKOS_INLINE_FUNCTION Packed<T, W> load_packed(const T* p) {
  return *reinterpret_cast<const Packed<T, W>*>(p);
}

template <class T, int W>
KOKKOS_INLINE_FUNCTION void store_packed(T* p, const Packed<T, W>& x) {
  *reinterpret_cast<Packed<T, W>*>(p) = x;
}

// Whether every pointer may be read or written in packs (16-byte aligned).
inline bool packs_aligned() { return true; }
template <class P, class... Rest>
bool packs_aligned(const P* p, const Rest*... rest) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0 && packs_aligned(rest...);
}

// The work items of an elementwise kernel over `count` elements in packs of `width`: items below
// `packs` cover elements [item * width, item * width + width); the rest one element each, from
// packs * width on. Unaligned pointers make every item one element (packs = 0).
struct PackedRange {
  long packs = 0;
  long items = 0;
  int width = 1;
  KOKKOS_INLINE_FUNCTION long tail_element(long item) const { return packs * width + (item - packs); }
};

// The range of a kernel whose pointers are of the types T... (pack_width<T...> elements a pack).
template <class... T>
PackedRange packed_range(long count, bool aligned) {
  PackedRange r;
  r.width = aligned ? pack_width<T...> : 1;
  r.packs = aligned ? count / r.width : 0;
  r.items = r.packs + (count - r.packs * r.width);
  return r;
}

}  // namespace shardrl::kernels
