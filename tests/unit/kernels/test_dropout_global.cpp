// Dropout keyed by global coordinates (ops.h, DropoutSpec): a shard of an activation (a
// data-parallel rank or accumulation split: seq0; a tensor-parallel shard: col0/width_full;
// a sequence-parallel shard: pos0/seq_stride) draws bit for bit the slice of the mask that the
// whole tensor draws, for dropout_forward/backward and for the attention probabilities.
#include <cmath>

#include "kernel_test_util.h"

using namespace tide;
using namespace tide::test;

namespace {

constexpr float kP = 0.3f;
DropoutSpec base_spec() {
  return DropoutSpec{kP, 1234, rng_stream_id(5, 2, 1)};
}

// x(B,T,W)[b0:b0+nb, t0:t0+nt, j0:j0+nw] as a new contiguous (nb,nt,nw) buffer.
std::vector<float> slice(const std::vector<float>& x, int T, int W, int b0, int nb, int t0, int nt,
                         int j0, int nw) {
  std::vector<float> out;
  for (int b = b0; b < b0 + nb; ++b)
    for (int t = t0; t < t0 + nt; ++t)
      for (int j = j0; j < j0 + nw; ++j) out.push_back(x[(b * T + t) * W + j]);
  return out;
}

// Forward and backward of dropout on one tensor (B,T,W): {out, dinp} with dinp starting at 0.
struct DropoutResult {
  std::vector<float> out, dinp;
};
DropoutResult run_dropout(std::vector<float> inp, std::vector<float> dout, int B, int T, int W,
                          const DropoutSpec& spec) {
  DropoutResult r{std::vector<float>(inp.size()), std::vector<float>(inp.size(), 0.0f)};
  dropout_forward(cpu_ctx(), view(r.out, {B, T, W}), view(inp, {B, T, W}), spec);
  dropout_backward(cpu_ctx(), view(r.dinp, {B, T, W}), view(dout, {B, T, W}), spec);
  return r;
}

// The shard (b0,nb) x (t0,nt) x (j0,nw) of the full (B,T,W) run, computed on its own with the
// matching coordinates, equals the same slice of the full run bitwise.
void expect_shard_equals_slice(int B, int T, int W, int b0, int nb, int t0, int nt, int j0, int nw,
                               const DropoutSpec& shard_spec) {
  const auto inp = randn(B * T * W, 1), dout = randn(B * T * W, 2);
  const DropoutResult full = run_dropout(inp, dout, B, T, W, base_spec());
  const DropoutResult part =
      run_dropout(slice(inp, T, W, b0, nb, t0, nt, j0, nw),
                  slice(dout, T, W, b0, nb, t0, nt, j0, nw), nb, nt, nw, shard_spec);
  EXPECT_EQ(part.out, slice(full.out, T, W, b0, nb, t0, nt, j0, nw));
  EXPECT_EQ(part.dinp, slice(full.dinp, T, W, b0, nb, t0, nt, j0, nw));
}

}  // namespace

// (1) Data parallelism / gradient accumulation: sequences 0,1 and 2,3 of a (4,T,C) batch.
TEST(DropoutGlobal, BatchSplitEqualsTheWholeBatch) {
  const int B = 4, T = 7, C = 10;
  for (int half : {0, 1}) {
    DropoutSpec s = base_spec();
    s.seq0 = 2 * half;
    s.seq_stride = T;
    expect_shard_equals_slice(B, T, C, 2 * half, 2, 0, T, 0, C, s);
  }
  // One sequence at a time (a micro-batch of 1).
  for (int b = 0; b < B; ++b) {
    DropoutSpec s = base_spec();
    s.seq0 = b;
    expect_shard_equals_slice(B, T, C, b, 1, 0, T, 0, C, s);
  }
}

// (2) Tensor parallelism: columns [0,C/2) and [C/2,C) with col0 and width_full = C.
TEST(DropoutGlobal, ColumnSplitEqualsTheFullWidth) {
  const int B = 3, T = 5, C = 14;  // C/2 = 7: shard rows start off a multiple of 4
  for (int half : {0, 1}) {
    DropoutSpec s = base_spec();
    s.col0 = half * C / 2;
    s.width_full = C;
    expect_shard_equals_slice(B, T, C, 0, B, 0, T, half * C / 2, C / 2, s);
  }
}

// (3) Sequence parallelism: positions [0,T/2) and [T/2,T) with pos0 and seq_stride = T.
TEST(DropoutGlobal, PositionSplitEqualsTheFullSequence) {
  const int B = 2, T = 10, C = 9;
  for (int half : {0, 1}) {
    DropoutSpec s = base_spec();
    s.pos0 = half * T / 2;
    s.seq_stride = T;
    expect_shard_equals_slice(B, T, C, 0, B, half * T / 2, T / 2, 0, C, s);
  }
}

