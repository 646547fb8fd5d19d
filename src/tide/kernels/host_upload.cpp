#include "tide/kernels/host_upload.h"

#include "tide/kernels/mover.h"

namespace tide {

void* HostUpload::bytes_for(const Tensor& dst) {
  if (dst.device.is_cpu()) return dst.data;
  if (buffer_.size() < dst.nbytes()) buffer_.resize(dst.nbytes());
  return buffer_.data();
}

void HostUpload::send(const OpContext& ctx, const Tensor& dst) {
  if (dst.device.is_cpu()) return;
  copy(ctx, dst, Tensor(buffer_.data(), dst.shape, dst.dtype));
  synchronize(ctx);  // before the buffer is reused
}

}  // namespace tide
