// Tensor parallelism's own CUDA kernels (kernels/cuda/tensor_parallel.cu) against their CPU
// kernels, through the host functions the model calls (model/vocab_parallel.h, and
// BlockEnv::to_shard / to_full for sequence parallelism's row permutation): each case runs on
// the CPU and twice on the GPU, on the same inputs, and every tensor is compared, in f32, bf16
// and f16 storage:
// - bitwise (tol 0) where the GPU does the CPU's f32 operations in its order: the embedding's
//   lookup, scatter-add (sorted runs in ascending position) and position add and gradient, the
//   permutation, and the cross-entropy's maxima;
// - else within the case's tolerance (|gpu - cpu| <= tol * (|cpu| + rms(cpu))): the
//   cross-entropy's sums of exp (double, another order; CUDA's exp and log) at 1e-6, its
//   gradient (CUDA's expf) at 1e-5, plus one step of the storage type for a 16-bit result,
//   which moreover carries the CPU's bits in all but 1% of its elements (both round the same
//   f32 value once);
// - GPU run 1 against run 2: bitwise (no float atomics).
// A rank of t > 1 runs against PeerStandIn, a group in which this process is rank r and the
// other ranks' contributions are fixed: zeros to a reduction, a known pattern to a gather, so
// the collectives between the kernels give the same inputs to both devices.
//
// Everything on the GPU is skipped when no GPU is visible; TpCases.* run everywhere.

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "error_of.h"
#include "op_cases.h"
#include "tide/comm/local_process_group.h"
#include "tide/comm/process_group.h"
#include "tide/core/arena.h"
#include "tide/core/device.h"
#include "tide/core/dtype.h"
#include "tide/core/error.h"
#include "tide/kernels/cuda/cuda_check.h"
#include "tide/kernels/mover.h"
#include "tide/kernels/ops.h"
#include "tide/memory/allocator.h"
#include "tide/model/block.h"
#include "tide/model/vocab_parallel.h"

using namespace tide;
using namespace tide::testing;

namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU visible: this test needs one"

// ---- the other ranks, stood in for ----------------------------------------------------------

// Rank `rank` of `size`, whose peers add zeros to every reduction and gather the pattern
// peer_value(q, i) (rank q's element i, in the buffer's dtype). Host or device buffers; a device
// call finishes before it returns (the callers waited for the stream before it).
class PeerStandIn final : public ProcessGroup {
 public:
  PeerStandIn(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "peer-stand-in"; }

  // Within the range of the cases' logit maxima (3 x normal): some peers' maxima are above
  // this rank's, some below.
  static float peer_value(int q, int64_t i) { return 9.0f * std::sin(0.7f * i + 1.3f * q); }

  WorkPtr all_reduce_async(Tensor, ReduceOp) override { return done(); }  // + zeros
  WorkPtr reduce_scatter_async(Tensor in, Tensor out, ReduceOp) override {
    comm_check::reduce_scatter_sizes(in, out, size_);
    move(out.data, at(in, rank_ * out.numel()), out.nbytes(), out.device);
    return done();
  }
  WorkPtr all_gather_async(Tensor in, Tensor out) override {
    comm_check::all_gather_sizes(in, out, size_);
    const int64_t k = in.numel();
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) {
        move(at(out, q * k), in.data, in.nbytes(), out.device);
        continue;
      }
      std::vector<float> f(static_cast<size_t>(k));
      for (int64_t i = 0; i < k; ++i) f[i] = peer_value(q, i);
      std::vector<char> bytes(in.nbytes());
      convert_elements(f.data(), DType::F32, bytes.data(), out.dtype, k);
      move(at(out, q * k), bytes.data(), bytes.size(), out.device, /*from_host=*/true);
    }
    return done();
  }
  WorkPtr broadcast_async(Tensor, int) override { unused("broadcast"); }
  WorkPtr send_async(Tensor, int, int) override { unused("send"); }
  WorkPtr recv_async(Tensor, int, int) override { unused("recv"); }
  WorkPtr barrier_async() override { return done(); }
  std::shared_ptr<ProcessGroup> split(int, int) override { unused("split"); }

 private:
  static WorkPtr done() { return std::make_shared<CompletedWork>(); }
  [[noreturn]] static void unused(const char* what) {
    TIDE_FAIL("PeerStandIn: {} is not used by the code under test", what);
  }
  static void* at(const Tensor& t, int64_t element) {
    return static_cast<char*>(t.data) + element * static_cast<int64_t>(dtype_size(t.dtype));
  }
  // A blocking copy into `device` memory (or host memory), from device memory or the host.
  static void move(void* dst, const void* src, size_t bytes, Device device,
                   bool from_host = false) {
    if (!device.is_cuda()) {
      std::memcpy(dst, src, bytes);
      return;
    }
    TIDE_CUDA_CHECK(
        cudaMemcpy(dst, src, bytes, from_host ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice));
    TIDE_CUDA_CHECK(cudaDeviceSynchronize());  // a device-to-device copy may return early
  }
  int rank_, size_;
};

