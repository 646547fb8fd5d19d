// The op API's front door: every op checks its tensors (defined, dtype, device, shape) once,
// here, with a message that names the op and the tensor, then dispatches on the device.
// The kernels behind it (cpu::, cuda::) trust their arguments.
#include "tide/kernels/ops.h"

#include <array>
#include <cmath>
#include <string>
#include <utility>

#include "tide/core/cuda_module.h"
#include "tide/core/error.h"
#include "tide/core/sim_device.h"
#include "tide/kernels/cpu/cpu_ops.h"
#include "tide/kernels/cpu/f32_buffer.h"
#include "tide/kernels/cuda_table.h"

namespace tide {

namespace {

// The dtypes a tensor may have: exactly one, or (kFloat) any float storage: f32, bf16 or f16.
// The CPU kernels compute in f32 whatever the storage (cpu::F32Buffer), each tensor on its
// own. A device's kernels are compiled per storage type: there the kFloat tensors of one call
// share one dtype, and a kOwnFloat tensor keeps its own (the kernel is told it): the mixes of
// 16-bit training, f32 logits and their gradient beside 16-bit operands, f32 parameter
// gradients beside 16-bit activations.
struct DTypeRule {
  DType dtype = DType::F32;
  bool any_float = false;
  bool own = false;
  DTypeRule(DType d) : dtype(d) {}  // NOLINT(google-explicit-constructor): "exactly d"
  constexpr DTypeRule(DType d, bool any, bool own_dtype = false)
      : dtype(d), any_float(any), own(own_dtype) {}
  bool allows(DType d) const {
    return any_float ? d == DType::F32 || d == DType::BF16 || d == DType::F16 : d == dtype;
  }
  std::string str() const {
    return any_float ? "a float type (f32, bf16 or f16)" : std::string(dtype_name(dtype));
  }
};
constexpr DTypeRule kFloat{DType::F32, true};
constexpr DTypeRule kOwnFloat{DType::F32, true, true};
// The tensors that keep their own dtype on a device, for the messages.
constexpr const char* kOwnDTypes =
    "a matmul's output, its output gradient and its weight and bias gradients, and the "
    "weight gradients of layernorm, rmsnorm and the embedding keep their own";

// Checks of one op call; every message starts with the op name.
struct OpCheck {
  const char* op;
  const OpContext& ctx;
  // On a device: the dtype of the kFloat tensors (the first one checked, named here).
  mutable DType storage_ = DType::F32;
  mutable const char* storage_of_ = nullptr;

  DType storage() const { return storage_; }

