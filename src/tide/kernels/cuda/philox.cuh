#pragma once
// Philox4x32-10 and the inverted-dropout mask, callable from host and device code.
//
// This is a copy of tide::philox4x32_10 and PhiloxStream::block (src/tide/core/rng.h), and of
// the mask rule and counters of cpu/dropout_mask.h (src/tide/kernels/cpu/dropout_mask.h), written
// without std::array so that nvcc can run it in kernels. It must stay identical to them bit
// for bit: a mask drawn on the GPU has to equal the mask the CPU draws for the same
// (seed, stream, element), or a recomputation on another device would change the model.
// The host-side test PhiloxCuh.EqualsCoreRng (tests/gpu/kernels) compares them on many
// counters and keys, and runs everywhere, GPU or not.
//
// Plain C++ when not compiled by nvcc (the host test includes it from a .cpp file).

#include <cstdint>

#if defined(__CUDACC__)
#define TIDE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TIDE_HOST_DEVICE inline
#endif

namespace tide::cuda {

struct Philox4 {
  uint32_t v[4];
};

// tide::philox4x32_10 (core/rng.h): ten rounds of the Philox S-box with a Weyl key schedule.
TIDE_HOST_DEVICE Philox4 philox4x32_10(Philox4 ctr, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kW0;
      key1 += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr.v[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
  }
  return ctr;
}

// PhiloxStream{seed, stream}.block(block_index): elements 4*block_index .. 4*block_index+3.
TIDE_HOST_DEVICE Philox4 philox_block(uint64_t seed, uint64_t stream, uint64_t block_index) {
  return philox4x32_10(
      Philox4{{static_cast<uint32_t>(block_index), static_cast<uint32_t>(block_index >> 32),
               static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)}},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// tide::uint_to_unit_float: 24 random bits to a float in [0, 1) (exact in f32).
TIDE_HOST_DEVICE float philox_unit_float(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}

// The dropout rule in one value type that kernels take by value: the element at counter k is
// kept (multiplied by `scale` = 1/(1-p), computed on the host exactly as
// cpu::dropout_keep_scale does) when uniform(k) >= p, and zeroed otherwise. Counters come
// from the element's global coordinates (ops.h, DropoutSpec), with the spec's defaults
// resolved on the host: seq_stride and width_full are never 0 here.
struct DropoutParams {
  float p = 0.0f;
  float scale = 1.0f;
  uint64_t seed = 0;
  uint64_t stream = 0;
  bool enabled = false;
  uint64_t seq0 = 0;
  int64_t pos0 = 0;
  int64_t seq_stride = 1;  // positions per sequence
  int64_t width_full = 1;  // unsharded width (features, or heads for attention)
  int64_t col0 = 0;
};

// cpu::dropout_row_counter: first counter of row (b,t) of an activation (B,T,W).
TIDE_HOST_DEVICE uint64_t dropout_row_counter(const DropoutParams& d, int64_t b, int64_t t) {
  return ((d.seq0 + static_cast<uint64_t>(b)) * static_cast<uint64_t>(d.seq_stride) +
          static_cast<uint64_t>(d.pos0 + t)) *
             static_cast<uint64_t>(d.width_full) +
         static_cast<uint64_t>(d.col0);
}
// cpu::attention_dropout_row_counter: first counter of row (b,h,t) of (B,NH,T,T).
TIDE_HOST_DEVICE uint64_t attention_dropout_row_counter(const DropoutParams& d, int64_t b,
                                                        int64_t h, int64_t t) {
  const uint64_t S = static_cast<uint64_t>(d.seq_stride);
  return (((d.seq0 + static_cast<uint64_t>(b)) * static_cast<uint64_t>(d.width_full) +
           static_cast<uint64_t>(d.col0 + h)) *
              S +
          static_cast<uint64_t>(d.pos0 + t)) *
         S;
}

// Multiplier (scale or 0) of counter k. One Philox block yields four counters; a kernel that
// needs the four neighbours of k can call philox_block once and use dropout_multiplier_of.
TIDE_HOST_DEVICE float dropout_multiplier_of(const DropoutParams& d, uint32_t random_bits) {
  return philox_unit_float(random_bits) >= d.p ? d.scale : 0.0f;
}
TIDE_HOST_DEVICE float dropout_multiplier(const DropoutParams& d, uint64_t k) {
  if (!d.enabled) return 1.0f;
  return dropout_multiplier_of(d, philox_block(d.seed, d.stream, k / 4).v[k % 4]);
}

}  // namespace tide::cuda
