#pragma once
// A device model's host twin: the same shape, pipeline stage, chunk layout (padding and ZeRO
// slices) and dtypes, in host memory. Why: tensor parallelism's checkpoint gather and scatter
// read and write host memory, and the host reaches a device model's chunks only through the
// mover; so they run on the twin, and copy_chunks (memory/chunk_store.h) carries the chunks
// across. It holds every state: saves, loads and init_from without tp copy a tensor at a time
// instead (checkpoint/tensor_to_write.h, load_into_store, init_weights_from).

#include <functional>
#include <memory>

#include "tide/model/gpt.h"

namespace tide {

// A host copy of the model's chunks (every kind the store holds; a tensor-parallel model's
// shards), or nullptr when the model is on the CPU already (read the model itself then).
std::unique_ptr<GPT> host_copy(const GPT& model);

// Runs `fn` on the model's chunks as host memory: on the model itself on the CPU, otherwise on
// a host copy that is copied back afterwards (what `fn` leaves alone stays).
void with_host_chunks(GPT& model, const std::function<void(GPT&)>& fn);

}  // namespace tide