// All three at once: sequence 1..2, positions 3..6, columns 5..10 of a (4,8,12) activation.
TEST(DropoutGlobal, CombinedSplitEqualsTheWhole) {
  DropoutSpec s = base_spec();
  s.seq0 = 1;
  s.pos0 = 3;
  s.seq_stride = 8;
  s.col0 = 5;
  s.width_full = 12;
  expect_shard_equals_slice(4, 8, 12, 1, 2, 3, 4, 5, 6, s);
}

// A 2-D (N,W) tensor is (1,N,W): with the defaults, a flattened (B*T,W) view of a (B,T,W)
// activation draws the same mask.
TEST(DropoutGlobal, FlatRowsViewDrawsTheSameMask) {
  const int B = 3, T = 6, C = 11;
  auto inp = randn(B * T * C, 3);
  std::vector<float> a(inp.size()), b(inp.size());
  dropout_forward(cpu_ctx(), view(a, {B, T, C}), view(inp, {B, T, C}), base_spec());
  dropout_forward(cpu_ctx(), view(b, {B * T, C}), view(inp, {B * T, C}), base_spec());
  EXPECT_EQ(a, b);
}

// The mask follows the counter formula of ops.h for arbitrary coordinates, (5) the backward
// regenerates exactly the forward's mask, and (6) the kept fraction is 1-p within 5 sigma.
TEST(DropoutGlobal, MaskFollowsTheCounterRuleAndBackwardUsesIt) {
  const int B = 3, T = 40, W = 301;
  DropoutSpec s = base_spec();
  s.seq0 = 17;
  s.pos0 = 9;
  s.seq_stride = 64;
  s.col0 = 123;
  s.width_full = 1000;
  std::vector<float> ones(B * T * W, 1.0f), out(B * T * W), dinp(B * T * W, 0.0f);
  dropout_forward(cpu_ctx(), view(out, {B, T, W}), view(ones, {B, T, W}), s);
  dropout_backward(cpu_ctx(), view(dinp, {B, T, W}), view(ones, {B, T, W}), s);
  EXPECT_EQ(dinp, out);  // same mask forward and backward

  const PhiloxStream rng{s.seed, s.stream};
  const float scale = 1.0f / (1.0f - s.p);
  int64_t kept = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < W; ++j) {
        const uint64_t k = ((s.seq0 + b) * s.seq_stride + s.pos0 + t) * s.width_full + s.col0 + j;
        const bool keep = rng.uniform(k) >= s.p;
        ASSERT_EQ(out[(b * T + t) * W + j], keep ? scale : 0.0f) << b << "," << t << "," << j;
        kept += keep;
      }
  const double n = static_cast<double>(B) * T * W;
  const double sigma = std::sqrt(s.p * (1.0 - s.p) / n);
  EXPECT_NEAR(kept / n, 1.0 - s.p, 5 * sigma);
}

// The FD check with non-default coordinates: the backward is the derivative of the forward.
TEST(DropoutGlobal, BackwardWithCoordinatesMatchesFiniteDifferences) {
  const int B = 2, T = 3, W = 5;
  DropoutSpec s = base_spec();
  s.seq0 = 3;
  s.pos0 = 2;
  s.seq_stride = 7;
  s.col0 = 6;
  s.width_full = 20;
  auto inp = randn(B * T * W, 4), R = randn(B * T * W, 5);
  std::vector<float> out(B * T * W), dinp(B * T * W);
  expect_accumulates("dropout_backward",
                     [&] {
                       dropout_backward(cpu_ctx(), view(dinp, {B, T, W}), view(R, {B, T, W}), s);
                     },
                     {&dinp});
  check_gradient("dinp", inp, dinp, [&] {
    dropout_forward(cpu_ctx(), view(out, {B, T, W}), view(inp, {B, T, W}), s);
    return dot(out, R);
  });
}

// ---- attention ----------------------------------------------------------------------------

