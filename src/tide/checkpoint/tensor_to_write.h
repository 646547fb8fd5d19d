#pragma once
// A chunk store's tensor as a checkpoint writer takes it. Why: a device model's chunks (a GPU's,
// the simulated device's, and under placement.policy=auto any of them) are not host memory;
// copying the whole model to the host first would need host memory for every state at once,
// more than the host has for the largest models tide trains. The writer copies one tensor at a
// time instead, when it reaches it.

#include <string>

#include "tide/checkpoint/safetensors.h"
#include "tide/kernels/ops.h"

namespace tide {

// `t` under `name`: read in place when in host memory, else copied to the host through
// `copies` (a context on t's device, which waits for the copy) when the writer reaches it.
// `subject` starts the error when a device tensor comes without a context.
SafetensorsTensor tensor_to_write(std::string name, const Tensor& t, const OpContext* copies,
                                  const std::string& subject);

}  // namespace tide
