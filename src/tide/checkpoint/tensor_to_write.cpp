#include "tide/checkpoint/tensor_to_write.h"

#include "tide/kernels/mover.h"

namespace tide {

SafetensorsTensor tensor_to_write(std::string name, const Tensor& t, const OpContext* copies,
                                  const std::string& subject) {
  if (t.device.is_cpu()) return {std::move(name), t.dtype, t.shape, t.data, {}};
  TIDE_CHECK(copies != nullptr && copies->device == t.device,
             "{}: tensor '{}' is in {}'s memory and no context on that device was given to "
             "copy it to the host; pass the model's (GPT::op())",
             subject, name, t.device.str());
  return {std::move(name), t.dtype, t.shape, nullptr, [t, ctx = *copies](void* host) {
            copy(ctx, Tensor(host, t.shape, t.dtype), t);
            synchronize(ctx);  // before the writer reads the host buffer
          }};
}

}  // namespace tide