namespace {

// Attention on qkv(B,T,3C) with NH heads: {out(B,T,C), lse(B,NH,T), dqkv(B,T,3C)}.
struct AttentionResult {
  std::vector<float> out, lse, dqkv;
};
AttentionResult run_attention(std::vector<float> qkv, std::vector<float> dout, int B, int T, int C,
                              int NH, const DropoutSpec& spec) {
  AttentionResult r{std::vector<float>(B * T * C), std::vector<float>(B * NH * T),
                    std::vector<float>(B * T * 3 * C, 0.0f)};
  attention_forward(cpu_ctx(), view(r.out, {B, T, C}), view(r.lse, {B, NH, T}),
                    view(qkv, {B, T, 3 * C}), NH, spec);
  attention_backward(cpu_ctx(), view(r.dqkv, {B, T, 3 * C}), view(dout, {B, T, C}),
                     view(qkv, {B, T, 3 * C}), view(r.lse, {B, NH, T}), NH, spec);
  return r;
}

// The attention weights att(B,NH,T,T) after dropout, read through the output: with v_u the
// unit vector e_u of its head (HS >= T), out_t = att[t, :] exactly.
std::vector<float> attention_weights(std::vector<float> qkv, int B, int T, int C, int NH,
                                     const DropoutSpec& spec) {
  const int HS = C / NH;
  for (int r = 0; r < B * T; ++r)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < HS; ++i) qkv[r * 3 * C + 2 * C + h * HS + i] = i == r % T ? 1.0f : 0.0f;
  const AttentionResult res = run_attention(qkv, std::vector<float>(B * T * C), B, T, C, NH, spec);
  std::vector<float> att(static_cast<size_t>(B) * NH * T * T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t)
        for (int u = 0; u < T; ++u)
          att[((static_cast<size_t>(b) * NH + h) * T + t) * T + u] =
              res.out[(b * T + t) * C + h * HS + u];
  return att;
}

// The columns of heads [h0, h0+nh) in each of the three C-wide parts of qkv(B,T,3C) (or in
// the one part of out(B,T,C) when parts = 1): a head-parallel shard's layout.
std::vector<float> head_columns(const std::vector<float>& x, int BT, int C, int HS, int parts,
                                int h0, int nh) {
  std::vector<float> out;
  for (int r = 0; r < BT; ++r)
    for (int part = 0; part < parts; ++part)
      for (int i = h0 * HS; i < (h0 + nh) * HS; ++i) out.push_back(x[(r * parts + part) * C + i]);
  return out;
}

}  // namespace

// (4a) Tensor parallelism over heads: heads [0,NH/2) and [NH/2,NH) with col0/width_full in heads.
TEST(AttentionDropoutGlobal, HeadSplitEqualsAllHeads) {
  const int B = 2, T = 9, NH = 4, HS = 3, C = NH * HS;
  const auto qkv = randn(B * T * 3 * C, 6), dout = randn(B * T * C, 7);
  const AttentionResult full = run_attention(qkv, dout, B, T, C, NH, base_spec());
  const int nh = NH / 2, Cs = nh * HS;
  for (int half : {0, 1}) {
    const int h0 = half * nh;
    DropoutSpec s = base_spec();
    s.col0 = h0;
    s.width_full = NH;
    const AttentionResult part =
        run_attention(head_columns(qkv, B * T, C, HS, 3, h0, nh),
                      head_columns(dout, B * T, C, HS, 1, h0, nh), B, T, Cs, nh, s);
    // lse (B,NH,T): heads h0..h0+nh-1 of each b are the slice (b, h0.., :).
    EXPECT_EQ(part.lse, slice(full.lse, NH, T, 0, B, h0, nh, 0, T)) << "half " << half;
    EXPECT_EQ(part.out, head_columns(full.out, B * T, C, HS, 1, h0, nh));
    EXPECT_EQ(part.dqkv, head_columns(full.dqkv, B * T, C, HS, 3, h0, nh));
  }
}

// (4b) Data parallelism / accumulation: sequences 0,1 and 2,3 of a batch of 4 with seq0.
TEST(AttentionDropoutGlobal, BatchSplitEqualsTheWholeBatch) {
  const int B = 4, T = 6, NH = 2, C = 8;
  const auto qkv = randn(B * T * 3 * C, 8), dout = randn(B * T * C, 9);
  const AttentionResult full = run_attention(qkv, dout, B, T, C, NH, base_spec());
  for (int half : {0, 1}) {
    DropoutSpec s = base_spec();
    s.seq0 = 2 * half;
    const AttentionResult part =
        run_attention(slice(qkv, 1, T * 3 * C, 2 * half, 2, 0, 1, 0, T * 3 * C),
                      slice(dout, 1, T * C, 2 * half, 2, 0, 1, 0, T * C), 2, T, C, NH, s);
    EXPECT_EQ(part.lse, slice(full.lse, 1, NH * T, 2 * half, 2, 0, 1, 0, NH * T));
    EXPECT_EQ(part.out, slice(full.out, 1, T * C, 2 * half, 2, 0, 1, 0, T * C));
    EXPECT_EQ(part.dqkv, slice(full.dqkv, 1, T * 3 * C, 2 * half, 2, 0, 1, 0, T * 3 * C));
  }
}

