#include "tide/parallel/comm_staging.h"

#include "tide/core/error.h"
#include "tide/kernels/mover.h"

namespace tide {

CommStaging::Staged CommStaging::stage(const Tensor& grads, int64_t capacity_elems) {
  TIDE_ASSERT(needed(grads.dtype) && grads.numel() <= capacity_elems);
  Staged s;
  s.buffer = pool_.take(static_cast<size_t>(capacity_elems) * dtype_size(*comm_));
  s.tensor = Tensor(pool_.data(s.buffer), grads.shape, *comm_, grads.device);
  copy(op_, s.tensor, grads);
  return s;
}

void CommStaging::unstage(Staged& s, int64_t begin, const Tensor& dst) {
  if (s.buffer < 0) return;
  TIDE_ASSERT(begin + dst.numel() <= s.tensor.numel());
  auto* from = static_cast<char*>(s.tensor.data) + begin * int64_t(dtype_size(*comm_));
  copy(op_, dst, Tensor(from, dst.shape, *comm_, s.tensor.device));
  pool_.give(s.buffer);
  s.buffer = -1;
}

}  // namespace tide
