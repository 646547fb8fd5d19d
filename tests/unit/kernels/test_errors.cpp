// Bad calls stop with one line that names the op, the tensor and what is expected.
#include "kernel_test_util.h"

using namespace tide;
using namespace tide::test;

TEST(OpErrors, ShapeMismatchNamesTensorAndExpectedShape) {
  std::vector<float> inp(4 * 8), w(6 * 9), out(4 * 6);
  expect_error(
      [&] {
        matmul_forward(cpu_ctx(), view(out, {4, 6}), view(inp, {4, 8}), view(w, {6, 9}), Tensor{});
      },
      {"matmul_forward", "'weight'", "(6, 9)", "(6, 8)"});

  std::vector<float> x(2 * 3 * 8), y(2 * 3 * 8), mean(6), rstd(5), lw(8), lb(8);
  expect_error(
      [&] {
        layernorm_forward(cpu_ctx(), view(y, {2, 3, 8}), view(mean, {6}), view(rstd, {5}),
                          view(x, {2, 3, 8}), view(lw, {8}), view(lb, {8}));
      },
      {"layernorm_forward", "'rstd'", "6 elements"});

  std::vector<float> a(10), b(12), r(10);
  expect_error([&] { residual_forward(cpu_ctx(), view(r, {10}), view(a, {10}), view(b, {12})); },
               {"residual_forward", "'b'", "(12)", "(10)"});
}

TEST(OpErrors, LlamaOpsNameTensorAndExpectedShape) {
  std::vector<float> x(2 * 3 * 8), y(2 * 3 * 8), rstd(6), w(7);
  expect_error(
      [&] {
        rmsnorm_forward(cpu_ctx(), view(y, {2, 3, 8}), view(rstd, {6}), view(x, {2, 3, 8}),
                        view(w, {7}), 1e-5f);
      },
      {"rmsnorm_forward", "'weight'", "(7)", "(8)"});
  std::vector<float> w8(8);
  expect_error(
      [&] {
        rmsnorm_forward(cpu_ctx(), view(y, {2, 3, 8}), view(rstd, {6}), view(x, {2, 3, 8}),
                        view(w8, {8}), -1.0f);
      },
      {"rmsnorm_forward", "eps=-1", ">= 0"});
  std::vector<float> rstd5(5), dw(8);
  expect_error(
      [&] {
        rmsnorm_backward_weight(cpu_ctx(), view(dw, {8}), view(y, {2, 3, 8}), view(x, {2, 3, 8}),
                                view(rstd5, {5}));
      },
      {"rmsnorm_backward_weight", "'rstd'", "6 elements"});

  std::vector<float> odd(2 * 7), half(2 * 3);
  expect_error(
      [&] {
        swiglu_forward(cpu_ctx(), view(half, {2, 3}), view(odd, {2, 7}));
      },
      {"swiglu_forward", "'inp'", "(2, 7)", "2*I"});
  std::vector<float> inp(2 * 8), out(2 * 8);
  expect_error(
      [&] {
        swiglu_forward(cpu_ctx(), view(out, {2, 8}), view(inp, {2, 8}));
      },
      {"swiglu_forward", "'out'", "(2, 8)", "(2, 4)"});

  std::vector<float> qkv(1 * 2 * 40), rot(1 * 2 * 40), freq(4);
  // n_head 3 + 2 * n_kv_head 1 = 5 heads of 8: the head size is 8, inv_freq must be (4).
  expect_error(
      [&] {
        rope_forward(cpu_ctx(), view(rot, {1, 2, 40}), view(qkv, {1, 2, 40}), view(freq, {4}), 4,
                     2);
      },
      {"rope_forward", "'inp'", "(1, 2, 40)", "(n_head + 2*n_kv_head) * HS = 8 * HS"});
  expect_error(
      [&] {
        rope_forward(cpu_ctx(), view(rot, {1, 2, 40}), view(qkv, {1, 2, 40}), view(freq, {4}), 3,
                     2);
      },
      {"rope_forward", "n_head=3", "n_kv_head=2", "dividing"});
  std::vector<float> freq3(3);
  expect_error(
      [&] {
        rope_backward(cpu_ctx(), view(rot, {1, 2, 40}), view(qkv, {1, 2, 40}), view(freq3, {3}), 3,
                      1);
      },
      {"rope_backward", "'inv_freq'", "(3)", "(4)"});
}

TEST(OpErrors, WrongDtypeAndUndefinedTensor) {
  std::vector<float> tokens_f(6), wte(5 * 4), wpe(3 * 4), out(6 * 4);
  expect_error(
      [&] {
        embedding_forward(cpu_ctx(), view(out, {2, 3, 4}), view(tokens_f, {2, 3}),
                          view(wte, {5, 4}), view(wpe, {3, 4}));
      },
      {"embedding_forward", "'tokens'", "dtype f32", "i32"});
  std::vector<float> in(4);
  expect_error([&] { gelu_forward(cpu_ctx(), Tensor{}, view(in, {4})); },
               {"gelu_forward", "'out'", "undefined"});
}

