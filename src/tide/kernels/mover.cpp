#include "tide/kernels/mover.h"

#include <cstring>

#include "tide/core/error.h"
#include "tide/core/sim_device.h"
#include "tide/kernels/cuda_table.h"

namespace tide {

namespace {

// A tensor the context may read or write: on the host or on the context's device.
void check_reachable(const OpContext& ctx, const Tensor& t, const char* op, const char* name) {
  TIDE_CHECK(t.defined() || t.nbytes() == 0, "{}: tensor '{}' is undefined (null data)", op, name);
  TIDE_CHECK(t.device.is_cpu() || t.device == ctx.device,
             "{}: tensor '{}' is on {} but the stream belongs to {}; copy through the host or "
             "use a context for {}",
             op, name, t.device.str(), ctx.device.str(), t.device.str());
}

void check_stream(const OpContext& ctx, const char* op) {
  TIDE_CHECK(!ctx.device.is_sim() || ctx.sim,
             "{}: the context says {} but has no stream; make it "
             "with make_op_context",
             op, ctx.device.str());
  TIDE_CHECK(!ctx.device.is_cuda() || (ctx.cuda && ctx.handles),
             "{}: the context says {} but has no CUDA stream; make it with make_op_context", op,
             ctx.device.str());
}

}  // namespace

void copy(const OpContext& ctx, Tensor dst, Tensor src) {
  check_stream(ctx, "copy");
  TIDE_CHECK(dst.numel() == src.numel() && (dst.dtype == src.dtype || (is_float_dtype(dst.dtype) &&
                                                                       is_float_dtype(src.dtype))),
             "copy: destination {} {} and source {} {} differ in element count, or in dtype "
             "other than between f32, bf16 and f16",
             dtype_name(dst.dtype), dst.shape.str(), dtype_name(src.dtype), src.shape.str());
  check_reachable(ctx, dst, "copy", "dst");
  check_reachable(ctx, src, "copy", "src");
  const size_t bytes = src.nbytes();
  if (bytes == 0) return;
  if (dst.dtype != src.dtype) {  // a conversion: a kernel, where the tensors are
    const int64_t n = src.numel();
    // On a device a conversion is a kernel, which reads and writes device memory only: the
    // simulated device keeps CUDA's rule, so that CI finds a converting copy through the host.
    TIDE_CHECK(ctx.device.is_cpu() || (dst.device == ctx.device && src.device == ctx.device),
               "copy: converting {} to {} on {} needs both tensors there (a kernel reads "
               "them); copy the host one first",
               dtype_name(src.dtype), dtype_name(dst.dtype), ctx.device.str());
    if (ctx.device.is_cuda())
      return ctx.cuda->convert_async(ctx, dst.data, dst.dtype, src.data, src.dtype, n);
    auto convert = [dst, src, n] { convert_elements(src.data, src.dtype, dst.data, dst.dtype, n); };
    if (ctx.device.is_sim()) return ctx.sim->enqueue(convert);
    return convert();
  }
  if (ctx.device.is_cuda()) return ctx.cuda->copy_async(ctx, dst.data, src.data, bytes);
  if (ctx.device.is_sim()) {
    ctx.sim->enqueue([dst, src, bytes] { std::memmove(dst.data, src.data, bytes); });
    // CUDA's rule: a copy through pageable host memory, or between two host buffers, returns
    // only once it is done (sim_device.h's page-locked ranges).
    auto pageable = [bytes](const Tensor& t) {
      return t.device.is_cpu() && !sim_host_is_pinned(t.data, bytes);
    };
    if (pageable(dst) || pageable(src) || (dst.device.is_cpu() && src.device.is_cpu()))
      ctx.sim->synchronize();
    return;
  }
  std::memmove(dst.data, src.data, bytes);
}

void fill_zero(const OpContext& ctx, std::span<const Tensor> tensors) {
  check_stream(ctx, "fill_zero");
  // Host memory on a device's stream (auto placement's host tier): no device memset writes
  // host memory, so the host zeroes it once the stream has run what it queued (on the
  // simulated device too, so that CI runs the GPU's order): one wait for all of them.
  bool host_waited = false;
  for (const Tensor& t : tensors) {
    check_reachable(ctx, t, "fill_zero", "t");
    const size_t bytes = t.nbytes();
    if (bytes == 0) continue;
    if (!ctx.device.is_cpu() && t.device.is_cpu()) {
      if (!host_waited) synchronize(ctx);
      host_waited = true;
      std::memset(t.data, 0, bytes);
    } else if (ctx.device.is_cuda()) {
      ctx.cuda->fill_zero_async(ctx, t.data, bytes);
    } else if (ctx.device.is_sim()) {
      ctx.sim->enqueue([t, bytes] { std::memset(t.data, 0, bytes); });
    } else {
      std::memset(t.data, 0, bytes);
    }
  }
}

void fill_zero(const OpContext& ctx, Tensor t) {
  fill_zero(ctx, std::span<const Tensor>(&t, 1));
}

OpContext make_copy_context(const OpContext& compute) {
  check_stream(compute, "make_copy_context");
  if (compute.device.is_cpu()) return compute;
  OpContext ctx;
  if (compute.device.is_sim()) {
    ctx.device = compute.device;
    ctx.sim = std::make_shared<SimStream>(compute.device, 1);  // conversions only: one thread
  } else {
    ctx = compute.cuda->make_context(compute.device.index, nullptr, /*copies_only=*/true);
    ctx.cuda = compute.cuda;
  }
  return ctx;
}

StreamEvent record_event(const OpContext& ctx) {
  check_stream(ctx, "record_event");
  StreamEvent e;
  e.device = ctx.device;
  if (ctx.device.is_sim()) e.sim = ctx.sim->record();
  if (ctx.device.is_cuda()) {
    e.cuda = ctx.cuda->record_event(ctx);
    e.kernels = ctx.cuda;
  }
  return e;
}

void wait_event(const OpContext& ctx, const StreamEvent& event) {
  check_stream(ctx, "wait_event");
  TIDE_CHECK(event.device.is_cpu() || event.device == ctx.device,
             "wait_event: the event belongs to {} but the stream to {}; a stream waits only on "
             "events of its own device (synchronize the host on the other one)",
             event.device.str(), ctx.device.str());
  if (event.sim) ctx.sim->wait(event.sim);
  if (event.cuda) ctx.cuda->wait_event(ctx, event.cuda.get());
}

void wait_stream(const OpContext& ctx, const OpContext& other) {
  if (ctx.device == other.device && ctx.sim == other.sim && ctx.stream == other.stream) return;
  wait_event(ctx, record_event(other));
}

void synchronize(const StreamEvent& event) {
  if (event.sim) event.sim->wait();
  if (event.cuda) event.kernels->synchronize_event(event.cuda.get());
}

void synchronize(const OpContext& ctx) {
  check_stream(ctx, "synchronize");
  if (ctx.device.is_sim()) ctx.sim->synchronize();
  if (ctx.device.is_cuda()) ctx.cuda->synchronize_stream(ctx);
}

}  // namespace tide
