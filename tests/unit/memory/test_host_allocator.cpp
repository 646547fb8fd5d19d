// make_host_allocator (memory/allocator.h): page-locked memory on a device, and when the host
// cannot give it, an error that says what to do, naming the key that turns pinning off.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "error_of.h"
#include "tide/memory/allocator.h"

using namespace tide;
using tide::test::error_of;

namespace {

// More than any 64-bit host's address space: the allocation fails (mmap: ENOMEM).
constexpr size_t kTooMuch = size_t{1} << 50;

std::string error_allocating(Allocator& a) {
  return error_of([&] { a.allocate(kTooMuch, "auto placement's chunk 3"); });
}

}  // namespace

TEST(HostAllocator, PinnedMemoryThatCannotBeHadNamesTheKeyThatTurnsItOff) {
  const auto pinned = make_host_allocator(Device::sim(0), true, "placement.pin_memory");
  EXPECT_TRUE(pinned->pinned());
  EXPECT_EQ(error_allocating(*pinned),
            "could not allocate 1073741824.00 MiB of pinned host memory for auto placement's "
            "chunk 3; page-locked memory is committed at once and never swapped out: free host "
            "memory, or set placement.pin_memory=false for pageable memory (whose copies block "
            "the host)");
  // Without a key (the micro-batches' own staging), only the first advice.
  const auto staging = make_host_allocator(Device::sim(0), true);
  EXPECT_EQ(error_allocating(*staging),
            "could not allocate 1073741824.00 MiB of pinned host memory for auto placement's "
            "chunk 3; page-locked memory is committed at once and never swapped out: free host "
            "memory");
  // Pageable memory (the key false, or the CPU) has no advice to give.
  for (const auto& plain : {make_host_allocator(Device::sim(0), false, "placement.pin_memory"),
                            make_host_allocator(Device::cpu(), true, "placement.pin_memory")}) {
    EXPECT_FALSE(plain->pinned());
    EXPECT_EQ(error_allocating(*plain),
              "could not allocate 1073741824.00 MiB of host memory for auto placement's chunk 3");
  }
  EXPECT_EQ(pinned->allocated(), 0u);  // a failed allocation counts nothing
}