  // t must be allocated, of a dtype `rule` allows, and on the op's device.
  void tensor(const Tensor& t, const char* name, DTypeRule rule) const {
    TIDE_CHECK(t.defined(), "{}: tensor '{}' is undefined (null data); pass an allocated buffer",
               op, name);
    TIDE_CHECK(rule.allows(t.dtype),
               "{}: tensor '{}' has dtype {} but {} is required; convert it first", op, name,
               dtype_name(t.dtype), rule.str());
    // A CUDA kernel is compiled per storage type, not per mix (cuda/cuda_ops.h): the kFloat
    // tensors of one call share the first one's dtype. The simulated device keeps the same
    // rule, so that its runs (CI's) meet every mix a GPU would refuse.
    if (!ctx.device.is_cpu() && rule.any_float && !rule.own) {
      if (storage_of_ == nullptr) {
        storage_ = t.dtype;
        storage_of_ = name;
      }
      TIDE_CHECK(t.dtype == storage_,
                 "{}: tensor '{}' is {} but tensor '{}' is {}; on a device the operands of one "
                 "op share one dtype (the statistics stay f32; {}): convert one of them first",
                 op, name, dtype_name(t.dtype), storage_of_, dtype_name(storage_), kOwnDTypes);
    }
    TIDE_CHECK(t.device == ctx.device,
               "{}: tensor '{}' is on {} but the op runs on {}; move the tensor or run the op "
               "with a context for {}",
               op, name, t.device.str(), ctx.device.str(), t.device.str());
  }
  // ... and have exactly the shape `expected` (derived from other tensors: `why` says how).
  void tensor(const Tensor& t, const char* name, DTypeRule rule, const Shape& expected,
              const char* why) const {
    tensor(t, name, rule);
    TIDE_CHECK(t.shape == expected, "{}: tensor '{}' has shape {} but {} is expected ({})", op,
               name, t.shape.str(), expected.str(), why);
  }
  // ... or, for per-row vectors such as mean(N), exactly `n` elements in any shape.
  void tensor_numel(const Tensor& t, const char* name, DTypeRule rule, int64_t n,
                    const char* why) const {
    tensor(t, name, rule);
    TIDE_CHECK(t.numel() == n,
               "{}: tensor '{}' has shape {} ({} elements) but {} elements are "
               "expected ({})",
               op, name, t.shape.str(), t.numel(), n, why);
  }
  // On a device: two kOwnFloat tensors that the kernel takes in one dtype (a weight's and a
  // bias's gradient).
  void same_dtype(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) const {
    TIDE_CHECK(ctx.device.is_cpu() || a.dtype == b.dtype,
               "{}: tensor '{}' is {} but tensor '{}' is {}; on a device they share one dtype: "
               "convert one of them first",
               op, a_name, dtype_name(a.dtype), b_name, dtype_name(b.dtype));
  }
  void rank(const Tensor& t, const char* name, int min_ndim, const char* layout) const {
    TIDE_CHECK(t.ndim() >= min_ndim, "{}: tensor '{}' has shape {} but must be {}", op, name,
               t.shape.str(), layout);
  }
  void rank_exact(const Tensor& t, const char* name, int ndim, const char* layout) const {
    TIDE_CHECK(t.ndim() == ndim, "{}: tensor '{}' has shape {} but must be {}", op, name,
               t.shape.str(), layout);
  }
  // The context was made by make_op_context for a CUDA device (which checked, once, that the
  // GPU is visible and made it current): a pointer test, no device query per op.
  void cuda_context() const {
    if (!cuda_built()) no_cuda();
    TIDE_CHECK(ctx.handles != nullptr && ctx.cuda != nullptr,
               "{}: the context says {} but has no CUDA stream or handles; make it with "
               "make_op_context(Device::cuda({}), ...) (a default OpContext is for the CPU)",
               op, ctx.device.str(), ctx.device.index);
  }
  void sim_context() const {
    TIDE_CHECK(ctx.sim != nullptr,
               "{}: the context says {} but has no stream; make it with "
               "make_op_context(Device::sim({}), ...) (a default OpContext is for the CPU)",
               op, ctx.device.str(), ctx.device.index);
  }
  [[noreturn]] void no_cuda() const {
    TIDE_FAIL(
        "{}: this build of tide has no CUDA kernels (nvcc was not found when it was "
        "configured); run with device=cpu, or rebuild with the CUDA toolkit installed",
        op);
  }
};

// TIDE_RUN_ON_CUDA(ck, ctx.cuda->op(...)): on a CUDA context, runs the CUDA module's kernel
// (cuda/cuda_ops.h, through the table make_op_context put in the context) and returns from the
// op; builds without CUDA fail with ck.no_cuda() instead.
#define TIDE_RUN_ON_CUDA(ck, call) \
  if ((ck).ctx.device.is_cuda()) { \
    (ck).cuda_context();           \
    call;                          \
    return;                        \
  }

// Runs a CPU kernel: now on the CPU; on the simulated device, queued on the context's stream
// (the lambda holds the tensors by value, so it outlives the op's arguments).
template <class Kernel>
void run_cpu_kernel(const OpCheck& ck, Kernel&& kernel) {
  if (ck.ctx.device.is_sim()) {
    ck.sim_context();
    ck.ctx.sim->enqueue(std::forward<Kernel>(kernel));
    return;
  }
  kernel();
}

// The shape of t without its last dimension: (B,T,C) -> (B,T).
Shape leading(const Tensor& t) {
  Shape s = t.shape;
  s.ndim -= 1;
  return s;
}
// The shape of t with its last dimension replaced by `last`.
Shape with_last(const Tensor& t, int64_t last) {
  Shape s = t.shape;
  s.dims[s.ndim - 1] = last;
  return s;
}
int64_t rows(const Tensor& t) {
  return t.numel() / t.dim(-1);
}
int as_int(int64_t x) {
  return static_cast<int>(x);
}

}  // namespace

OpContext make_op_context(Device device, Arena* scratch, int threads) {
  if (!device.is_cuda()) {
    OpContext ctx;
    ctx.device = device;
    ctx.scratch = scratch;
    if (device.is_sim()) ctx.sim = std::make_shared<SimStream>(device, threads);
    return ctx;
  }
  const auto& kernels = cuda_module_table<CudaKernelTable>(
      "tide_cuda_kernels", fmt::format("make_op_context: {} was asked for", device.str()));
  OpContext ctx = kernels.make_context(device.index, scratch, /*copies_only=*/false);
  ctx.cuda = &kernels;
  return ctx;
}

void run_cpu_kernel_on(const OpContext& ctx, const char* what, std::function<void()> kernel) {
  const OpCheck ck{what, ctx};
  TIDE_CHECK(!ctx.device.is_cuda(),
             "{} on {}: it has no CUDA kernel yet (it runs on the CPU and the simulated device); "
             "run with device=cpu",
             what, ctx.device.str());
  run_cpu_kernel(ck, std::move(kernel));
}

// ---- embedding -------------------------------------------------------------------------

void embedding_forward(const OpContext& ctx, Tensor out, Tensor tokens, Tensor wte, Tensor wpe) {
  const OpCheck ck{"embedding_forward", ctx};
  ck.rank_exact(tokens, "tokens", 2, "(B,T)");
  ck.tensor(tokens, "tokens", DType::I32);
  ck.rank_exact(wte, "wte", 2, "(V,C)");
  ck.tensor(wte, "wte", kFloat);
  const int64_t B = tokens.dim(0), T = tokens.dim(1), V = wte.dim(0), C = wte.dim(1);
  ck.rank_exact(wpe, "wpe", 2, "(max_seq_len,C)");
  ck.tensor(wpe, "wpe", kFloat, Shape{wpe.dim(0), C}, "(max_seq_len,C), C from wte");
  TIDE_CHECK(T <= wpe.dim(0),
             "embedding_forward: sequence length T={} exceeds the {} positions of wpe; use "
             "sequences of at most max_seq_len={} tokens",
             T, wpe.dim(0), wpe.dim(0));
  ck.tensor(out, "out", kFloat, Shape{B, T, C}, "(B,T,C): B,T from tokens, C from wte");
  TIDE_RUN_ON_CUDA(
      ck, ctx.cuda->embedding_forward(ctx, ck.storage(), out.data, tokens.i32(), wte.data, wpe.data,
                                      as_int(B), as_int(T), as_int(C), as_int(V)));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer out_(out, /*widen=*/false), wte_(wte), wpe_(wpe);
    cpu::embedding_forward(out_.get(), tokens.i32(), wte_.get(), wpe_.get(), as_int(B), as_int(T),
                           as_int(C), as_int(V));
    out_.store();
  });
}

void embedding_backward(const OpContext& ctx, Tensor dwte, Tensor dwpe, Tensor dout,
                        Tensor tokens) {
  const OpCheck ck{"embedding_backward", ctx};
  ck.rank_exact(tokens, "tokens", 2, "(B,T)");
  ck.tensor(tokens, "tokens", DType::I32);
  ck.rank_exact(dwte, "dwte", 2, "(V,C)");
  ck.tensor(dwte, "dwte", kOwnFloat);
  const int64_t B = tokens.dim(0), T = tokens.dim(1), V = dwte.dim(0), C = dwte.dim(1);
  ck.rank_exact(dwpe, "dwpe", 2, "(max_seq_len,C)");
  ck.tensor(dwpe, "dwpe", kOwnFloat, Shape{dwpe.dim(0), C}, "(max_seq_len,C), C from dwte");
  ck.same_dtype(dwte, "dwte", dwpe, "dwpe");
  TIDE_CHECK(T <= dwpe.dim(0),
             "embedding_backward: sequence length T={} exceeds the {} positions of dwpe; use "
             "sequences of at most max_seq_len={} tokens",
             T, dwpe.dim(0), dwpe.dim(0));
  ck.tensor(dout, "dout", kFloat, Shape{B, T, C}, "(B,T,C): B,T from tokens, C from dwte");
  TIDE_RUN_ON_CUDA(ck, ctx.cuda->embedding_backward(ctx, ck.storage(), dwte.dtype, dwte.data,
                                                    dwpe.data, dout.data, tokens.i32(), as_int(B),
                                                    as_int(T), as_int(C), as_int(V)));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer dwte_(dwte), dwpe_(dwpe), dout_(dout);
    cpu::embedding_backward(dwte_.get(), dwpe_.get(), dout_.get(), tokens.i32(), as_int(B),
                            as_int(T), as_int(C), as_int(V));
    dwte_.store();
    dwpe_.store();
  });
}

