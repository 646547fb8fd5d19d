#include <gtest/gtest.h>

#include <set>

#include "tide/core/arena.h"
#include "tide/core/rng.h"

using namespace tide;

TEST(Philox, KnownAnswer) {
  // Random123's known-answer test for philox4x32-10 with zero counter and key.
  PhiloxCounter r = philox4x32_10({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
  r = philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                    {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(r[0], 0x408f276du);
  EXPECT_EQ(r[1], 0x41c83b0eu);
  EXPECT_EQ(r[2], 0xa20bc7c6u);
  EXPECT_EQ(r[3], 0x6d5451fdu);
}

TEST(Philox, StreamIsAPureFunctionAndUniform) {
  PhiloxStream a{42, rng_stream_id(1, 2, 3)}, b{42, rng_stream_id(1, 2, 3)};
  PhiloxStream c{42, rng_stream_id(1, 2, 4)};
  double sum = 0;
  int same_as_c = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(a.uint(i), b.uint(i));
    same_as_c += a.uint(i) == c.uint(i);
    float u = a.uniform(i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.01);
  EXPECT_LT(same_as_c, 5);
}

TEST(Arena, BumpsAlignsAndTracksPeak) {
  Arena a("test", 1024);
  void* p = a.alloc(10);
  void* q = a.alloc(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % Arena::kAlign, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % Arena::kAlign, 0u);
  EXPECT_EQ(static_cast<char*>(q) - static_cast<char*>(p), 64);
  size_t m = a.mark();
  a.alloc(500);
  EXPECT_EQ(a.peak(), 64u + 128u + 512u);
  a.rewind(m);
  EXPECT_EQ(a.used(), 192u);
  EXPECT_EQ(a.peak(), 704u);
  try {
    a.alloc(2000);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("arena 'test' is out of memory"), std::string::npos);
  }
}
