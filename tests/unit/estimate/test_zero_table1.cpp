// ZeRO (Rajbhandari et al., SC20) Table 1: per-device memory of model states for 7.5B, 128B and
// 1T parameters, mixed-precision Adam (K = 12), at DP 1..1024, for stages Pos, Pos+g, Pos+g+p.
// The numbers below are copied as printed in the paper (GB = 1e9 bytes).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tide/estimate/model_states.h"

using namespace tide;

namespace {

// The paper's printing, read off the table itself: values of 100 GB and more are truncated to
// whole GB (513.5 -> 513, 257.75 -> 257, 4187.5 -> 4187), values from 10 to 100 are rounded
// half up to one decimal (41.25 -> 41.3), values below 10 to two decimals (1.875 -> 1.88,
// 0.46875 -> 0.47); trailing zeros are dropped (7.50 -> 7.5, 30.0 -> 30).
std::string as_printed_in_table1(int64_t bytes) {
  const double gb = bytes / 1e9;
  if (gb >= 100) return std::to_string(static_cast<int64_t>(std::floor(gb)));
  const int decimals = gb >= 10 ? 1 : 2;
  const double scale = std::pow(10.0, decimals);
  std::string s = std::to_string(std::floor(gb * scale + 0.5) / scale);
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s;
}

struct Table1Row {
  int dp;
  const char* gb[9];  // 7.5B: stage 1, 2, 3 | 128B: 1, 2, 3 | 1T: 1, 2, 3
};

const Table1Row kTable1[] = {
    {1, {"120", "120", "120", "2048", "2048", "2048", "16000", "16000", "16000"}},
    {4, {"52.5", "41.3", "30", "896", "704", "512", "7000", "5500", "4000"}},
    {16, {"35.6", "21.6", "7.5", "608", "368", "128", "4750", "2875", "1000"}},
    {64, {"31.4", "16.6", "1.88", "536", "284", "32", "4187", "2218", "250"}},
    {256, {"30.4", "15.4", "0.47", "518", "263", "8", "4046", "2054", "62.5"}},
    {1024, {"30.1", "15.1", "0.12", "513", "257", "2", "4011", "2013", "15.6"}},
};

}  // namespace

TEST(ZeroTable1, PrintingRuleMatchesThePaperExamples) {
  EXPECT_EQ(as_printed_in_table1(41'250'000'000), "41.3");
  EXPECT_EQ(as_printed_in_table1(1'875'000'000), "1.88");
  EXPECT_EQ(as_printed_in_table1(513'500'000'000), "513");
  EXPECT_EQ(as_printed_in_table1(7'500'000'000), "7.5");
  EXPECT_EQ(as_printed_in_table1(30'000'000'000), "30");
}

TEST(ZeroTable1, ReproducedToThePrintedPrecision) {
  const int64_t models[] = {7'500'000'000, 128'000'000'000, 1'000'000'000'000};
  for (const Table1Row& row : kTable1) {
    for (int m = 0; m < 3; ++m) {
      for (int stage = 1; stage <= 3; ++stage) {
        const ModelStateBytes b =
            zero_model_states(models[m], stage, row.dp, Precision::BF16, Optimizer::AdamW);
        EXPECT_EQ(as_printed_in_table1(b.total()), row.gb[m * 3 + stage - 1])
            << "psi " << models[m] << " dp " << row.dp << " stage " << stage;
      }
    }
  }
}

TEST(ZeroTable1, BaselineIsSixteenBytesPerParameterAtEveryDpDegree) {
  // "Without ZeRO, the memory consumption is equal to the first row" (section 5.4).
  for (int dp : {1, 4, 1024})
    EXPECT_EQ(zero_model_states(7'500'000'000, 0, dp, Precision::BF16, Optimizer::AdamW).total(),
              120'000'000'000);
  // K = 12: master, momentum and variance, 4 bytes each.
  const ModelStateBytes k = bytes_per_parameter(Precision::BF16, Optimizer::AdamW);
  EXPECT_EQ(k.optimizer_bytes(), 12);
}

TEST(ZeroTable1, FiguresQuotedInTheText) {
  // Section 5.1/5.2/5.3: 7.5B at Nd = 64 needs 31.4 GB (Pos), 16.6 GB (Pos+g), 1.9 GB (Pos+g+p).
  auto gb = [](int stage) {
    return zero_model_states(7'500'000'000, stage, 64, Precision::BF16, Optimizer::AdamW).total() /
           1e9;
  };
  EXPECT_NEAR(gb(1), 31.4, 0.05);
  EXPECT_NEAR(gb(2), 16.6, 0.05);
  EXPECT_NEAR(gb(3), 1.9, 0.05);
}