// ---- layernorm -------------------------------------------------------------------------

void layernorm_forward(const OpContext& ctx, Tensor out, Tensor mean, Tensor rstd, Tensor inp,
                       Tensor weight, Tensor bias) {
  const OpCheck ck{"layernorm_forward", ctx};
  ck.rank(inp, "inp", 2, "(N,C) or (B,T,C)");
  ck.tensor(inp, "inp", kFloat);
  const int64_t C = inp.dim(-1), N = rows(inp);
  ck.tensor(out, "out", kFloat, inp.shape, "the shape of inp");
  ck.tensor_numel(mean, "mean", DType::F32, N, "one per row of inp");
  ck.tensor_numel(rstd, "rstd", DType::F32, N, "one per row of inp");
  ck.tensor(weight, "weight", kFloat, Shape{C}, "(C), C the last dim of inp");
  ck.tensor(bias, "bias", kFloat, Shape{C}, "(C), C the last dim of inp");
  TIDE_RUN_ON_CUDA(
      ck, ctx.cuda->layernorm_forward(ctx, ck.storage(), out.data, mean.f32(), rstd.f32(), inp.data,
                                      weight.data, bias.data, N, as_int(C)));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer out_(out, /*widen=*/false), inp_(inp), weight_(weight), bias_(bias);
    cpu::layernorm_forward(out_.get(), mean.f32(), rstd.f32(), inp_.get(), weight_.get(),
                           bias_.get(), N, as_int(C));
    out_.store();
  });
}

void residual_layernorm_forward(const OpContext& ctx, Tensor res, Tensor out, Tensor mean,
                                Tensor rstd, Tensor a, Tensor b, Tensor weight, Tensor bias) {
  const OpCheck ck{"residual_layernorm_forward", ctx};
  ck.rank(a, "a", 2, "(N,C) or (B,T,C)");
  ck.tensor(a, "a", kFloat);
  const int64_t C = a.dim(-1), N = rows(a);
  ck.tensor(b, "b", kFloat, a.shape, "the shape of a");
  ck.tensor(res, "res", kFloat, a.shape, "the shape of a");
  ck.tensor(out, "out", kFloat, a.shape, "the shape of a");
  ck.tensor_numel(mean, "mean", DType::F32, N, "one per row of a");
  ck.tensor_numel(rstd, "rstd", DType::F32, N, "one per row of a");
  ck.tensor(weight, "weight", kFloat, Shape{C}, "(C), C the last dim of a");
  ck.tensor(bias, "bias", kFloat, Shape{C}, "(C), C the last dim of a");
  TIDE_RUN_ON_CUDA(ck, ctx.cuda->residual_layernorm_forward(ctx, ck.storage(), res.data, out.data,
                                                            mean.f32(), rstd.f32(), a.data, b.data,
                                                            weight.data, bias.data, N, as_int(C)));
  // The CPU and the simulated device: the two ops (a CPU row is in cache between them).
  residual_forward(ctx, res, a, b);
  layernorm_forward(ctx, out, mean, rstd, res, weight, bias);
}

void layernorm_backward_input(const OpContext& ctx, Tensor dinp, Tensor dout, Tensor inp,
                              Tensor weight, Tensor mean, Tensor rstd) {
  const OpCheck ck{"layernorm_backward_input", ctx};
  ck.rank(inp, "inp", 2, "(N,C) or (B,T,C)");
  ck.tensor(inp, "inp", kFloat);
  const int64_t C = inp.dim(-1), N = rows(inp);
  ck.tensor(dinp, "dinp", kFloat, inp.shape, "the shape of inp");
  ck.tensor(dout, "dout", kFloat, inp.shape, "the shape of inp");
  ck.tensor(weight, "weight", kFloat, Shape{C}, "(C), C the last dim of inp");
  ck.tensor_numel(mean, "mean", DType::F32, N, "one per row of inp");
  ck.tensor_numel(rstd, "rstd", DType::F32, N, "one per row of inp");
  TIDE_RUN_ON_CUDA(
      ck, ctx.cuda->layernorm_backward_input(ctx, ck.storage(), dinp.data, dout.data, inp.data,
                                             weight.data, mean.f32(), rstd.f32(), N, as_int(C)));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer dinp_(dinp), dout_(dout), inp_(inp), weight_(weight);
    cpu::layernorm_backward_input(dinp_.get(), dout_.get(), inp_.get(), weight_.get(), mean.f32(),
                                  rstd.f32(), N, as_int(C));
    dinp_.store();
  });
}

void layernorm_backward_weight(const OpContext& ctx, Tensor dweight, Tensor dbias, Tensor dout,
                               Tensor inp, Tensor mean, Tensor rstd) {
  const OpCheck ck{"layernorm_backward_weight", ctx};
  ck.rank(inp, "inp", 2, "(N,C) or (B,T,C)");
  ck.tensor(inp, "inp", kFloat);
  const int64_t C = inp.dim(-1), N = rows(inp);
  ck.tensor(dweight, "dweight", kOwnFloat, Shape{C}, "(C), C the last dim of inp");
  ck.tensor(dbias, "dbias", kOwnFloat, Shape{C}, "(C), C the last dim of inp");
  ck.same_dtype(dweight, "dweight", dbias, "dbias");
  ck.tensor(dout, "dout", kFloat, inp.shape, "the shape of inp");
  ck.tensor_numel(mean, "mean", DType::F32, N, "one per row of inp");
  ck.tensor_numel(rstd, "rstd", DType::F32, N, "one per row of inp");
  TIDE_RUN_ON_CUDA(ck, ctx.cuda->layernorm_backward_weight(
                           ctx, ck.storage(), dweight.dtype, dweight.data, dbias.data, dout.data,
                           inp.data, mean.f32(), rstd.f32(), N, as_int(C)));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer dweight_(dweight), dbias_(dbias), dout_(dout), inp_(inp);
    cpu::layernorm_backward_weight(dweight_.get(), dbias_.get(), dout_.get(), inp_.get(),
                                   mean.f32(), rstd.f32(), N, as_int(C));
    dweight_.store();
    dbias_.store();
  });
}