TEST(OpErrors, BadTokensTargetsAndSequenceLength) {
  std::vector<int32_t> tokens = {0, 1, 5, 2, 3, 4};
  std::vector<float> wte(5 * 4), wpe(3 * 4), out(6 * 4);
  expect_error(
      [&] {
        embedding_forward(cpu_ctx(), view(out, {2, 3, 4}), view(tokens, {2, 3}), view(wte, {5, 4}),
                          view(wpe, {3, 4}));
      },
      {"token id 5", "(b=0, t=2)", "vocabulary [0, 5)"});
  std::vector<float> wpe_short(2 * 4);
  expect_error(
      [&] {
        embedding_forward(cpu_ctx(), view(out, {2, 3, 4}), view(tokens, {2, 3}), view(wte, {5, 4}),
                          view(wpe_short, {2, 4}));
      },
      {"sequence length T=3", "max_seq_len=2"});

  std::vector<float> logits(2 * 5), losses(2);
  std::vector<int32_t> targets = {1, 7};
  expect_error(
      [&] {
        crossentropy_forward(cpu_ctx(), view(losses, {2}), view(logits, {2, 5}),
                             view(targets, {2}));
      },
      {"crossentropy_forward", "target id 7", "row 1"});
}

TEST(OpErrors, BadHeadsAndDropoutProbability) {
  const int B = 1, T = 2, C = 6;
  std::vector<float> qkv(B * T * 3 * C), out(B * T * C), lse(B * 4 * T);
  expect_error(
      [&] {
        attention_forward(cpu_ctx(), view(out, {B, T, C}), view(lse, {B, 4, T}),
                          view(qkv, {B, T, 3 * C}), 4, DropoutSpec{});
      },
      {"attention_forward", "n_head=4", "divide C=6"});
  // Grouped-query: n_kv_head must divide n_head, and qkv's last dim is (NH + 2*NKV) * HS.
  std::vector<float> gqkv(B * T * 40), gout(B * T * 24), glse(B * 6 * T);
  expect_error(
      [&] {
        attention_forward(cpu_ctx(), view(gout, {B, T, 24}), view(glse, {B, 6, T}),
                          view(gqkv, {B, T, 40}), 6, 4, DropoutSpec{});
      },
      {"attention_forward", "n_head=6", "n_kv_head=4", "dividing"});
  expect_error(
      [&] {
        attention_forward(cpu_ctx(), view(gout, {B, T, 24}), view(glse, {B, 6, T}),
                          view(gqkv, {B, T, 40}), 6, 3, DropoutSpec{});
      },
      {"attention_forward", "'qkv'", "(1, 2, 40)", "(n_head + 2*n_kv_head) * HS = 12 * HS"});
  std::vector<float> gqkv48(B * T * 48);  // NH 6, NKV 3, HS 4: out must be (1, 2, 24)
  expect_error(
      [&] {
        attention_forward(cpu_ctx(), view(out, {B, T, C}), view(glse, {B, 6, T}),
                          view(gqkv48, {B, T, 48}), 6, 3, DropoutSpec{});
      },
      {"attention_forward", "'out'", "(1, 2, 6)", "(1, 2, 24)", "n_head * HS"});
  // lse is f32 (B,NH,T).
  std::vector<float> lse_wrong(B * 2 * T * T);
  expect_error(
      [&] {
        attention_forward(cpu_ctx(), view(out, {B, T, C}), view(lse_wrong, {B, 2, T, T}),
                          view(qkv, {B, T, 3 * C}), 2, DropoutSpec{});
      },
      {"attention_forward", "'lse'", "(B,NH,T)"});
  std::vector<float> x(8), y(8);
  expect_error(
      [&] {
        dropout_forward(cpu_ctx(), view(y, {8}), view(x, {8}), DropoutSpec{1.0f, 0, 0});
      },
      {"dropout_forward", "probability 1", "[0, 1)"});
}

TEST(OpErrors, CudaWithoutAGpuIsAClearError) {
  std::vector<float> x(8), y(8);
  // Without a GPU (or without CUDA in the build) making a CUDA context fails with a hint.
  if (!cuda_available())
    expect_error([&] { make_op_context(Device::cuda(0)); }, {"make_op_context", "device=cpu"});
  // A default context labelled CUDA has no stream or handles: caught before anything runs
  // (no kernel is launched on these host pointers, GPU or not).
  OpContext ctx;
  ctx.device = Device::cuda(0);
  Tensor tx(x.data(), {8}, DType::F32, Device::cuda(0)),
      ty(y.data(), {8}, DType::F32, Device::cuda(0));
#ifdef TIDE_HAVE_CUDA
  expect_error([&] { gelu_forward(ctx, ty, tx); },
               {"gelu_forward", "cuda:0", "no CUDA stream or handles", "make_op_context"});
#else
  expect_error([&] { gelu_forward(ctx, ty, tx); }, {"gelu_forward", "no CUDA kernels"});
#endif
  // A CPU tensor given to a CUDA op is caught before anything runs.
  expect_error([&] { gelu_forward(ctx, ty, view(x, {8})); }, {"'inp'", "is on cpu", "cuda:0"});
}

TEST(OpContexts, CpuContextHasNoStreamOrHandles) {
  Arena scratch("scratch", 1024);
  const OpContext ctx = make_op_context(Device::cpu(), &scratch);
  EXPECT_TRUE(ctx.device.is_cpu());
  EXPECT_EQ(ctx.scratch, &scratch);
  EXPECT_EQ(ctx.stream, nullptr);
  EXPECT_EQ(ctx.handles, nullptr);
  std::vector<float> x = {-1.0f, 2.0f}, y(2);
  gelu_forward(ctx, view(y, {2}), view(x, {2}));  // runs on the CPU
  EXPECT_GT(y[1], 1.9f);
}