// ---- cases ----------------------------------------------------------------------------------

struct TpCase {
  OpCase op;                       // name, tensors, run, tol (0: bitwise)
  std::vector<std::string> exact;  // tensors held bitwise even where tol > 0
  std::vector<std::string> stats;  // f32 in every storage (the cross-entropy's statistics)
};

// Scratch for a case's run: on the GPU device memory, else the host heap.
Allocator* allocator_for(const OpContext& ctx) {
  static std::unique_ptr<Allocator> gpu;
  if (!ctx.device.is_cuda()) return nullptr;
  if (!gpu) gpu = make_cuda_allocator(ctx.device);
  return gpu.get();
}

HostTensor filled(const std::string& name, Shape shape, float lo, float hi, uint64_t seed) {
  HostTensor t = randn(name, shape, seed);
  for (float& x : t.f) x = lo + (hi - lo) * (0.5f + 0.5f * std::tanh(x));
  return t;
}

std::vector<TpCase> embedding_cases() {
  std::vector<TpCase> cases;
  // rank 1 of 3: rows [13, 26) of a 39-token vocabulary (most tokens are other ranks').
  for (auto [B, T, C, rows, v0, vocab] : {std::array<int64_t, 6>{3, 17, 40, 13, 13, 39},
                                          std::array<int64_t, 6>{4, 64, 96, 300, 600, 900}}) {
    const std::string shape = fmt::format(" B{} T{} C{} rows{} v0 {}", B, T, C, rows, v0);
    cases.push_back({{"vocab_parallel_embedding_forward" + shape,
                      {randn("out", {B, T, C}, 1), ids("tokens", {B, T}, int32_t(vocab), 2),
                       randn("wte_shard", {rows, C}, 3)},
                      [v0, vocab](const OpContext& ctx, const std::vector<Tensor>& v) {
                        vocab_parallel_embedding_forward(ctx, v[0], v[1], v[2], v0, vocab);
                      },
                      0.0},
                     {},
                     {}});
    // Gradients start random: the kernel adds to them; tokens repeat (several rows per run).
    cases.push_back({{"vocab_parallel_embedding_backward" + shape,
                      {randn("dwte_shard", {rows, C}, 4), randn("dout", {B, T, C}, 5),
                       ids("tokens", {B, T}, int32_t(vocab), 6)},
                      [v0](const OpContext& ctx, const std::vector<Tensor>& v) {
                        vocab_parallel_embedding_backward(ctx, v[0], v[1], v[2], v0);
                      },
                      0.0},
                     {},
                     {}});
  }
  cases.push_back({{"add_position_embedding B2 T9 C24 pos0 9",
                    {randn("out", {2, 9, 24}, 7), randn("wpe", {32, 24}, 8)},
                    [](const OpContext& ctx, const std::vector<Tensor>& v) {
                      add_position_embedding(ctx, v[0], v[1], 9);
                    },
                    0.0},
                   {},
                   {}});
  cases.push_back({{"position_embedding_backward B3 T9 C24",
                    {randn("dwpe", {9, 24}, 9), randn("dout", {3, 9, 24}, 10)},
                    [](const OpContext& ctx, const std::vector<Tensor>& v) {
                      position_embedding_backward(ctx, v[0], v[1]);
                    },
                    0.0},
                   {},
                   {}});
  return cases;
}

