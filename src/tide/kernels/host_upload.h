#pragma once
// Host bytes into a tensor wherever it lives. Why: the readers that fill a model from the host
// (init_weights, checkpoint loads, init_from) write a device tensor through a host buffer, one
// tensor at a time, so that the host never holds the model whole; each read into the buffer,
// then the copy up and the wait before the buffer is reused, are the same steps everywhere.

#include <cstddef>
#include <vector>

#include "tide/kernels/ops.h"

namespace tide {

class HostUpload {
 public:
  // Where to write dst's bytes: dst itself in host memory, else this buffer (dst's size).
  void* bytes_for(const Tensor& dst);
  // A device dst gets the buffer's bytes through `ctx` (a context on its device), and the host
  // waits for the copy before the buffer is reused; nothing for a host dst.
  void send(const OpContext& ctx, const Tensor& dst);

 private:
  std::vector<std::byte> buffer_;
};

}  // namespace tide
