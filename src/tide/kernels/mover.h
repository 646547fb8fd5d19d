#pragma once
// The mover: the one way bytes move between memories (host, the simulated device, a GPU),
// queued on a context's stream and ordered by events. Why one path: on a GPU every copy of
// chunk or activation data is a stream operation that later work must wait for; a memcpy
// that bypasses the stream is a race the CPU never shows. Routing every copy through here lets
// the simulated device (and ThreadSanitizer) catch a missing wait in CI.
//
// On the CPU context everything happens at once and events are already done. On the simulated
// device copies run on the stream's worker thread. On a GPU they are cudaMemcpyAsync /
// cudaMemsetAsync on the context's stream. A copy through pageable host memory (not from
// make_host_allocator's pinned allocator), or between two host buffers, returns only once it
// is done, on a GPU as on the simulated device, which keeps the rule (a counted host wait). A
// copy is asynchronous: neither its source nor its destination may be touched by the host until
// an event recorded after it has been waited for.
//
// Copies between host and device that should overlap the compute stream's ops go on a stream of
// their own (make_copy_context), ordered with the compute stream by events both ways: the copy
// stream waits for an event recorded after the ops that wrote its source, and the compute stream
// waits for one recorded after the copy before it reads the destination or rewrites the source.

#include <memory>
#include <span>

#include "tide/core/stream_event.h"
#include "tide/kernels/ops.h"

namespace tide {

// dst = src (same element count). Each tensor is on the host or on the context's device; on
// the CPU context both are on the host. Float tensors of different dtypes (f32, bf16, f16) are
// converted, rounded to nearest-even as convert_elements does; on a device (a GPU, or sim:N,
// which keeps the GPU's rule) both must then be on it.
void copy(const OpContext& ctx, Tensor dst, Tensor src);
// t = 0 (its bytes). A host tensor on a device's context is zeroed by the host after it waits
// for the stream (no device memset writes pageable host memory).
void fill_zero(const OpContext& ctx, Tensor t);
// Each tensor = 0; the host tensors on a device's context after one wait for the stream.
void fill_zero(const OpContext& ctx, std::span<const Tensor> tensors);

// A context on `compute`'s device whose stream carries only the mover's work (copies, zeroing,
// events), beside `compute`'s stream; ops do not run on it (on a GPU it has no cuBLAS handles).
// CPU: `compute` itself, where everything happens at once. Sim: a new stream (worker thread).
// CUDA: a new non-blocking stream on the same GPU.
OpContext make_copy_context(const OpContext& compute);

StreamEvent record_event(const OpContext& ctx);
// Work queued on ctx's stream after this call starts only once `event` is done (the event may
// come from another stream of the same device).
void wait_event(const OpContext& ctx, const StreamEvent& event);
// The same for everything queued on `other`'s stream so far (an event recorded there now);
// nothing where the two share a stream (the CPU, or a copy context that is `other`).
void wait_stream(const OpContext& ctx, const OpContext& other);
// The host waits for the event, or for everything queued on ctx's stream so far. Both rethrow
// an error raised asynchronously on the stream (e.g. a token id outside the vocabulary).
void synchronize(const StreamEvent& event);
void synchronize(const OpContext& ctx);

}  // namespace tide
