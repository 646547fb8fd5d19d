// placement.policy=auto's budget on a GPU without placement.device_memory_limit
// (memory/allocator.h): the free memory less 5% of the device's, at least 2 GiB; a clear error
// when the margin leaves nothing.
#include <gtest/gtest.h>

#include <string>

#include "tide/core/error.h"
#include "tide/memory/allocator.h"

using namespace tide;

TEST(AutoDeviceLimit, FreeMemoryLessAMarginOfFivePercentAtLeastTwoGiB) {
  constexpr int64_t GiB = int64_t{1} << 30;
  EXPECT_EQ(auto_device_margin(80 * GiB), 4 * GiB);  // an H100: 5%
  EXPECT_EQ(auto_device_margin(16 * GiB), 2 * GiB);  // a small GPU: the floor
  EXPECT_EQ(default_auto_device_limit({80 * GiB, 80 * GiB}), 76 * GiB);
  EXPECT_EQ(default_auto_device_limit({70 * GiB, 80 * GiB}), 66 * GiB);  // others hold 10 GiB
  try {
    default_auto_device_limit({3 * GiB, 80 * GiB});
    ADD_FAILURE() << "3 GiB free under a 4 GiB margin was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("the GPU has 3.00 GiB free, not more than the 4.00 GiB margin"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("set placement.device_memory_limit"), std::string::npos) << msg;
  }
}