// ---- RMSNorm ---------------------------------------------------------------------------

void rmsnorm_forward(const OpContext& ctx, Tensor out, Tensor rstd, Tensor inp, Tensor weight,
                     float eps) {
  const OpCheck ck{"rmsnorm_forward", ctx};
  ck.rank(inp, "inp", 2, "(N,C) or (B,T,C)");
  ck.tensor(inp, "inp", kFloat);
  const int64_t C = inp.dim(-1), N = rows(inp);
  ck.tensor(out, "out", kFloat, inp.shape, "the shape of inp");
  ck.tensor_numel(rstd, "rstd", DType::F32, N, "one per row of inp");
  ck.tensor(weight, "weight", kFloat, Shape{C}, "(C), C the last dim of inp");
  TIDE_CHECK(std::isfinite(eps) && eps >= 0.0f,
             "rmsnorm_forward: eps={} must be finite and >= 0 (rms_norm_eps, e.g. 1e-5)", eps);
  TIDE_RUN_ON_CUDA(ck, ctx.cuda->rmsnorm_forward(ctx, ck.storage(), out.data, rstd.f32(), inp.data,
                                                 weight.data, N, as_int(C), eps));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer out_(out, /*widen=*/false), inp_(inp), weight_(weight);
    cpu::rmsnorm_forward(out_.get(), rstd.f32(), inp_.get(), weight_.get(), N, as_int(C), eps);
    out_.store();
  });
}

void rmsnorm_backward_input(const OpContext& ctx, Tensor dinp, Tensor dout, Tensor inp,
                            Tensor weight, Tensor rstd) {
  const OpCheck ck{"rmsnorm_backward_input", ctx};
  ck.rank(inp, "inp", 2, "(N,C) or (B,T,C)");
  ck.tensor(inp, "inp", kFloat);
  const int64_t C = inp.dim(-1), N = rows(inp);
  ck.tensor(dinp, "dinp", kFloat, inp.shape, "the shape of inp");
  ck.tensor(dout, "dout", kFloat, inp.shape, "the shape of inp");
  ck.tensor(weight, "weight", kFloat, Shape{C}, "(C), C the last dim of inp");
  ck.tensor_numel(rstd, "rstd", DType::F32, N, "one per row of inp");
  TIDE_RUN_ON_CUDA(
      ck, ctx.cuda->rmsnorm_backward_input(ctx, ck.storage(), dinp.data, dout.data, inp.data,
                                           weight.data, rstd.f32(), N, as_int(C)));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer dinp_(dinp), dout_(dout), inp_(inp), weight_(weight);
    cpu::rmsnorm_backward_input(dinp_.get(), dout_.get(), inp_.get(), weight_.get(), rstd.f32(), N,
                                as_int(C));
    dinp_.store();
  });
}

void rmsnorm_backward_weight(const OpContext& ctx, Tensor dweight, Tensor dout, Tensor inp,
                             Tensor rstd) {
  const OpCheck ck{"rmsnorm_backward_weight", ctx};
  ck.rank(inp, "inp", 2, "(N,C) or (B,T,C)");
  ck.tensor(inp, "inp", kFloat);
  const int64_t C = inp.dim(-1), N = rows(inp);
  ck.tensor(dweight, "dweight", kOwnFloat, Shape{C}, "(C), C the last dim of inp");
  ck.tensor(dout, "dout", kFloat, inp.shape, "the shape of inp");
  ck.tensor_numel(rstd, "rstd", DType::F32, N, "one per row of inp");
  TIDE_RUN_ON_CUDA(
      ck, ctx.cuda->rmsnorm_backward_weight(ctx, ck.storage(), dweight.dtype, dweight.data,
                                            dout.data, inp.data, rstd.f32(), N, as_int(C)));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer dweight_(dweight), dout_(dout), inp_(inp);
    cpu::rmsnorm_backward_weight(dweight_.get(), dout_.get(), inp_.get(), rstd.f32(), N, as_int(C));
    dweight_.store();
  });
}

// ---- linear ----------------------------------------------------------------------------

void matmul_forward(const OpContext& ctx, Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  const OpCheck ck{"matmul_forward", ctx};
  ck.rank(inp, "inp", 2, "(N,C) or (B,T,C)");
  ck.tensor(inp, "inp", kFloat);
  ck.rank_exact(weight, "weight", 2, "(OC,C)");
  const int64_t C = inp.dim(-1), N = rows(inp), OC = weight.dim(0);
  ck.tensor(weight, "weight", kFloat, Shape{OC, C}, "(OC,C), C the last dim of inp");
  if (bias.defined()) ck.tensor(bias, "bias", kFloat, Shape{OC}, "(OC), OC from weight");
  ck.tensor(out, "out", kOwnFloat, with_last(inp, OC), "inp's shape with C replaced by OC");
  TIDE_RUN_ON_CUDA(
      ck, ctx.cuda->matmul_forward(ctx, ck.storage(), out.dtype, out.data, inp.data, weight.data,
                                   bias.defined() ? bias.data : nullptr, N, as_int(C), as_int(OC)));
  run_cpu_kernel(ck, [=] {
    if (cpu::matmul_forward_native(out, inp, weight, bias, N, as_int(C), as_int(OC))) return;
    const cpu::F32Buffer bias_(bias), out_(out, /*widen=*/false), inp_(inp), weight_(weight);
    cpu::matmul_forward(out_.get(), inp_.get(), weight_.get(), bias_.get(), N, as_int(C),
                        as_int(OC));
    out_.store();
  });
}

void matmul_backward_input(const OpContext& ctx, Tensor dinp, Tensor dout, Tensor weight) {
  const OpCheck ck{"matmul_backward_input", ctx};
  ck.rank_exact(weight, "weight", 2, "(OC,C)");
  ck.tensor(weight, "weight", kFloat);
  const int64_t OC = weight.dim(0), C = weight.dim(1);
  ck.rank(dout, "dout", 2, "(N,OC) or (B,T,OC)");
  ck.tensor(dout, "dout", kOwnFloat, with_last(dout, OC), "last dim OC from weight (OC,C)");
  ck.tensor(dinp, "dinp", kFloat, with_last(dout, C), "dout's shape with OC replaced by C");
  TIDE_RUN_ON_CUDA(
      ck, ctx.cuda->matmul_backward_input(ctx, ck.storage(), dout.dtype, dinp.data, dout.data,
                                          weight.data, rows(dout), as_int(C), as_int(OC)));
  run_cpu_kernel(ck, [=] {
    if (cpu::matmul_backward_input_native(dinp, dout, weight, rows(dout), as_int(C), as_int(OC)))
      return;
    const cpu::F32Buffer dinp_(dinp), dout_(dout), weight_(weight);
    cpu::matmul_backward_input(dinp_.get(), dout_.get(), weight_.get(), rows(dout), as_int(C),
                               as_int(OC));
    dinp_.store();
  });
}

