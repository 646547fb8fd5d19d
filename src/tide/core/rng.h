#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC11):
// a counter-based generator. The random number for element i is a pure function of
// (key, counter) — no state to carry — so any thread, any device, and any recomputation
// of a layer produces exactly the same dropout mask. This is what makes activation
// recomputation with dropout bitwise exact.

#include <array>
#include <cstdint>

namespace tide {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

inline PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kW0;
      key[1] += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    const uint32_t hi0 = p0 >> 32, lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = p1 >> 32, lo1 = static_cast<uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

// A uint32 to a float uniform in [0, 1) with 24 random bits.
inline float uint_to_unit_float(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}

// A stream of random numbers identified by (seed, stream): element i of the stream is
// philox(counter = {i/4 as 64 bits, stream as 64 bits}, key = seed)[i%4].
struct PhiloxStream {
  uint64_t seed = 0;
  uint64_t stream = 0;

  // Four consecutive uint32s starting at element 4*block.
  PhiloxCounter block(uint64_t block_index) const {
    return philox4x32_10(
        {static_cast<uint32_t>(block_index), static_cast<uint32_t>(block_index >> 32),
         static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)},
        {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  }
  uint32_t uint(uint64_t i) const { return block(i / 4)[i % 4]; }
  float uniform(uint64_t i) const { return uint_to_unit_float(uint(i)); }
  // Standard normal by Box-Muller from elements 2i and 2i+1 (used for weight initialisation).
  float normal(uint64_t i) const;
};

// Mixes several identifiers (layer, micro-batch, step, site) into one 64-bit stream id.
uint64_t rng_stream_id(uint64_t a, uint64_t b = 0, uint64_t c = 0, uint64_t d = 0);

}  // namespace tide
