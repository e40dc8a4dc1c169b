// zero_host_pages: a host range reads as zeros afterwards, whatever the pages held, and nothing
// outside it changes (its ends are rarely on page boundaries).
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "core/zero_host_pages.hpp"

namespace shardrl {
namespace {

TEST(ZeroHostPages, TheRangeReadsZerosAndItsSurroundingsKeepTheirBytes) {
  // Ranges of many pages (the madvise path with partial pages at both ends), one page exactly
  // aligned or not, and less than a page (memset alone).
  for (const auto& [offset, bytes] : std::vector<std::pair<std::size_t, std::size_t>>{
           {100, (3u << 20) + 17}, {4096, 4096}, {1, 4096}, {5, 700}, {0, 0}}) {
    std::vector<char> buffer((4u << 20) + 8192, char(0x5a));   // every page touched and dirty
    zero_host_pages(buffer.data() + offset, bytes);
    for (std::size_t i = 0; i < buffer.size(); ++i) {
      const char expected = i >= offset && i < offset + bytes ? char(0) : char(0x5a);
      ASSERT_EQ(buffer[i], expected) << "byte " << i << " of a range at " << offset << " of " << bytes << " bytes";
    }
  }
}

}  // namespace
}  // namespace shardrl
