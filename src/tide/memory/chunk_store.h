#pragma once
// ChunkStore: the memory of all model data, as one chunk list per kind with the layout of
// ChunkLayout. Kinds:
//
//   PARAM   the parameters the kernels compute with (compute dtype: f32, bf16 or f16)
//   GRAD    their gradients (same dtype)
//   MASTER  fp32 master parameters; with an f32 compute dtype this IS the PARAM list
//   ADAM_M, ADAM_V  Adam's first and second moments (f32)
//
// Each chunk is a separate allocation so that placement policies can later move or free
// chunks one by one (offload, ZeRO-3). The store also keeps each tensor's TensorState and
// counts, per chunk, how many tensors have their gradient complete: when the last one of a
// chunk is marked, the chunk's gradients can be reduced (the hook of data parallelism).

#include <array>
#include <functional>
#include <vector>

#include "tide/memory/chunk_layout.h"
#include "tide/memory/tensor_state.h"

namespace tide {

enum class ChunkKind : int { PARAM = 0, GRAD, MASTER, ADAM_M, ADAM_V };
constexpr int kNumChunkKinds = 5;
const char* chunk_kind_name(ChunkKind k);

struct Chunk {
  void* data = nullptr;  // nullptr while released (not resident)
  int64_t elems = 0;
  DType dtype = DType::F32;
  Device device = Device::cpu();
  bool owned_memory = true;  // false when aliasing another kind's chunk (MASTER == PARAM)
};

class ChunkStore {
 public:
  // Allocates (zero-filled) every chunk of every kind on the host. `with_optimizer` = false
  // skips MASTER/ADAM_M/ADAM_V (inference, sampling).
  ChunkStore(ChunkLayout layout, DType compute_dtype, bool with_optimizer = true);
  ~ChunkStore();
  ChunkStore(const ChunkStore&) = delete;
  ChunkStore& operator=(const ChunkStore&) = delete;

  const ChunkLayout& layout() const { return layout_; }
  DType compute_dtype() const { return compute_dtype_; }
  bool has(ChunkKind k) const { return !chunks_[static_cast<int>(k)].empty(); }

  // View of tensor `id` inside the chunk list of kind `k`, shaped as declared.
  Tensor tensor(ChunkKind k, int id) const;
  // The whole chunk c of kind k as a 1-D tensor of chunk_elems elements (padding included).
  Tensor chunk(ChunkKind k, int c) const;
  void zero(ChunkKind k);

  // Host bytes allocated per kind (aliases count once) and in total.
  size_t bytes(ChunkKind k) const;
  size_t total_bytes() const;

  // --- tensor states --------------------------------------------------------------------
  TensorState state(int id) const { return states_[id]; }
  // Moves tensor `id` to state `s`; throws a tide::Error on an illegal transition.
  void set_state(int id, TensorState s);
  // True when no tensor of chunk c is in COMPUTE (the chunk may move).
  bool chunk_movable(int c) const;

  // --- gradient completion ----------------------------------------------------------------
  // Called with the chunk index when every tensor of that chunk has been marked ready.
  std::function<void(int)> on_chunk_grads_ready;
  // Marks tensor `id`'s gradient complete for this step (READY_FOR_REDUCE); fires the hook
  // when it completes its chunk.
  void mark_grad_ready(int id);
  // Starts a new step: every tensor back to HOLD, completion counts to zero.
  void begin_step();

 private:
  ChunkLayout layout_;
  DType compute_dtype_;
  std::array<std::vector<Chunk>, kNumChunkKinds> chunks_;
  std::vector<TensorState> states_;
  std::vector<int> ready_in_chunk_;
};

}  // namespace tide