std::vector<TpCase> crossentropy_cases() {
  std::vector<TpCase> cases;
  // (B, T, this rank's columns V, rank, ranks): the forward over a local group (t = 1) and as
  // rank 1 of 3 (the gathered maxima of two stood-in ranks, some above this rank's).
  for (auto [B, T, V, rank, world] :
       {std::array<int64_t, 5>{2, 13, 301, 0, 1}, std::array<int64_t, 5>{2, 13, 301, 1, 3},
        std::array<int64_t, 5>{1, 4, 12565, 3, 4}}) {
    const int64_t v0 = rank * V, vocab = world * V;
    const std::string shape = fmt::format(" B{} T{} V{} rank {} of {}", B, T, V, rank, world);
    cases.push_back(
        {{"vocab_parallel_crossentropy_forward" + shape,
          {zeros("losses", {B, T}), zeros("max", {B, T}), zeros("sum", {B, T}),
           randn("logits", {B, T, V}, 11, 3.0f), ids("targets", {B, T}, int32_t(vocab), 12, 5)},
          [v0, rank, world, N = B * T](const OpContext& ctx, const std::vector<Tensor>& v) {
            std::unique_ptr<ProcessGroup> tp;
            if (world == 1)
              tp = std::make_unique<LocalProcessGroup>();
            else
              tp = std::make_unique<PeerStandIn>(int(rank), int(world));
            Arena scratch("cross-entropy scratch",
                          vocab_parallel_crossentropy_scratch(N, int(world)), allocator_for(ctx));
            vocab_parallel_crossentropy_forward(ctx, *tp, v[0], v[1], v[2], v[3], v[4], v0,
                                                scratch);
            synchronize(ctx);  // before the scratch goes
          },
          1e-6},
         {"max"},
         {"losses", "max", "sum"}});
    // The backward from statistics of the forward's kind: max near the row's, sum ~ V.
    for (bool in_place : {true, false}) {
      std::vector<HostTensor> ts = {
          randn("logits", {B, T, V}, 13, 3.0f), ids("targets", {B, T}, int32_t(vocab), 14, 5),
          filled("max", {B, T}, 6.0f, 9.0f, 15), filled("sum", {B, T}, 1.0f, float(V), 16)};
      if (!in_place) ts.push_back(randn("dlogits", {B, T, V}, 17));  // overwritten whole
      cases.push_back({{std::string("vocab_parallel_crossentropy_backward") +
                            (in_place ? " in place" : "") + shape,
                        ts,
                        [v0, in_place](const OpContext& ctx, const std::vector<Tensor>& v) {
                          vocab_parallel_crossentropy_backward(ctx, in_place ? v[0] : v[4], v[0],
                                                               v[1], v[2], v[3], v0, 0.0625f);
                        },
                        1e-5},
                       {},
                       {"max", "sum"}});
    }
  }
  return cases;
}

// Sequence parallelism's permutation, through BlockEnv as the blocks use it: to_shard (whole ->
// rank-major, then the reduce-scatter keeps rank r's rows) and to_full (the all-gather, then
// rank-major -> whole). Each rank r of t sees another part of the permutation.
std::vector<TpCase> permutation_cases() {
  std::vector<TpCase> cases;
  for (auto [t, r] :
       {std::array<int, 2>{2, 1}, std::array<int, 2>{3, 0}, std::array<int, 2>{3, 2}}) {
    const int64_t B = 2, Ts = 5, C = 24;
    auto env_of = [](const OpContext& ctx, PeerStandIn& tp) {
      BlockEnv env;
      env.op = ctx;
      env.tp = &tp;
      env.sp = true;
      return env;
    };
    const std::string shape = fmt::format(" B{} Ts{} C{} rank {} of {}", B, Ts, C, r, t);
    cases.push_back({{"sequence-parallel to_shard" + shape,
                      {randn("full", {B, t * Ts, C}, 18), randn("shard", {B, Ts, C}, 19)},
                      [=](const OpContext& ctx, const std::vector<Tensor>& v) {
                        PeerStandIn tp(r, t);
                        const BlockEnv env = env_of(ctx, tp);
                        Arena a("permutation", 4 * v[0].nbytes(), allocator_for(ctx));
                        copy(ctx, v[1], env.to_shard(v[0], a, a));
                        synchronize(ctx);
                      },
                      0.0},
                     {},
                     {}});
    cases.push_back({{"sequence-parallel to_full" + shape,
                      {randn("shard", {B, Ts, C}, 20), randn("full", {B, t * Ts, C}, 21)},
                      [=](const OpContext& ctx, const std::vector<Tensor>& v) {
                        PeerStandIn tp(r, t);
                        const BlockEnv env = env_of(ctx, tp);
                        Arena a("permutation", 4 * v[1].nbytes(), allocator_for(ctx));
                        copy(ctx, v[1], env.to_full(v[0], a, a));
                        synchronize(ctx);
                      },
                      0.0},
                     {},
                     {}});
  }
  return cases;
}

