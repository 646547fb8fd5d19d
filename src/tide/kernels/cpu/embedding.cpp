// Token + position embedding (llm.c's encoder_forward/backward).
#include <algorithm>

#include "tide/core/error.h"
#include "tide/kernels/cpu/cpu_ops.h"

namespace tide::cpu {

namespace {

// A token outside [0, V) would read (forward) or write (backward) outside wte, so it is an
// error, reported with its position.
void check_tokens(const int32_t* tokens, int B, int T, int V, const char* op) {
  for (int64_t i = 0; i < static_cast<int64_t>(B) * T; ++i) {
    TIDE_CHECK(tokens[i] >= 0 && tokens[i] < V,
               "{}: token id {} at (b={}, t={}) is outside the vocabulary [0, {}); the data was "
               "tokenized with a larger vocabulary than the model's vocab_size, or it is corrupt",
               op, tokens[i], i / T, i % T, V);
  }
}

// Channels per work item of the backward: each thread owns a slice of channels of every row,
// so scatter-adds from repeated tokens never race and are summed in (b,t) order.
constexpr int kChannelBlock = 64;

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C, int V) {
  check_tokens(tokens, B, T, V, "embedding_forward");
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      float* out_bt = out + (static_cast<int64_t>(b) * T + t) * C;  // (C)
      const float* wte_ix = wte + static_cast<int64_t>(tokens[b * T + t]) * C;
      const float* wpe_t = wpe + static_cast<int64_t>(t) * C;
      for (int c = 0; c < C; ++c) out_bt[c] = wte_ix[c] + wpe_t[c];
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, int V) {
  check_tokens(tokens, B, T, V, "embedding_backward");
  const int n_blocks = (C + kChannelBlock - 1) / kChannelBlock;
  // dwte: parallel over channel blocks; within a block rows are visited in (b,t) order.
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < n_blocks; ++blk) {
    const int c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
    for (int64_t bt = 0; bt < static_cast<int64_t>(B) * T; ++bt) {
      const float* dout_bt = dout + bt * C;
      float* dwte_ix = dwte + static_cast<int64_t>(tokens[bt]) * C;
      for (int c = c0; c < c1; ++c) dwte_ix[c] += dout_bt[c];
    }
  }
  // dwpe: each position t is owned by one thread and sums the batch in order b = 0..B-1.
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) {
    float* dwpe_t = dwpe + static_cast<int64_t>(t) * C;
    for (int b = 0; b < B; ++b) {
      const float* dout_bt = dout + (static_cast<int64_t>(b) * T + t) * C;
      for (int c = 0; c < C; ++c) dwpe_t[c] += dout_bt[c];
    }
  }
}

}  // namespace tide::cpu
