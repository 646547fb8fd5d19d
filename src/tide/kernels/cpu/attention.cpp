// Causal multi-head self-attention core with dropout on the attention probabilities, saving
// only the output and each row's log-sum-exp (as flash attention does): the (T,T) scores live
// in a small per-thread block and never reach memory the step keeps. For one (b, t, h):
//   score[t2] = q_t . k_t2 / sqrt(HS)          for t2 <= t (causal)
//   lse_t     = log sum_t2 exp(score[t2])      -> lse(B,NH,T), f32 (saved for backward)
//   probs     = softmax(score)
//   att       = probs * mask / (1-p)           (== probs without dropout)
//   out_t     = sum_t2 att[t2] * v_t2
// The backward recomputes the scores of a row block, probs = exp(score - lse), and the mask.
// The mask of element (b,h,t,t2) is drawn at the counter of its global coordinates
// (attention_dropout_row_counter + t2, see DropoutSpec), so a shard of heads (col0) or of
// sequences (seq0) draws the single-rank run's mask, and the backward draws the forward's.
//
// Why GEMMs: the products QK^T, att V and their backward are matrix products per (b, h), and a
// single-threaded sgemm runs them ~10x faster than dot/axpy loops over rows. The causal mask
// is exploited in blocks of kRowBlock rows: row block [r0, r1) only needs keys [0, r1), so the
// wasted work is the upper triangle of the diagonal blocks, not half of every matrix. The
// backward's key gradients accumulate row block by row block (dk, dv of keys [0, r1)).
//
// Grouped-query attention: qkv rows are [q: NH*HS | k: NKV*HS | v: NKV*HS] and query head h
// reads kv head h / G, G = NH/NKV (NKV = NH: GPT-2's (B,T,3C)). Only the offsets and the row
// stride W = (NH + 2*NKV) * HS change; with NKV = NH every call is the multi-head one.
//
// Reproducibility: each (b, h) is one OpenMP work item of the forward, and each (b, kv head)
// one of the backward (its G query heads in order, since they all add into the kv head's
// gradient), computed by one thread with a fixed sequence of sgemm calls whose shapes depend
// only on T and HS (OpenBLAS pinned to one thread), so the result does not depend on the
// thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "tide/kernels/cpu/cpu_ops.h"
#include "tide/kernels/cpu/dropout_mask.h"
#include "tide/kernels/cpu/gemm.h"
#include "tide/kernels/cpu/simd.h"
#include "tide/kernels/cpu/vec.h"

namespace tide::cpu {

namespace {

// Rows per causal block (and columns per block of the key gradients).
constexpr int kRowBlock = 32;

// p[0, n) = softmax(p[0, n)) in place: maximum, exp(p - max) summed in 8 lanes (the last
// partial group padded with -inf, whose exp is 0), scaled by 1/sum. Returns the log-sum-exp.
float softmax_row(float* p, int n) {
  v8f m = splat(-INFINITY);
  int i = 0;
  for (; i + 8 <= n; i += 8) m = max8(load8(p + i), m);
  if (i < n) m = max8(load_partial(p + i, n - i, -INFINITY), m);
  const float maxval = hmax8(m);
  const v8f maxv = splat(maxval);
  v8f acc = splat(0.0f);
  for (i = 0; i + 8 <= n; i += 8) {
    const v8f e = exp8(load8(p + i) - maxv);
    store8(p + i, e);
    acc += e;
  }
  if (i < n) {
    const v8f e = exp8(load_partial(p + i, n - i, -INFINITY) - maxv);
    store_partial(p + i, e, n - i);
    acc += e;
  }
  const float sum = hsum8(acc);
  const float inv = 1.0f / sum;
  for (i = 0; i < n; ++i) p[i] *= inv;
  return maxval + std::log(sum);
}

// p[0, n) = exp(p[0, n) - lse): the probabilities again from the scores and the saved lse.
void probs_from_lse(float* p, int n, float lse) {
  const v8f l = splat(lse);
  int i = 0;
  for (; i + 8 <= n; i += 8) store8(p + i, exp8(load8(p + i) - l));
  if (i < n) store_partial(p + i, exp8(load_partial(p + i, n - i, -INFINITY) - l), n - i);
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                       int NKV, const DropoutSpec& dropout) {
  const int HS = C / NH, G = NH / NKV;
  const int W = C + 2 * NKV * HS;  // the row stride of qkv (3C without grouping)
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  pin_openblas_to_one_thread();
#pragma omp parallel
  {
    // One row block's scores, then probabilities after dropout (kRowBlock,T); the dropout
    // multipliers of one row.
    std::vector<float> blk(static_cast<size_t>(kRowBlock) * T), mult(T);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        const float* row0 = qkv + static_cast<int64_t>(b) * T * W;
        const float* q = row0 + h * HS;            // (T,HS), ld W
        const float* k = row0 + C + (h / G) * HS;  // its kv head
        const float* v = k + NKV * HS;
        const int64_t bh = static_cast<int64_t>(b) * NH + h;
        float* o = out + static_cast<int64_t>(b) * T * C + h * HS;  // (T,HS), ld C
        for (int r0 = 0; r0 < T; r0 += kRowBlock) {
          const int r1 = std::min(T, r0 + kRowBlock);
          // blk(0:r1-r0, 0:r1) = scale * q(r0:r1) k(0:r1)^T; keys past a row's own position
          // are computed too and overwritten with 0 below.
          gemm_serial(false, true, r1 - r0, r1, HS, scale, q + static_cast<int64_t>(r0) * W, W, k,
                      W, 0.0f, blk.data(), T);
          for (int t = r0; t < r1; ++t) {
            float* p = blk.data() + static_cast<int64_t>(t - r0) * T;
            lse[bh * T + t] = softmax_row(p, t + 1);
            std::fill(p + t + 1, p + r1, 0.0f);
            if (!dropout.enabled()) continue;
            dropout_multipliers(dropout, attention_dropout_row_counter(dropout, T, NH, b, h, t),
                                t + 1, mult.data());
            for (int t2 = 0; t2 <= t; ++t2) p[t2] *= mult[t2];
          }
          // out(r0:r1) = att(r0:r1, 0:r1) v(0:r1)
          gemm_serial(false, false, r1 - r0, HS, r1, 1.0f, blk.data(), T, v, W, 0.0f,
                      o + static_cast<int64_t>(r0) * C, C);
        }
      }
    }
  }
}