std::vector<TpCase> all_cases() {
  std::vector<TpCase> all;
  for (auto&& part : {embedding_cases(), crossentropy_cases(), permutation_cases()})
    all.insert(all.end(), part.begin(), part.end());
  return all;
}

// The case with its float tensors in `dtype`, the statistics kept f32.
TpCase in_storage(const TpCase& c, DType dtype) {
  TpCase n = c;
  n.op.name += " " + std::string(dtype_name(dtype));
  for (HostTensor& t : n.op.tensors)
    if (t.dtype == DType::F32 && std::find(c.stats.begin(), c.stats.end(), t.name) == c.stats.end())
      t = narrowed(t, dtype);
  return n;
}

// ---- running and comparing -----------------------------------------------------------------

std::vector<HostTensor> run_on_cpu(const TpCase& c) {
  std::vector<HostTensor> out = c.op.tensors;
  c.op.run(OpContext{}, host_views(out));
  return out;
}

std::vector<HostTensor> run_on_gpu(const TpCase& c) {
  std::vector<HostTensor> out = c.op.tensors;
  std::vector<void*> ptrs;
  std::vector<Tensor> views;
  for (HostTensor& t : out) {
    void* p = nullptr;
    TIDE_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(t.bytes(), 1)));
    TIDE_CUDA_CHECK(cudaMemcpy(p, t.data(), t.bytes(), cudaMemcpyHostToDevice));
    ptrs.push_back(p);
    views.emplace_back(p, t.shape, t.dtype, Device::cuda(0));
  }
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());  // the uploads, before the context's stream reads
  const OpContext ctx = make_op_context(Device::cuda(0));
  c.op.run(ctx, views);
  synchronize(ctx);
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());  // also surfaces faults inside the kernels
  for (size_t i = 0; i < out.size(); ++i) {
    TIDE_CUDA_CHECK(cudaMemcpy(out[i].data(), ptrs[i], out[i].bytes(), cudaMemcpyDeviceToHost));
    TIDE_CUDA_CHECK(cudaFree(ptrs[i]));
  }
  return out;
}

bool is_16_bit(DType t) {
  return t == DType::BF16 || t == DType::F16;
}
// One step of a 16-bit storage type relative to the value (eps = 2^-7 bf16, 2^-10 f16); 0 for f32.
double ulp_of(DType t) {
  return t == DType::BF16 ? std::ldexp(1.0, -7) : t == DType::F16 ? std::ldexp(1.0, -10) : 0.0;
}
HostTensor as_f32(const HostTensor& t) {
  return is_16_bit(t.dtype) ? widened(t) : t;
}

