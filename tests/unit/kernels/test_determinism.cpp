// Every op gives bitwise the same result whatever the number of OpenMP (and OpenBLAS) threads:
// the project's reproducibility tests compare runs bit for bit.
#include <cblas.h>
#include <omp.h>

#include <cstring>

#include "kernel_test_util.h"

using namespace tide;
using namespace tide::test;

namespace {

// Runs every forward and backward op once on shapes big enough to be split across threads
// (C = 160 is two and a half channel blocks, T = 41 two causal row blocks of attention, one
// partial) and returns all outputs, concatenated.
std::vector<float> run_all_ops() {
  const int B = 3, T = 41, C = 160, NH = 4, V = 67, OC = 3 * C, N = B * T;
  const OpContext ctx = cpu_ctx();
  const DropoutSpec drop{0.2f, 3, rng_stream_id(7)};
  std::vector<float> result;
  auto keep = [&](const std::vector<float>& v) { result.insert(result.end(), v.begin(), v.end()); };

  std::vector<int32_t> tokens(N);
  for (int i = 0; i < N; ++i) tokens[i] = (i * 7) % 13;  // repeated tokens
  auto wte = randn(V * C, 1), wpe = randn(T * C, 2), dres = randn(N * C, 3);
  std::vector<float> x(N * C), dwte(V * C), dwpe(T * C);
  embedding_forward(ctx, view(x, {B, T, C}), view(tokens, {B, T}), view(wte, {V, C}),
                    view(wpe, {T, C}));
  embedding_backward(ctx, view(dwte, {V, C}), view(dwpe, {T, C}), view(dres, {B, T, C}),
                     view(tokens, {B, T}));
  keep(x), keep(dwte), keep(dwpe);

  auto lw = randn(C, 4), lb = randn(C, 5);
  std::vector<float> ln(N * C), mean(N), rstd(N), dx(N * C), dlw(C), dlb(C);
  layernorm_forward(ctx, view(ln, {N, C}), view(mean, {N}), view(rstd, {N}), view(x, {N, C}),
                    view(lw, {C}), view(lb, {C}));
  layernorm_backward_input(ctx, view(dx, {N, C}), view(dres, {N, C}), view(x, {N, C}),
                           view(lw, {C}), view(mean, {N}), view(rstd, {N}));
  layernorm_backward_weight(ctx, view(dlw, {C}), view(dlb, {C}), view(dres, {N, C}),
                            view(x, {N, C}), view(mean, {N}), view(rstd, {N}));
  keep(ln), keep(mean), keep(rstd), keep(dx), keep(dlw), keep(dlb);

  auto w = randn(OC * C, 6, 0.1f), b = randn(OC, 7), dqkv_out = randn(N * OC, 8);
  std::vector<float> qkv(N * OC), dln(N * C), dw(OC * C), db(OC);
  matmul_forward(ctx, view(qkv, {B, T, OC}), view(ln, {B, T, C}), view(w, {OC, C}), view(b, {OC}));
  matmul_backward_input(ctx, view(dln, {B, T, C}), view(dqkv_out, {B, T, OC}), view(w, {OC, C}));
  matmul_backward_weight(ctx, view(dw, {OC, C}), view(db, {OC}), view(dqkv_out, {B, T, OC}),
                         view(ln, {B, T, C}));
  keep(qkv), keep(dln), keep(dw), keep(db);

  std::vector<float> att_out(N * C), lse(B * NH * T), dqkv(N * OC);
  attention_forward(ctx, view(att_out, {B, T, C}), view(lse, {B, NH, T}), view(qkv, {B, T, OC}), NH,
                    drop);
  attention_backward(ctx, view(dqkv, {B, T, OC}), view(dres, {B, T, C}), view(qkv, {B, T, OC}),
                     view(lse, {B, NH, T}), NH, drop);
  keep(att_out), keep(lse), keep(dqkv);

  // The Llama ops: grouped-query attention (2 query heads per kv head) on the first
  // (NH + 2*NKV) * HS columns of qkv, RoPE, RMSNorm and SwiGLU.
  const int NKV = NH / 2, HS = C / NH, Wg = (NH + 2 * NKV) * HS;
  std::vector<float> qkv_g(N * Wg), dqkv_g(N * Wg), att_g(N * C), rot(N * Wg), drot(N * Wg);
  for (int r = 0; r < N; ++r)
    std::copy(qkv.begin() + r * OC, qkv.begin() + r * OC + Wg, qkv_g.begin() + r * Wg);
  std::vector<float> inv_freq(HS / 2);
  for (int i = 0; i < HS / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / HS);
  rope_forward(ctx, view(rot, {B, T, Wg}), view(qkv_g, {B, T, Wg}), view(inv_freq, {HS / 2}), NH,
               NKV);
  rope_backward(ctx, view(drot, {B, T, Wg}), view(rot, {B, T, Wg}), view(inv_freq, {HS / 2}), NH,
                NKV);
  attention_forward(ctx, view(att_g, {B, T, C}), view(lse, {B, NH, T}), view(rot, {B, T, Wg}), NH,
                    NKV, drop);
  attention_backward(ctx, view(dqkv_g, {B, T, Wg}), view(dres, {B, T, C}), view(rot, {B, T, Wg}),
                     view(lse, {B, NH, T}), NH, NKV, drop);
  keep(rot), keep(drot), keep(att_g), keep(lse), keep(dqkv_g);
  std::vector<float> rms(N * C), rms_rstd(N), drms(N * C), drw(C);
  rmsnorm_forward(ctx, view(rms, {N, C}), view(rms_rstd, {N}), view(x, {N, C}), view(lw, {C}),
                  1e-5f);
  rmsnorm_backward_input(ctx, view(drms, {N, C}), view(dres, {N, C}), view(x, {N, C}),
                         view(lw, {C}), view(rms_rstd, {N}));
  rmsnorm_backward_weight(ctx, view(drw, {C}), view(dres, {N, C}), view(x, {N, C}),
                          view(rms_rstd, {N}));
  keep(rms), keep(rms_rstd), keep(drms), keep(drw);
  std::vector<float> sw(N * C / 2), dsw(N * C);
  swiglu_forward(ctx, view(sw, {N, C / 2}), view(x, {N, C}));
  swiglu_backward(ctx, view(dsw, {N, C}), view(sw, {N, C / 2}), view(x, {N, C}));
  keep(sw), keep(dsw);

  std::vector<float> g(N * C), dg(N * C), r(N * C), da(N * C), dbb(N * C), d(N * C), dd(N * C);
  gelu_forward(ctx, view(g, {N, C}), view(att_out, {N, C}));
  gelu_backward(ctx, view(dg, {N, C}), view(dres, {N, C}), view(att_out, {N, C}));
  residual_forward(ctx, view(r, {N, C}), view(g, {N, C}), view(x, {N, C}));
  residual_backward(ctx, view(da, {N, C}), view(dbb, {N, C}), view(dres, {N, C}));
  dropout_forward(ctx, view(d, {N, C}), view(r, {N, C}), drop);
  dropout_backward(ctx, view(dd, {N, C}), view(dres, {N, C}), drop);
  keep(g), keep(dg), keep(r), keep(da), keep(dbb), keep(d), keep(dd);

  // Logits (N,V) from the residual stream, tied to wte as in GPT-2.
  std::vector<float> logits(N * V), losses(N), dlogits(N * V);
  std::vector<int32_t> targets(N);
  for (int i = 0; i < N; ++i) targets[i] = i % 5 == 0 ? -1 : (i * 5) % V;
  matmul_forward(ctx, view(logits, {N, V}), view(r, {N, C}), view(wte, {V, C}), Tensor{});
  crossentropy_forward(ctx, view(losses, {N}), view(logits, {N, V}), view(targets, {N}));
  crossentropy_backward(ctx, view(dlogits, {N, V}), view(logits, {N, V}), view(targets, {N}),
                        1.0f / N);
  keep(logits), keep(losses), keep(dlogits);
  return result;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(Determinism, BitwiseIdenticalForAnyOpenMPThreadCount) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one = run_all_ops();
  omp_set_num_threads(2);
  const std::vector<float> two = run_all_ops();
  omp_set_num_threads(3);  // an uneven split of every loop
  const std::vector<float> three = run_all_ops();
  omp_set_num_threads(saved);
  EXPECT_TRUE(same_bits(one, two));
  EXPECT_TRUE(same_bits(one, three));
}

// OpenBLAS's own threading is not reproducible across thread counts (see cpu/gemm.h), so the
// kernels pin it to one thread whatever the process set before.
TEST(Determinism, IndependentOfTheOpenBLASThreadSetting) {
  openblas_set_num_threads(1);
  const std::vector<float> one = run_all_ops();
  openblas_set_num_threads(2);
  const std::vector<float> two = run_all_ops();
  EXPECT_EQ(openblas_get_num_threads(), 1);
  EXPECT_TRUE(same_bits(one, two));
}
