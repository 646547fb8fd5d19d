// Causal multi-head self-attention core (llm.c's attention_forward/backward) with dropout on
// the attention probabilities. For one (b, t, h):
//   score[t2] = q_t . k_t2 / sqrt(HS)          for t2 <= t (causal)
//   probs     = softmax(score)                 -> preatt(B,NH,T,T)
//   att       = probs * mask / (1-p)           -> att(B,NH,T,T)  (== probs without dropout)
//   out_t     = sum_t2 att[t2] * v_t2
// Entries t2 > t of preatt and att are 0. The mask of element (b,h,t,t2) is drawn at the
// counter of its global coordinates (attention_dropout_row_counter + t2, see DropoutSpec), so
// a shard of heads (col0) or of sequences (seq0) draws the single-rank run's mask.
#include <cmath>
#include <vector>

#include "tide/kernels/cpu/cpu_ops.h"
#include "tide/kernels/cpu/dropout_mask.h"
#include "tide/kernels/cpu/vec.h"

namespace tide::cpu {

void attention_forward(float* out, float* preatt, float* att, const float* qkv, int B, int T, int C,
                       int NH, const DropoutSpec& dropout) {
  const int C3 = 3 * C;
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
  {
    std::vector<float> mult(T);  // dropout multipliers of one row
#pragma omp for collapse(3) schedule(static)
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        for (int h = 0; h < NH; ++h) {
          const float* q = qkv + (static_cast<int64_t>(b) * T + t) * C3 + h * HS;
          const int64_t row = ((static_cast<int64_t>(b) * NH + h) * T + t) * T;
          float* probs = preatt + row;  // (T)
          float* att_row = att + row;   // (T)

          // Scores and their maximum (subtracted before exp for stability).
          float maxval = -INFINITY;
          for (int t2 = 0; t2 <= t; ++t2) {
            const float* k = qkv + (static_cast<int64_t>(b) * T + t2) * C3 + C + h * HS;
            const float s = dot(q, k, HS) * scale;
            probs[t2] = s;
            if (s > maxval) maxval = s;
          }
          float expsum = 0.0f;
          for (int t2 = 0; t2 <= t; ++t2) {
            const float e = std::exp(probs[t2] - maxval);
            probs[t2] = e;
            expsum += e;
          }
          const float inv = 1.0f / expsum;
          for (int t2 = 0; t2 <= t; ++t2) probs[t2] *= inv;
          for (int t2 = t + 1; t2 < T; ++t2) probs[t2] = 0.0f;

          if (dropout.enabled()) {
            dropout_multipliers(dropout, attention_dropout_row_counter(dropout, T, NH, b, h, t),
                                t + 1, mult.data());
            for (int t2 = 0; t2 <= t; ++t2) att_row[t2] = probs[t2] * mult[t2];
          } else {
            for (int t2 = 0; t2 <= t; ++t2) att_row[t2] = probs[t2];
          }
          for (int t2 = t + 1; t2 < T; ++t2) att_row[t2] = 0.0f;

          // out_t = att @ v
          float* o = out + (static_cast<int64_t>(b) * T + t) * C + h * HS;
          for (int i = 0; i < HS; ++i) o[i] = 0.0f;
          for (int t2 = 0; t2 <= t; ++t2) {
            const float* v = qkv + (static_cast<int64_t>(b) * T + t2) * C3 + 2 * C + h * HS;
            axpy(att_row[t2], v, o, HS);
          }
        }
      }
    }
  }
}

// Parallel over (b, h): the gradients of q, k and v of one (b, h) live in a column slice of
// dqkv that no other (b, h) touches, so threads never write the same element, and within a
// (b, h) the rows t are processed in order: the result does not depend on the thread count.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* preatt,
                        const float* att, int B, int T, int C, int NH, const DropoutSpec& dropout) {
  const int C3 = 3 * C;
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
  {
    std::vector<float> dprobs(T), mult(T);  // per row t: dL/dprobs, dropout multipliers
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        for (int t = 0; t < T; ++t) {
          const int64_t row = ((static_cast<int64_t>(b) * NH + h) * T + t) * T;
          const float* probs = preatt + row;
          const float* att_row = att + row;
          const int64_t bt = static_cast<int64_t>(b) * T + t;
          const float* q = qkv + bt * C3 + h * HS;
          float* dq = dqkv + bt * C3 + h * HS;
          const float* dout_t = dout + bt * C + h * HS;

          // out_t = sum_t2 att[t2] v_t2: datt[t2] = v_t2 . dout_t, dv_t2 += att[t2] dout_t
          for (int t2 = 0; t2 <= t; ++t2) {
            const int64_t bt2 = static_cast<int64_t>(b) * T + t2;
            const float* v = qkv + bt2 * C3 + 2 * C + h * HS;
            float* dv = dqkv + bt2 * C3 + 2 * C + h * HS;
            dprobs[t2] = dot(v, dout_t, HS);
            axpy(att_row[t2], dout_t, dv, HS);
          }
          // att = probs * mult: dprobs = datt * mult (the mask regenerated from the spec).
          if (dropout.enabled()) {
            dropout_multipliers(dropout, attention_dropout_row_counter(dropout, T, NH, b, h, t),
                                t + 1, mult.data());
            for (int t2 = 0; t2 <= t; ++t2) dprobs[t2] *= mult[t2];
          }
          // softmax: dscore[t2] = probs[t2] * (dprobs[t2] - sum_j probs[j] dprobs[j])
          float dot = 0.0f;
          for (int t2 = 0; t2 <= t; ++t2) dot += probs[t2] * dprobs[t2];
          // score = q . k * scale: dq += dscore * scale * k, dk += dscore * scale * q
          for (int t2 = 0; t2 <= t; ++t2) {
            const float dscore = probs[t2] * (dprobs[t2] - dot) * scale;
            const int64_t bt2 = static_cast<int64_t>(b) * T + t2;
            const float* k = qkv + bt2 * C3 + C + h * HS;
            float* dk = dqkv + bt2 * C3 + C + h * HS;
            axpy(dscore, k, dq, HS);
            axpy(dscore, q, dk, HS);
          }
        }
      }
    }
  }
}

}  // namespace tide::cpu
