#include "tide/core/rng.h"

#include <cmath>

namespace tide {

float PhiloxStream::normal(uint64_t i) const {
  const PhiloxCounter r = block(i / 2);
  const int k = static_cast<int>(i % 2) * 2;
  // u1 in (0, 1] so that log(u1) is finite.
  const double u1 = (static_cast<double>(r[k]) + 1.0) / 4294967296.0;
  const double u2 = static_cast<double>(r[k + 1]) / 4294967296.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

// splitmix64 finaliser: a cheap bijective mixer so that nearby ids give unrelated streams.
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rng_stream_id(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t h = mix64(a + 0x9e3779b97f4a7c15ull);
  h = mix64(h ^ (b + 0x9e3779b97f4a7c15ull));
  h = mix64(h ^ (c + 0x9e3779b97f4a7c15ull));
  return mix64(h ^ (d + 0x9e3779b97f4a7c15ull));
}

}  // namespace tide