void matmul_backward_weight(const OpContext& ctx, Tensor dweight, Tensor dbias, Tensor dout,
                            Tensor inp) {
  const OpCheck ck{"matmul_backward_weight", ctx};
  ck.rank(inp, "inp", 2, "(N,C) or (B,T,C)");
  ck.tensor(inp, "inp", kFloat);
  ck.rank_exact(dweight, "dweight", 2, "(OC,C)");
  const int64_t C = inp.dim(-1), N = rows(inp), OC = dweight.dim(0);
  ck.tensor(dweight, "dweight", kOwnFloat, Shape{OC, C}, "(OC,C), C the last dim of inp");
  if (dbias.defined()) {
    ck.tensor(dbias, "dbias", kOwnFloat, Shape{OC}, "(OC), OC from dweight");
    ck.same_dtype(dweight, "dweight", dbias, "dbias");
  }
  ck.tensor(dout, "dout", kOwnFloat, with_last(inp, OC), "inp's shape with C replaced by OC");
  TIDE_RUN_ON_CUDA(
      ck, ctx.cuda->matmul_backward_weight(ctx, ck.storage(), dout.dtype, dweight.dtype,
                                           dweight.data, dbias.defined() ? dbias.data : nullptr,
                                           dout.data, inp.data, N, as_int(C), as_int(OC)));
  run_cpu_kernel(ck, [=] {
    if (cpu::matmul_backward_weight_native(dweight, dbias, dout, inp, N, as_int(C), as_int(OC)))
      return;
    const cpu::F32Buffer dbias_(dbias), dweight_(dweight), dout_(dout), inp_(inp);
    cpu::matmul_backward_weight(dweight_.get(), dbias_.get(), dout_.get(), inp_.get(), N, as_int(C),
                                as_int(OC));
    dweight_.store();
    dbias_.store();
  });
}

// ---- attention -------------------------------------------------------------------------

namespace {
// The global coordinates of a dropout spec (ops.h) place a tensor with T positions and W
// columns (features, or heads for attention) inside the global activation.
void check_dropout_coordinates(const OpCheck& ck, const DropoutSpec& d, int64_t T, int64_t W,
                               const char* columns) {
  TIDE_CHECK(d.pos0 >= 0 && d.col0 >= 0 && d.seq_stride >= 0 && d.width_full >= 0,
             "{}: dropout coordinates must not be negative (pos0={}, col0={}, seq_stride={}, "
             "width_full={})",
             ck.op, d.pos0, d.col0, d.seq_stride, d.width_full);
  const int64_t S = d.seq_stride > 0 ? d.seq_stride : T;
  const int64_t Wf = d.width_full > 0 ? d.width_full : W;
  TIDE_CHECK(d.pos0 + T <= S,
             "{}: the tensor's positions pos0..pos0+T-1 = {}..{} lie outside the sequence of "
             "seq_stride={} positions; set seq_stride to the full sequence length (0 means T={})",
             ck.op, d.pos0, d.pos0 + T - 1, S, T);
  TIDE_CHECK(d.col0 + W <= Wf,
             "{}: the tensor's {} col0..col0+{}-1 = {}..{} lie outside width_full={}; set "
             "width_full to the unsharded count (0 means the tensor's {})",
             ck.op, columns, W, d.col0, d.col0 + W - 1, Wf, W);
}
}  // namespace

namespace {
// Checks shared by attention forward and backward; returns B, T, C (= n_head * HS), HS.
struct AttentionDims {
  int64_t B, T, C, HS;
};
AttentionDims check_attention(const OpCheck& ck, const Tensor& qkv, const Tensor& lse, int n_head,
                              int n_kv_head, const DropoutSpec& dropout) {
  ck.rank_exact(qkv, "qkv", 3, n_kv_head == n_head ? "(B,T,3C)" : "(B,T,(NH+2*NKV)*HS)");
  ck.tensor(qkv, "qkv", kFloat);
  const int64_t B = qkv.dim(0), T = qkv.dim(1), W = qkv.dim(2);
  int64_t C = 0, HS = 0;
  if (n_kv_head == n_head) {  // multi-head: the messages of GPT-2's (B,T,3C)
    TIDE_CHECK(W % 3 == 0, "{}: tensor 'qkv' has shape {} but its last dim must be 3*C (q, k, v)",
               ck.op, qkv.shape.str());
    C = W / 3;
    TIDE_CHECK(n_head > 0 && C % n_head == 0,
               "{}: n_head={} must be positive and divide C={}; choose n_head so that n_embd is "
               "a multiple of it",
               ck.op, n_head, C);
    HS = C / n_head;
  } else {
    TIDE_CHECK(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0,
               "{}: n_head={} and n_kv_head={} must be positive, with n_kv_head dividing n_head "
               "(each kv head serves n_head/n_kv_head query heads)",
               ck.op, n_head, n_kv_head);
    const int64_t heads = n_head + 2 * static_cast<int64_t>(n_kv_head);
    TIDE_CHECK(W % heads == 0,
               "{}: tensor 'qkv' has shape {} but its last dim must be (n_head + 2*n_kv_head) * "
               "HS = {} * HS (q, k and v heads side by side)",
               ck.op, qkv.shape.str(), heads);
    HS = W / heads;
    C = n_head * HS;
  }
  TIDE_CHECK(dropout.p >= 0.0f && dropout.p < 1.0f,
             "{}: dropout probability {} must be in [0, 1); set attn dropout in that range", ck.op,
             dropout.p);
  check_dropout_coordinates(ck, dropout, T, n_head, "heads");
  ck.tensor(lse, "lse", DType::F32, Shape{B, n_head, T}, "(B,NH,T), f32");
  return {B, T, C, HS};
}
}  // namespace

