// Rows moved by an index (kernels/rows.hpp): gathered rows are the indexed input rows, scattered
// rows land at their indices and every other row of the output is left as it was. Exact copies,
// so compared as values against a host loop: widths of whole 16-byte packs and not, pointers
// aligned and not (the one-element path), float and bf16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/rows.hpp"

namespace shardrl {
namespace {

using test::buffer_at;
using test::device_ints;
using test::poisoned_at;
using test::random_values;

constexpr int kRows = 23;

// `count` distinct rows of kRows in increasing order (how the head's scored tokens come), seeded.
std::vector<int> some_rows(int count, unsigned seed) {
  std::vector<int> all(kRows);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937(seed));
  all.resize(count);
  std::sort(all.begin(), all.end());
  return all;
}

template <class T>
void check(long width, long offset) {
  const std::string what = std::string(std::is_same_v<T, bf16> ? "bf16" : "float") + ", width " +
                           std::to_string(width) + ", offset " + std::to_string(offset);
  for (int count : {0, 1, 9, kRows}) {
    const std::vector<int> index = some_rows(count, static_cast<unsigned>(count + width));
    const auto d_index = device_ints(index);
    const std::vector<double> rows = random_values<T>(kRows * width, 11);
    const auto in = buffer_at<T>(offset, rows);

    auto gathered = poisoned_at<T>(offset, count * width);
    kernels::gather_rows(ExecSpace(), in.data() + offset, d_index.data(), gathered.data() + offset, count, width);
    const std::vector<double> g = gathered.host();
    for (int j = 0; j < count; ++j)
      for (long k = 0; k < width; ++k)
        ASSERT_EQ(g[offset + j * width + k], rows[index[j] * width + k]) << what << ": gathered row " << j;
    test::expect_untouched_outside(g, offset, count * width, what + ", gather");

    // Scattered into rows that hold 7: the indexed rows get the input's rows in turn, the rest keep 7.
    auto out = buffer_at<T>(offset, std::vector<double>(kRows * width, 7.0));
    kernels::scatter_rows(ExecSpace(), in.data() + offset, d_index.data(), out.data() + offset, count, width);
    const std::vector<double> s = out.host();
    std::vector<int> source(kRows, -1);
    for (int j = 0; j < count; ++j) source[index[j]] = j;
    for (int r = 0; r < kRows; ++r)
      for (long k = 0; k < width; ++k)
        ASSERT_EQ(s[offset + r * width + k], source[r] < 0 ? 7.0 : rows[source[r] * width + k])
            << what << ": scattered into row " << r << " (" << count << " rows)";
    test::expect_untouched_outside(s, offset, kRows * width, what + ", scatter");
  }
}

TEST(KernelRows, GatherAndScatterMoveTheIndexedRows) {
  for (long width : {1L, 3L, 8L, 64L, 8L * 5 + 3})
    for (long offset : {0L, 1L}) {
      check<float>(width, offset);
      check<bf16>(width, offset);
    }
}

}  // namespace
}  // namespace shardrl
