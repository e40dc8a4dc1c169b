// A contiguous range of a tensor's row-major flattened elements as HDF5 hyperslab blocks: how a
// rank's slice of a sharded tensor maps onto the dataset of the tensor's real shape.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <vector>

namespace shardrl {

struct HyperslabBlock {
  std::vector<hsize_t> start, count;
};

// Blocks whose union is elements [begin, end) (end > begin) of a tensor of extent `dims`
// (at least one dimension). A flat range of a 2-d tensor is at most a partial first row, a
// block of full rows and a partial last row; in N-d the partial rows split further (at most
// 2 (N-1) + 1 blocks).
std::vector<HyperslabBlock> flat_range_blocks(const std::vector<hsize_t>& dims, std::uint64_t begin, std::uint64_t end);

}  // namespace shardrl