void attention_forward(const OpContext& ctx, Tensor out, Tensor lse, Tensor qkv, int n_head,
                       int n_kv_head, const DropoutSpec& dropout) {
  const OpCheck ck{"attention_forward", ctx};
  // Plain variables, not a structured binding: clang < 16 cannot capture bindings in lambdas.
  const AttentionDims dims = check_attention(ck, qkv, lse, n_head, n_kv_head, dropout);
  const int64_t B = dims.B, T = dims.T, C = dims.C;
  ck.tensor(out, "out", kFloat, Shape{B, T, C},
            n_kv_head == n_head ? "(B,T,C), C = qkv's last dim / 3" : "(B,T,C), C = n_head * HS");
  TIDE_RUN_ON_CUDA(
      ck, ctx.cuda->attention_forward(ctx, ck.storage(), out.data, lse.f32(), qkv.data, as_int(B),
                                      as_int(T), as_int(C), n_head, n_kv_head, dropout));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer out_(out, /*widen=*/false), qkv_(qkv);
    cpu::attention_forward(out_.get(), lse.f32(), qkv_.get(), as_int(B), as_int(T), as_int(C),
                           n_head, n_kv_head, dropout);
    out_.store();
  });
}

void attention_backward(const OpContext& ctx, Tensor dqkv, Tensor dout, Tensor qkv, Tensor lse,
                        int n_head, int n_kv_head, const DropoutSpec& dropout) {
  const OpCheck ck{"attention_backward", ctx};
  // Plain variables, not a structured binding: clang < 16 cannot capture bindings in lambdas.
  const AttentionDims dims = check_attention(ck, qkv, lse, n_head, n_kv_head, dropout);
  const int64_t B = dims.B, T = dims.T, C = dims.C;
  ck.tensor(dqkv, "dqkv", kFloat, qkv.shape, "the shape of qkv");
  ck.tensor(dout, "dout", kFloat, Shape{B, T, C},
            n_kv_head == n_head ? "(B,T,C), C = qkv's last dim / 3" : "(B,T,C), C = n_head * HS");
  TIDE_RUN_ON_CUDA(ck, ctx.cuda->attention_backward(ctx, ck.storage(), dqkv.data, dout.data,
                                                    qkv.data, lse.f32(), as_int(B), as_int(T),
                                                    as_int(C), n_head, n_kv_head, dropout));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer dqkv_(dqkv), dout_(dout), qkv_(qkv);
    cpu::attention_backward(dqkv_.get(), dout_.get(), qkv_.get(), lse.f32(), as_int(B), as_int(T),
                            as_int(C), n_head, n_kv_head, dropout);
    dqkv_.store();
  });
}

void attention_forward(const OpContext& ctx, Tensor out, Tensor lse, Tensor qkv, int n_head,
                       const DropoutSpec& dropout) {
  attention_forward(ctx, out, lse, qkv, n_head, n_head, dropout);
}

void attention_backward(const OpContext& ctx, Tensor dqkv, Tensor dout, Tensor qkv, Tensor lse,
                        int n_head, const DropoutSpec& dropout) {
  attention_backward(ctx, dqkv, dout, qkv, lse, n_head, n_head, dropout);
}

// ---- RoPE ------------------------------------------------------------------------------

namespace {
// RoPE's qkv layout (B,T,(n_head + 2*n_kv_head)*HS) and inv_freq(HS/2); returns B, T, HS.
struct RopeDims {
  int64_t B, T, HS;
};
RopeDims check_rope(const OpCheck& ck, const Tensor& x, const char* name, const Tensor& inv_freq,
                    int n_head, int n_kv_head) {
  ck.rank_exact(x, name, 3, "(B,T,(n_head+2*n_kv_head)*HS)");
  ck.tensor(x, name, kFloat);
  TIDE_CHECK(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0,
             "{}: n_head={} and n_kv_head={} must be positive, with n_kv_head dividing n_head "
             "(each kv head serves n_head/n_kv_head query heads)",
             ck.op, n_head, n_kv_head);
  const int64_t heads = n_head + 2 * static_cast<int64_t>(n_kv_head);
  TIDE_CHECK(x.dim(2) % heads == 0 && (x.dim(2) / heads) % 2 == 0,
             "{}: tensor '{}' has shape {} but its last dim must be (n_head + 2*n_kv_head) * HS "
             "= {} * HS with an even head size HS (q, k and v heads side by side)",
             ck.op, name, x.shape.str(), heads);
  const int64_t HS = x.dim(2) / heads;
  ck.tensor(inv_freq, "inv_freq", DType::F32, Shape{HS / 2},
            "(HS/2), HS = the last dim of qkv / (n_head + 2*n_kv_head)");
  return {x.dim(0), x.dim(1), HS};
}
}  // namespace

void rope_forward(const OpContext& ctx, Tensor out, Tensor inp, Tensor inv_freq, int n_head,
                  int n_kv_head) {
  const OpCheck ck{"rope_forward", ctx};
  // Plain variables, not a structured binding: clang < 16 cannot capture bindings in lambdas.
  const RopeDims dims = check_rope(ck, inp, "inp", inv_freq, n_head, n_kv_head);
  const int64_t B = dims.B, T = dims.T, HS = dims.HS;
  ck.tensor(out, "out", kFloat, inp.shape, "the shape of inp");
  TIDE_RUN_ON_CUDA(ck, ctx.cuda->rope_forward(ctx, ck.storage(), out.data, inp.data, inv_freq.f32(),
                                              as_int(B), as_int(T), n_head, n_kv_head, as_int(HS)));
  run_cpu_kernel(ck, [=] {
    // In place (out aliasing inp): one working copy serves both.
    const bool in_place = out.data == inp.data;
    const cpu::F32Buffer out_(out, /*widen=*/in_place), inp_(in_place ? Tensor() : inp);
    cpu::rope_forward(out_.get(), in_place ? out_.get() : inp_.get(), inv_freq.f32(), as_int(B),
                      as_int(T), n_head, n_kv_head, as_int(HS));
    out_.store();
  });
}

