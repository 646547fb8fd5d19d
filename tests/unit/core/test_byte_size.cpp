#include <gtest/gtest.h>

#include "tide/core/byte_size.h"
#include "tide/core/error.h"

using namespace tide;

TEST(ByteSize, BinaryAndDecimalUnits) {
  EXPECT_EQ(parse_byte_size("80GiB"), 80LL << 30);
  EXPECT_EQ(parse_byte_size("80GB"), 80'000'000'000LL);
  EXPECT_EQ(parse_byte_size("512 GiB"), 512LL << 30);
  EXPECT_EQ(parse_byte_size("1.5TiB"), 3LL << 39);
  EXPECT_EQ(parse_byte_size("64mib"), 64LL << 20);
  EXPECT_EQ(parse_byte_size("2KB"), 2000);
  EXPECT_EQ(parse_byte_size("4096B"), 4096);
  EXPECT_EQ(parse_byte_size("1TB"), 1'000'000'000'000LL);
}

TEST(ByteSize, MissingOrUnknownUnitIsAClearError) {
  for (const char* bad : {"80", "80G", "eighty GiB", "GiB", "", "80 GiBs", "-5GiB", "inf GB"}) {
    try {
      parse_byte_size(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("write a number and a unit, e.g. 80GiB"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(ByteSize, Formatting) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3LL << 29), "1.50 GiB");
  EXPECT_EQ(format_bytes(80LL << 30), "80.00 GiB");
  EXPECT_EQ(format_gib(3LL << 29), "1.50");
}
