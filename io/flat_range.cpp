#include "io/flat_range.hpp"

namespace shardrl {
namespace {

// Appends hyperslab blocks whose union is elements [begin, end) (end > begin) of the row-major
// sub-tensor at `prefix` (its first dims.size() - prefix.size() dimensions remain). A flat range
// of a 2-d tensor is at most a partial first row, a block of full rows and a partial last row;
// in N-d the partial rows recurse into the inner dimensions (at most 2 (N-1) + 1 blocks).
void append_blocks(const std::vector<hsize_t>& dims, std::vector<hsize_t>& prefix, std::uint64_t begin,
                   std::uint64_t end, std::vector<HyperslabBlock>& out) {
  const std::size_t d = prefix.size();
  const std::size_t n = dims.size();
  auto block = [&](hsize_t first, hsize_t rows) {
    HyperslabBlock b;
    b.start = prefix;
    b.count.assign(d, 1);
    b.start.push_back(first);
    b.count.push_back(rows);
    for (std::size_t k = d + 1; k < n; ++k) {
      b.start.push_back(0);
      b.count.push_back(dims[k]);
    }
    out.push_back(std::move(b));
  };
  if (d + 1 == n) {
    block(begin, end - begin);
    return;
  }
  std::uint64_t inner = 1;
  for (std::size_t k = d + 1; k < n; ++k) inner *= dims[k];
  std::uint64_t first_row = begin / inner;
  const std::uint64_t last_row = end / inner;   // the row holding `end` (exclusive)
  const std::uint64_t head = begin % inner, tail = end % inner;
  auto recurse = [&](std::uint64_t row, std::uint64_t b, std::uint64_t e) {
    prefix.push_back(row);
    append_blocks(dims, prefix, b, e, out);
    prefix.pop_back();
  };
  if (first_row == last_row) {   // inside one row
    recurse(first_row, head, tail);
    return;
  }
  if (head != 0) recurse(first_row++, head, inner);
  if (last_row > first_row) block(first_row, last_row - first_row);
  if (tail != 0) recurse(last_row, 0, tail);
}

}  // namespace

std::vector<HyperslabBlock> flat_range_blocks(const std::vector<hsize_t>& dims, std::uint64_t begin, std::uint64_t end) {
  std::vector<HyperslabBlock> out;
  std::vector<hsize_t> prefix;
  append_blocks(dims, prefix, begin, end, out);
  return out;
}

}  // namespace shardrl