void rope_backward(const OpContext& ctx, Tensor dinp, Tensor dout, Tensor inv_freq, int n_head,
                   int n_kv_head) {
  const OpCheck ck{"rope_backward", ctx};
  const RopeDims dims = check_rope(ck, dout, "dout", inv_freq, n_head, n_kv_head);
  const int64_t B = dims.B, T = dims.T, HS = dims.HS;
  ck.tensor(dinp, "dinp", kFloat, dout.shape, "the shape of dout");
  TIDE_RUN_ON_CUDA(ck,
                   ctx.cuda->rope_backward(ctx, ck.storage(), dinp.data, dout.data, inv_freq.f32(),
                                           as_int(B), as_int(T), n_head, n_kv_head, as_int(HS)));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer dinp_(dinp), dout_(dout);
    cpu::rope_backward(dinp_.get(), dout_.get(), inv_freq.f32(), as_int(B), as_int(T), n_head,
                       n_kv_head, as_int(HS));
    dinp_.store();
  });
}

// ---- pointwise -------------------------------------------------------------------------

void gelu_forward(const OpContext& ctx, Tensor out, Tensor inp) {
  const OpCheck ck{"gelu_forward", ctx};
  ck.tensor(inp, "inp", kFloat);
  ck.tensor(out, "out", kFloat, inp.shape, "the shape of inp");
  TIDE_RUN_ON_CUDA(ck, ctx.cuda->gelu_forward(ctx, ck.storage(), out.data, inp.data, inp.numel()));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer out_(out, /*widen=*/false), inp_(inp);
    cpu::gelu_forward(out_.get(), inp_.get(), inp.numel());
    out_.store();
  });
}

void gelu_backward(const OpContext& ctx, Tensor dinp, Tensor dout, Tensor inp) {
  const OpCheck ck{"gelu_backward", ctx};
  ck.tensor(inp, "inp", kFloat);
  ck.tensor(dinp, "dinp", kFloat, inp.shape, "the shape of inp");
  ck.tensor(dout, "dout", kFloat, inp.shape, "the shape of inp");
  TIDE_RUN_ON_CUDA(
      ck, ctx.cuda->gelu_backward(ctx, ck.storage(), dinp.data, dout.data, inp.data, inp.numel()));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer dinp_(dinp), dout_(dout), inp_(inp);
    cpu::gelu_backward(dinp_.get(), dout_.get(), inp_.get(), inp.numel());
    dinp_.store();
  });
}

namespace {
// SwiGLU's input (N,2I) or (B,T,2I): returns I.
int64_t check_swiglu_input(const OpCheck& ck, const Tensor& inp) {
  ck.rank(inp, "inp", 2, "(N,2I) or (B,T,2I)");
  ck.tensor(inp, "inp", kFloat);
  TIDE_CHECK(inp.dim(-1) % 2 == 0,
             "{}: tensor 'inp' has shape {} but its last dim must be 2*I (gate, then up)", ck.op,
             inp.shape.str());
  return inp.dim(-1) / 2;
}
}  // namespace

void swiglu_forward(const OpContext& ctx, Tensor out, Tensor inp) {
  const OpCheck ck{"swiglu_forward", ctx};
  const int64_t I = check_swiglu_input(ck, inp);
  ck.tensor(out, "out", kFloat, with_last(inp, I), "inp's shape with 2I replaced by I");
  TIDE_RUN_ON_CUDA(
      ck, ctx.cuda->swiglu_forward(ctx, ck.storage(), out.data, inp.data, rows(inp), as_int(I)));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer out_(out, /*widen=*/false), inp_(inp);
    cpu::swiglu_forward(out_.get(), inp_.get(), rows(inp), as_int(I));
    out_.store();
  });
}

void swiglu_backward(const OpContext& ctx, Tensor dinp, Tensor dout, Tensor inp) {
  const OpCheck ck{"swiglu_backward", ctx};
  const int64_t I = check_swiglu_input(ck, inp);
  ck.tensor(dinp, "dinp", kFloat, inp.shape, "the shape of inp");
  ck.tensor(dout, "dout", kFloat, with_last(inp, I), "inp's shape with 2I replaced by I");
  TIDE_RUN_ON_CUDA(ck, ctx.cuda->swiglu_backward(ctx, ck.storage(), dinp.data, dout.data, inp.data,
                                                 rows(inp), as_int(I)));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer dinp_(dinp), dout_(dout), inp_(inp);
    cpu::swiglu_backward(dinp_.get(), dout_.get(), inp_.get(), rows(inp), as_int(I));
    dinp_.store();
  });
}

void residual_forward(const OpContext& ctx, Tensor out, Tensor a, Tensor b) {
  const OpCheck ck{"residual_forward", ctx};
  ck.tensor(a, "a", kFloat);
  ck.tensor(b, "b", kFloat, a.shape, "the shape of a");
  ck.tensor(out, "out", kFloat, a.shape, "the shape of a");
  TIDE_RUN_ON_CUDA(
      ck, ctx.cuda->residual_forward(ctx, ck.storage(), out.data, a.data, b.data, a.numel()));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer out_(out, /*widen=*/false), a_(a), b_(b);
    cpu::residual_forward(out_.get(), a_.get(), b_.get(), a.numel());
    out_.store();
  });
}

void divide_by(const OpContext& ctx, Tensor x, float divisor) {
  const OpCheck ck{"divide_by", ctx};
  ck.tensor(x, "x", kFloat);
  TIDE_CHECK(divisor != 0.0f, "divide_by: the divisor is 0; pass the number of ranks (>= 1)");
  TIDE_RUN_ON_CUDA(ck, ctx.cuda->divide_by(ctx, ck.storage(), x.data, divisor, x.numel()));
  run_cpu_kernel(ck, [=] { divide_elements(x.data, x.dtype, x.numel(), divisor); });
}

void residual_backward(const OpContext& ctx, Tensor da, Tensor db, Tensor dout) {
  const OpCheck ck{"residual_backward", ctx};
  ck.tensor(dout, "dout", kFloat);
  ck.tensor(da, "da", kFloat, dout.shape, "the shape of dout");
  ck.tensor(db, "db", kFloat, dout.shape, "the shape of dout");
  TIDE_RUN_ON_CUDA(ck, ctx.cuda->residual_backward(ctx, ck.storage(), da.data, db.data, dout.data,
                                                   dout.numel()));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer da_(da), db_(db), dout_(dout);
    cpu::residual_backward(da_.get(), db_.get(), dout_.get(), dout.numel());
    da_.store();
    db_.store();
  });
}

