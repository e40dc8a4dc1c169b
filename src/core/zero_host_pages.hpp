// Zeroes a large host allocation without writing its pages: a host build's phase arena is a few
// hundred MiB, mostly logits rows that a job's scored tokens never fill, and writing zeros there
// cost a rank's start most of a second (page faults on every page, then a byte loop).
#pragma once

#include <cstddef>

namespace shardrl {

// Leaves [data, data + bytes) all zeros. The memory must be private and anonymous, as malloc's
// and Kokkos::HostSpace's is (a shared or file-backed mapping would read back its old contents).
// The whole pages inside the range are handed back to the system (madvise MADV_DONTNEED: such
// pages read as zeros afterwards and are faulted in on first touch); the partial pages at its
// ends, or all of it where madvise refuses, are written with memset.
void zero_host_pages(char* data, std::size_t bytes);

}  // namespace shardrl