// Per (b, h) and row block [r0, r1), with dO = dout's slice and two (kRowBlock,T) blocks P, D:
//   P = exp(scale q k^T - lse)           the probabilities, recomputed (keys [0, r1))
//   D = dO V^T                           (d att)
//   D = (D * mask - rowdot) * P * scale  (d scores; 0 past each row's position)
//   P = P * mask                         (att)
//   dQ(r0:r1) += D K,  dK(0:r1) += D^T Q(r0:r1),  dV(0:r1) += P^T dO(r0:r1)
// The gradients of one (b, kv head) live in column slices of dqkv that no other work item
// touches: dq of its G query heads, and its dk, dv, to which those heads add in order.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* lse, int B,
                        int T, int C, int NH, int NKV, const DropoutSpec& dropout) {
  const int HS = C / NH, G = NH / NKV;
  const int W = C + 2 * NKV * HS;  // the row stride of qkv (3C without grouping)
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  pin_openblas_to_one_thread();
#pragma omp parallel
  {
    std::vector<float> pblk(static_cast<size_t>(kRowBlock) * T),
        dblk(static_cast<size_t>(kRowBlock) * T), mult(T);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b) {
      for (int kh = 0; kh < NKV; ++kh) {
        for (int h = kh * G; h < (kh + 1) * G; ++h) {
          const int64_t row0 = static_cast<int64_t>(b) * T * W;
          const int64_t q_off = row0 + h * HS, k_off = row0 + C + kh * HS;
          const float* q = qkv + q_off;  // (T,HS), ld W; k, v and the gradients alike
          const float* k = qkv + k_off;
          const float* v = k + NKV * HS;
          float* dq = dqkv + q_off;
          float* dk = dqkv + k_off;
          float* dv = dk + NKV * HS;
          const float* dout_bh = dout + static_cast<int64_t>(b) * T * C + h * HS;  // ld C
          const float* lse_bh = lse + (static_cast<int64_t>(b) * NH + h) * T;
          for (int r0 = 0; r0 < T; r0 += kRowBlock) {
            const int r1 = std::min(T, r0 + kRowBlock), rows = r1 - r0;
            const float* q_blk = q + static_cast<int64_t>(r0) * W;
            const float* dout_blk = dout_bh + static_cast<int64_t>(r0) * C;
            gemm_serial(false, true, rows, r1, HS, scale, q_blk, W, k, W, 0.0f, pblk.data(), T);
            // d att(r0:r1, 0:r1) = dO(r0:r1) v(0:r1)^T
            gemm_serial(false, true, rows, r1, HS, 1.0f, dout_blk, C, v, W, 0.0f, dblk.data(), T);
            for (int t = r0; t < r1; ++t) {
              float* p = pblk.data() + static_cast<int64_t>(t - r0) * T;
              float* drow = dblk.data() + static_cast<int64_t>(t - r0) * T;
              probs_from_lse(p, t + 1, lse_bh[t]);
              std::fill(p + t + 1, p + r1, 0.0f);
              // att = probs * mult: dprobs = datt * mult (the mask regenerated from the spec).
              if (dropout.enabled()) {
                dropout_multipliers(dropout, attention_dropout_row_counter(dropout, T, NH, b, h, t),
                                    t + 1, mult.data());
                for (int t2 = 0; t2 <= t; ++t2) drow[t2] *= mult[t2];
              }
              // softmax: dscore[t2] = probs[t2] * (dprobs[t2] - sum_j probs[j] dprobs[j]), and
              // score = q . k * scale.
              const float rowdot = cpu::dot(p, drow, t + 1);
              for (int t2 = 0; t2 <= t; ++t2) drow[t2] = p[t2] * (drow[t2] - rowdot) * scale;
              std::fill(drow + t + 1, drow + r1, 0.0f);
              if (dropout.enabled())
                for (int t2 = 0; t2 <= t; ++t2) p[t2] *= mult[t2];
            }
            // dq(r0:r1) += dscores(r0:r1, 0:r1) k(0:r1)
            gemm_serial(false, false, rows, HS, r1, 1.0f, dblk.data(), T, k, W, 1.0f,
                        dq + static_cast<int64_t>(r0) * W, W);
            // dk(0:r1) += dscores(r0:r1, 0:r1)^T q(r0:r1);  dv(0:r1) += att(r0:r1, 0:r1)^T
            // dO(r0:r1)
            gemm_serial(true, false, r1, HS, rows, 1.0f, dblk.data(), T, q_blk, W, 1.0f, dk, W);
            gemm_serial(true, false, r1, HS, rows, 1.0f, pblk.data(), T, dout_blk, C, 1.0f, dv, W);
          }
        }
      }
    }
  }
}

}  // namespace tide::cpu
