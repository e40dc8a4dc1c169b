// Rows of a (rows, width) matrix moved by an index: gathered to the front of another matrix, or
// scattered back to where they came from. The embedding's lookup is a gather
// (kernels/embedding.hpp); the head runs on the tokens it scores only (model/forward.cpp): their
// hidden rows gathered, their log-probabilities and gradients scattered back to the batch's
// positions. Values are copied, never combined, so the results
// are the same bits on CPU and GPU; 16-byte packs where the width and pointers allow.
#pragma once

#include <cstdint>

#include "core/kokkos.hpp"
#include "kernels/packed.hpp"

namespace shardrl::kernels {

namespace detail {
// Moves `count` rows (row r's elements at r * width) by the index: row index[j] of `in` to row j
// of `out` (gather), or row j of `in` to row index[j] of `out`; a pack (or an element) per work
// item. (A flag, not a lambda naming the rows: in the GPU build an nvcc extended lambda passed
// into the kernel's lambda made the launch call a null pointer on the host, from the model
// library, though not from the kernel test.)
template <class T>
void move_rows(const char* label, const ExecSpace& space, const T* in, const std::int32_t* index, T* out, int count,
               long width, bool gather) {
  const bool packed = width % Packed<T>::width == 0 && packs_aligned(in, out);
  const long step = packed ? Packed<T>::width : 1, per_row = width / step;
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace>(space, 0, long(count) * per_row), KOKKOS_LAMBDA(const long item) {
        const long j = item / per_row, k = (item - j * per_row) * step;
        const long from = gather ? index[j] : j, to = gather ? j : index[j];
        if (packed) store_packed(out + to * width + k, load_packed(in + from * width + k));
        else out[to * width + k] = in[from * width + k];
      });
}
}  // namespace detail

// out row j = in row index[j], for j < count. out and in are distinct.
template <class T>
void gather_rows(const ExecSpace& space, const T* in, const std::int32_t* index, T* out, int count, long width) {
  detail::move_rows("gather_rows", space, in, index, out, count, width, true);
}

// out row index[j] = in row j, for j < count; out's other rows are left as they are. The indices
// are distinct; out and in are distinct.
template <class T>
void scatter_rows(const ExecSpace& space, const T* in, const std::int32_t* index, T* out, int count, long width) {
  detail::move_rows("scatter_rows", space, in, index, out, count, width, false);
}

}  // namespace shardrl::kernels
