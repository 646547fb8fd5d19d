#pragma once
// communication_data_type: a chunk's gradients sent in another dtype than the one they are
// kept in (bf16 gradients reduced in fp32, or fp32 ones in bf16). As DeepSpeed does with each
// bucket, the chunk is converted into a staging buffer, reduced there and converted back.
// The buffers come from a pool on the compute allocator: counted, and reused every step. The
// conversions are the mover's converting copies on the chunks' context (kernels/mover.h).

#include <optional>
#include <utility>

#include "tide/core/tensor.h"
#include "tide/kernels/ops.h"
#include "tide/memory/buffer_pool.h"

namespace tide {

class CommStaging {
 public:
  // `comm`: the dtype to send; nullopt sends every chunk in its own dtype. `op`: where the
  // gradients and `alloc`'s memory are (the conversions run on its stream).
  CommStaging(Allocator& alloc, std::optional<DType> comm, OpContext op = {})
      : pool_(&alloc), comm_(comm), op_(std::move(op)) {}

  // One chunk's gradients in flight in the communication dtype.
  struct Staged {
    int buffer = -1;  // the pool's buffer, -1 once unstaged (or never staged)
    Tensor tensor;    // the staged copy: `grads`' shape in the communication dtype
  };

  // Whether gradients kept in `grads` go through staging.
  bool needed(DType grads) const { return comm_ && *comm_ != grads; }
  // `grads` converted into a buffer of `capacity_elems` elements (a size class, so that buffers
  // are reused across chunks); on a device the conversion is queued on the stream, and the
  // collective that reads it is ordered after it (model/stream_collectives.h).
  Staged stage(const Tensor& grads, int64_t capacity_elems);
  // dst = the staged elements [begin, begin + dst.numel()) converted back; the buffer returns
  // to the pool. A no-op for a Staged already unstaged.
  void unstage(Staged& s, int64_t begin, const Tensor& dst);

  size_t allocated_bytes() const { return pool_.allocated_bytes(); }

 private:
  BufferPool pool_;
  std::optional<DType> comm_;
  OpContext op_;
};

}  // namespace tide
