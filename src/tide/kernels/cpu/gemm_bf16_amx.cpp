// The AMX-BF16 microkernel of gemm_bf16.h, in a file of its own because its functions are
// compiled for AMX (target attributes) whatever the build's -march: they run only where
// bf16_gemm_path_supported(kAmx) said the CPU and kernel allow it.
//
// Eight tile registers: four (16,16) f32 accumulators for a (32,32) block of C, two (16,32)
// bf16 tiles of A and two (16 k-pairs, 16 columns) VNNI tiles of B. Every tile is 16 rows of 64
// bytes, so one configuration serves all.
#include <immintrin.h>

#include <cstring>

#include "tide/kernels/cpu/gemm_bf16.h"

#define TIDE_AMX __attribute__((target("amx-tile,amx-bf16")))

namespace tide::cpu::amx_detail {

namespace {
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64);
}  // namespace

TIDE_AMX void begin_tiles() {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

TIDE_AMX void end_tiles() {
  _tile_release();
}

TIDE_AMX void kernel_32x32(const uint16_t* a, const uint16_t* b, int64_t kc, float* c) {
  // Tiles 0-3: C (rows 0-15 | 16-31) x (columns 0-15 | 16-31); 4, 5: A; 6, 7: B.
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const int64_t a1 = kc * 512, b1 = kc * 512;  // the second row / column tile
  for (int64_t k = 0; k < kc; ++k) {
    _tile_loadd(4, a + k * 512, 64);
    _tile_loadd(6, b + k * 512, 64);
    _tile_loadd(5, a + a1 + k * 512, 64);
    _tile_loadd(7, b + b1 + k * 512, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 128);
  _tile_stored(1, c + 16, 128);
  _tile_stored(2, c + 16 * 32, 128);
  _tile_stored(3, c + 16 * 32 + 16, 128);
}

}  // namespace tide::cpu::amx_detail