// (4c) The attention counter rule with every coordinate set (pos0 and seq_stride included: a
// sequence-parallel layout that gathers the whole sequence for attention uses pos0 = 0, but
// the rule is defined for any), and (6) the kept fraction.
TEST(AttentionDropoutGlobal, MaskFollowsTheCounterRule) {
  const int B = 2, T = 12, NH = 3, C = 36;  // HS = T: the weights read through the output
  DropoutSpec s = base_spec();
  s.seq0 = 5;
  s.pos0 = 4;
  s.seq_stride = 32;
  s.col0 = 2;
  s.width_full = 8;
  const auto qkv = randn(B * T * 3 * C, 10);
  const std::vector<float> att = attention_weights(qkv, B, T, C, NH, s);
  DropoutSpec none = s;
  none.p = 0;
  const std::vector<float> probs = attention_weights(qkv, B, T, C, NH, none);
  const PhiloxStream rng{s.seed, s.stream};
  const float scale = 1.0f / (1.0f - s.p);
  int64_t kept = 0, total = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t)
        for (int u = 0; u <= t; ++u) {
          const uint64_t k =
              (((s.seq0 + b) * s.width_full + s.col0 + h) * s.seq_stride + s.pos0 + t) *
                  s.seq_stride +
              u;
          const bool keep = rng.uniform(k) >= s.p;
          const size_t i = ((static_cast<size_t>(b) * NH + h) * T + t) * T + u;
          ASSERT_EQ(att[i], keep ? probs[i] * scale : 0.0f) << b << "," << h << "," << t;
          kept += keep;
          ++total;
        }
  const double sigma = std::sqrt(s.p * (1.0 - s.p) / total);
  EXPECT_NEAR(static_cast<double>(kept) / total, 1.0 - s.p, 5 * sigma);
}

// (5) Forward and backward use the same mask with non-default coordinates: FD check of dqkv.
TEST(AttentionDropoutGlobal, BackwardWithCoordinatesMatchesFiniteDifferences) {
  const int B = 2, T = 4, NH = 2, C = 6;
  DropoutSpec s = base_spec();
  s.seq0 = 7;
  s.col0 = 1;
  s.width_full = 5;
  s.pos0 = 3;
  s.seq_stride = 9;
  auto qkv = randn(B * T * 3 * C, 12), R = randn(B * T * C, 13);
  AttentionResult r = run_attention(qkv, R, B, T, C, NH, s);
  std::vector<float> out(B * T * C), lse(B * NH * T);
  check_gradient("dqkv", qkv, r.dqkv, [&] {
    attention_forward(cpu_ctx(), view(out, {B, T, C}), view(lse, {B, NH, T}),
                      view(qkv, {B, T, 3 * C}), NH, s);
    return dot(out, R);
  });
}

// Coordinates outside the global activation are rejected with the numbers in the message.
TEST(DropoutGlobal, CoordinatesOutsideTheActivationAreErrors) {
  std::vector<float> x(2 * 3 * 4), y(x.size());
  auto run = [&](DropoutSpec s) {
    dropout_forward(cpu_ctx(), view(y, {2, 3, 4}), view(x, {2, 3, 4}), s);
  };
  DropoutSpec s = base_spec();
  s.pos0 = 2;
  s.seq_stride = 4;  // positions 2..4 of 4
  expect_error([&] { run(s); }, {"dropout_forward", "2..4", "seq_stride=4"});
  s = base_spec();
  s.col0 = 1;  // width_full 0 = the tensor's 4: columns 1..4 do not fit
  expect_error([&] { run(s); }, {"dropout_forward", "1..4", "width_full=4"});
  s = base_spec();
  s.pos0 = -1;
  expect_error([&] { run(s); }, {"dropout_forward", "must not be negative"});
  std::vector<float> x4(2 * 3 * 4 * 1);
  expect_error(
      [&] {
        dropout_forward(cpu_ctx(), view(y, {2, 3, 4, 1}), view(x4, {2, 3, 4, 1}), base_spec());
      },
      {"dropout_forward", "(B,T,W) or (N,W)"});
  // Attention: heads col0..col0+NH-1 must fit in width_full.
  const int B = 1, T = 2, C = 4, NH = 2;
  std::vector<float> qkv(B * T * 3 * C), out(B * T * C), lse(B * NH * T);
  s = base_spec();
  s.col0 = 3;
  s.width_full = 4;
  expect_error(
      [&] {
        attention_forward(cpu_ctx(), view(out, {B, T, C}), view(lse, {B, NH, T}),
                          view(qkv, {B, T, 3 * C}), NH, s);
      },
      {"attention_forward", "heads", "3..4", "width_full=4"});
}