void check_case(const TpCase& c) {
  SCOPED_TRACE(c.op.name);
  const std::vector<HostTensor> cpu = run_on_cpu(c), gpu1 = run_on_gpu(c), gpu2 = run_on_gpu(c);
  for (size_t i = 0; i < cpu.size(); ++i) {
    const std::string what = c.op.name + " tensor '" + cpu[i].name + "'";
    const bool exact =
        c.op.tol == 0.0 || std::find(c.exact.begin(), c.exact.end(), cpu[i].name) != c.exact.end();
    if (exact)
      expect_bitwise(what, gpu1[i], cpu[i]);
    else  // a 16-bit result within one step of its storage more (the two may round apart)
      expect_close(what, as_f32(gpu1[i]), as_f32(cpu[i]), c.op.tol + ulp_of(cpu[i].dtype));
    expect_bitwise(what + " (GPU run 1 vs 2)", gpu1[i], gpu2[i]);
    if (exact || !is_16_bit(cpu[i].dtype)) continue;
    int64_t differing = 0;
    for (size_t k = 0; k < cpu[i].h.size(); ++k) differing += gpu1[i].h[k] != cpu[i].h[k];
    const auto n = static_cast<int64_t>(cpu[i].h.size());
    EXPECT_LE(differing, std::max<int64_t>(2, n / 100)) << what << ": of " << n << " elements";
  }
}

void check_all_in(DType dtype) {
  for (const TpCase& c : all_cases()) check_case(dtype == DType::F32 ? c : in_storage(c, dtype));
}

}  // namespace

// Every case is well formed and its CPU kernel deterministic, and it changes what it writes
// (a case whose run did nothing would compare equal on both devices).
TEST(TpCases, RunOnTheCpu) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (const TpCase& c0 : all_cases()) {
      const TpCase c = dtype == DType::F32 ? c0 : in_storage(c0, dtype);
      SCOPED_TRACE(c.op.name);
      const std::vector<HostTensor> a = run_on_cpu(c), b = run_on_cpu(c);
      bool changed = false;
      for (size_t i = 0; i < a.size(); ++i) {
        expect_bitwise(c.op.name + " tensor '" + a[i].name + "'", a[i], b[i]);
        changed = changed || std::memcmp(a[i].data(), c.op.tensors[i].data(), a[i].bytes()) != 0;
      }
      EXPECT_TRUE(changed) << c.op.name << " wrote nothing";
    }
  }
}

// A tensor off the context's device is named in the error (checked before any kernel runs).
TEST(TpCases, ATensorOffTheContextsDeviceIsAClearError) {
  std::vector<float> buf(64);
  std::vector<int32_t> tok(4);
  const Tensor out(buf.data(), {1, 4, 8}, DType::F32, Device::cuda(0)),
      tokens(tok.data(), {1, 4}, DType::I32), wte(buf.data(), {4, 8});
  const std::string e = test::error_of(
      [&] { vocab_parallel_embedding_forward(OpContext{}, out, tokens, wte, 0, 8); });
  EXPECT_NE(e.find("vocab_parallel_embedding_forward: tensor 'out' is on cuda:0 but the op runs "
                   "on cpu"),
            std::string::npos)
      << e;
}

TEST(CudaTensorParallel, EveryCaseInF32) {
  SKIP_WITHOUT_GPU();
  check_all_in(DType::F32);
}

TEST(CudaTensorParallel, EveryCaseInBf16) {
  SKIP_WITHOUT_GPU();
  check_all_in(DType::BF16);
}

TEST(CudaTensorParallel, EveryCaseInF16) {
  SKIP_WITHOUT_GPU();
  check_all_in(DType::F16);
}

// The mixes 16-bit training calls: f32 parameter gradients beside 16-bit activations (the
// embedding's). (The cross-entropy's f32 logits and their gradient in place are its f32 case.)
TEST(CudaTensorParallel, EveryMixOf16BitTraining) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::BF16, DType::F16})
    for (const TpCase& c : all_cases()) {
      const std::string op = c.op.name.substr(0, c.op.name.find(' '));
      std::vector<std::string> keep;  // the tensors left f32
      if (op == "vocab_parallel_embedding_backward") keep = {"dwte_shard"};
      if (op == "position_embedding_backward") keep = {"dwpe"};
      if (keep.empty()) continue;
      TpCase m = c;
      m.stats.insert(m.stats.end(), keep.begin(), keep.end());
      m = in_storage(m, dtype);
      m.op.name += " with f32 " + keep[0];
      check_case(m);
    }
}
