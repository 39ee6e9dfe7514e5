// ScratchBytes: a large temporary's pages go back to the system when it
// goes, even after glibc has raised its mmap threshold (which kept the same
// bytes from the heap resident); small ones come from the heap, zeroed.
#include "base/scratch_bytes.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "../support/proc_status.hpp"

namespace ferry::detail {
namespace {

using ferry::test::rss_kib;

TEST(ScratchBytes, ALargeOnesPagesGoBackWhenItGoes) {
  void* (*volatile allocate)(std::size_t) = std::malloc;
  void (*volatile release)(void*) = std::free;
  release(allocate(std::size_t{32} << 20));  // the heap would now serve the next 16 MiB itself
  const long before = rss_kib();
  std::optional<ScratchBytes> scratch(std::in_place, std::size_t{16} << 20);
  ASSERT_EQ(scratch->size(), std::size_t{16} << 20);
  EXPECT_TRUE(std::all_of(scratch->data(), scratch->data() + scratch->size(), [](std::byte b) { return b == std::byte{0}; }));
  std::memset(scratch->data(), 1, scratch->size());
  const long used = rss_kib();
  scratch.reset();
  const long after = rss_kib();
  EXPECT_GT(used - before, 15 * 1024) << "RSS " << before << " → " << used << " KiB";
  EXPECT_LT(after - before, 1024) << "RSS " << before << " → " << used << " → " << after << " KiB";
}

TEST(ScratchBytes, ASmallOneIsZeroed) {
  ScratchBytes small(4096);
  ASSERT_EQ(small.size(), 4096u);
  EXPECT_TRUE(std::all_of(small.data(), small.data() + small.size(), [](std::byte b) { return b == std::byte{0}; }));
}

}  // namespace
}  // namespace ferry::detail