namespace {
// Dropout takes (B,T,W), or (N,W) read as (1,N,W); returns {B, T, W}.
std::array<int64_t, 3> check_dropout(const OpCheck& ck, const Tensor& x, const char* name,
                                     const DropoutSpec& dropout) {
  TIDE_CHECK(dropout.p >= 0.0f && dropout.p < 1.0f,
             "{}: dropout probability {} must be in [0, 1); set dropout in that range", ck.op,
             dropout.p);
  ck.tensor(x, name, kFloat);
  TIDE_CHECK(x.ndim() == 2 || x.ndim() == 3,
             "{}: tensor '{}' has shape {} but must be (B,T,W) or (N,W) (read as (1,N,W))", ck.op,
             name, x.shape.str());
  const std::array<int64_t, 3> btw = x.ndim() == 3
                                         ? std::array<int64_t, 3>{x.dim(0), x.dim(1), x.dim(2)}
                                         : std::array<int64_t, 3>{1, x.dim(0), x.dim(1)};
  check_dropout_coordinates(ck, dropout, btw[1], btw[2], "columns");
  return btw;
}
}  // namespace

void dropout_forward(const OpContext& ctx, Tensor out, Tensor inp, const DropoutSpec& dropout) {
  const OpCheck ck{"dropout_forward", ctx};
  const std::array<int64_t, 3> dims = check_dropout(ck, inp, "inp", dropout);
  const int64_t B = dims[0], T = dims[1], W = dims[2];  // captured below (no bindings: clang < 16)
  ck.tensor(out, "out", kFloat, inp.shape, "the shape of inp");
  TIDE_RUN_ON_CUDA(
      ck, ctx.cuda->dropout_forward(ctx, ck.storage(), out.data, inp.data, B, T, W, dropout));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer out_(out, /*widen=*/false), inp_(inp);
    cpu::dropout_forward(out_.get(), inp_.get(), B, T, W, dropout);
    out_.store();
  });
}

void dropout_backward(const OpContext& ctx, Tensor dinp, Tensor dout, const DropoutSpec& dropout) {
  const OpCheck ck{"dropout_backward", ctx};
  const std::array<int64_t, 3> dims = check_dropout(ck, dout, "dout", dropout);
  const int64_t B = dims[0], T = dims[1], W = dims[2];  // captured below (no bindings: clang < 16)
  ck.tensor(dinp, "dinp", kFloat, dout.shape, "the shape of dout");
  TIDE_RUN_ON_CUDA(
      ck, ctx.cuda->dropout_backward(ctx, ck.storage(), dinp.data, dout.data, B, T, W, dropout));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer dinp_(dinp), dout_(dout);
    cpu::dropout_backward(dinp_.get(), dout_.get(), B, T, W, dropout);
    dinp_.store();
  });
}

// ---- cross-entropy ---------------------------------------------------------------------

void crossentropy_forward(const OpContext& ctx, Tensor losses, Tensor logits, Tensor targets) {
  const OpCheck ck{"crossentropy_forward", ctx};
  ck.rank(logits, "logits", 2, "(N,V) or (B,T,V)");
  ck.tensor(logits, "logits", kFloat);
  ck.tensor(targets, "targets", DType::I32, leading(logits), "logits' shape without V");
  ck.tensor(losses, "losses", DType::F32, leading(logits), "logits' shape without V");
  TIDE_RUN_ON_CUDA(
      ck, ctx.cuda->crossentropy_forward(ctx, ck.storage(), losses.f32(), logits.data,
                                         targets.i32(), rows(logits), as_int(logits.dim(-1))));
  run_cpu_kernel(ck, [=] {
    const cpu::F32Buffer logits_(logits);
    cpu::crossentropy_forward(losses.f32(), logits_.get(), targets.i32(), rows(logits),
                              as_int(logits.dim(-1)));
  });
}

void crossentropy_backward(const OpContext& ctx, Tensor dlogits, Tensor logits, Tensor targets,
                           float dloss) {
  const OpCheck ck{"crossentropy_backward", ctx};
  ck.rank(logits, "logits", 2, "(N,V) or (B,T,V)");
  ck.tensor(logits, "logits", kFloat);
  ck.tensor(targets, "targets", DType::I32, leading(logits), "logits' shape without V");
  ck.tensor(dlogits, "dlogits", kFloat, logits.shape, "the shape of logits");
  TIDE_RUN_ON_CUDA(ck, ctx.cuda->crossentropy_backward(ctx, ck.storage(), dlogits.data, logits.data,
                                                       targets.i32(), rows(logits),
                                                       as_int(logits.dim(-1)), dloss));
  run_cpu_kernel(ck, [=] {
    // In place (dlogits aliasing logits, as the model calls it): one working copy serves both.
    const bool in_place = dlogits.data == logits.data;
    const cpu::F32Buffer dlogits_(dlogits, /*widen=*/in_place),
        logits_(in_place ? Tensor() : logits);
    cpu::crossentropy_backward(dlogits_.get(), in_place ? dlogits_.get() : logits_.get(),
                               targets.i32(), rows(logits), as_int(logits.dim(-1)), dloss);
    dlogits_.store();
  });
}

void crossentropy_forward_backward(const OpContext& ctx, Tensor losses, Tensor dlogits,
                                   Tensor logits, Tensor targets, float dloss) {
  const OpCheck ck{"crossentropy_forward_backward", ctx};
  ck.rank(logits, "logits", 2, "(N,V) or (B,T,V)");
  ck.tensor(logits, "logits", kFloat);
  ck.tensor(targets, "targets", DType::I32, leading(logits), "logits' shape without V");
  ck.tensor(losses, "losses", DType::F32, leading(logits), "logits' shape without V");
  ck.tensor(dlogits, "dlogits", kFloat, logits.shape, "the shape of logits");
  TIDE_RUN_ON_CUDA(ck, ctx.cuda->crossentropy_forward_backward(
                           ctx, ck.storage(), losses.f32(), dlogits.data, logits.data,
                           targets.i32(), rows(logits), as_int(logits.dim(-1)), dloss));
  run_cpu_kernel(ck, [=] {
    const bool in_place = dlogits.data == logits.data;  // as crossentropy_backward
    const cpu::F32Buffer dlogits_(dlogits, /*widen=*/in_place),
        logits_(in_place ? Tensor() : logits);
    cpu::crossentropy_forward_backward(losses.f32(), dlogits_.get(),
                                       in_place ? dlogits_.get() : logits_.get(), targets.i32(),
                                       rows(logits), as_int(logits.dim(-1)), dloss);
    dlogits_.store();
  });
}

}  // namespace tide
