#include "tide/memory/chunk_store.h"

#include "tide/core/arena.h"

#include <cstdlib>
#include <cstring>

namespace tide {

const char* chunk_kind_name(ChunkKind k) {
  static const char* names[] = {"param", "grad", "master", "adam_m", "adam_v"};
  return names[static_cast<int>(k)];
}

static Chunk allocate_chunk(int64_t elems, DType dtype) {
  Chunk c;
  c.elems = elems;
  c.dtype = dtype;
  const size_t bytes = Arena::aligned(static_cast<size_t>(elems) * dtype_size(dtype));
  c.data = std::aligned_alloc(Arena::kAlign, bytes);
  TIDE_CHECK(c.data != nullptr, "could not allocate a chunk of {:.1f} MiB of host memory",
             bytes / 1048576.0);
  std::memset(c.data, 0, bytes);
  return c;
}

ChunkStore::ChunkStore(ChunkLayout layout, DType compute_dtype, bool with_optimizer)
    : layout_(std::move(layout)), compute_dtype_(compute_dtype) {
  TIDE_ASSERT(layout_.packed());
  const int n = layout_.num_chunks();
  const int64_t elems = layout_.chunk_elems();
  auto fill = [&](ChunkKind k, DType t) {
    for (int c = 0; c < n; ++c) chunks_[static_cast<int>(k)].push_back(allocate_chunk(elems, t));
  };
  fill(ChunkKind::PARAM, compute_dtype);
  fill(ChunkKind::GRAD, compute_dtype);
  if (with_optimizer) {
    if (compute_dtype == DType::F32) {
      // f32 training: the master weights are the compute weights (no copy, no rounding).
      for (Chunk c : chunks_[static_cast<int>(ChunkKind::PARAM)]) {
        c.owned_memory = false;
        chunks_[static_cast<int>(ChunkKind::MASTER)].push_back(c);
      }
    } else {
      fill(ChunkKind::MASTER, DType::F32);
    }
    fill(ChunkKind::ADAM_M, DType::F32);
    fill(ChunkKind::ADAM_V, DType::F32);
  }
  states_.assign(layout_.num_tensors(), TensorState::HOLD);
  ready_in_chunk_.assign(n, 0);
}

ChunkStore::~ChunkStore() {
  for (auto& list : chunks_)
    for (Chunk& c : list)
      if (c.owned_memory) std::free(c.data);
}

Tensor ChunkStore::tensor(ChunkKind k, int id) const {
  const TensorSlot& s = layout_.slot(id);
  const Chunk& c = chunks_[static_cast<int>(k)].at(s.chunk);
  TIDE_CHECK(c.data != nullptr, "tensor '{}' ({}) is not resident: its chunk {} was released",
             s.name, chunk_kind_name(k), s.chunk);
  char* p = static_cast<char*>(c.data) + s.offset * static_cast<int64_t>(dtype_size(c.dtype));
  return Tensor(p, s.shape, c.dtype, c.device);
}

Tensor ChunkStore::chunk(ChunkKind k, int c) const {
  const Chunk& ch = chunks_[static_cast<int>(k)].at(c);
  return Tensor(ch.data, Shape{ch.elems}, ch.dtype, ch.device);
}

void ChunkStore::zero(ChunkKind k) {
  for (Chunk& c : chunks_[static_cast<int>(k)])
    if (c.data) std::memset(c.data, 0, static_cast<size_t>(c.elems) * dtype_size(c.dtype));
}

size_t ChunkStore::bytes(ChunkKind k) const {
  size_t b = 0;
  for (const Chunk& c : chunks_[static_cast<int>(k)])
    if (c.owned_memory && c.data) b += static_cast<size_t>(c.elems) * dtype_size(c.dtype);
  return b;
}

size_t ChunkStore::total_bytes() const {
  size_t b = 0;
  for (int k = 0; k < kNumChunkKinds; ++k) b += bytes(static_cast<ChunkKind>(k));
  return b;
}

void ChunkStore::set_state(int id, TensorState s) {
  const TensorState from = states_[id];
  TIDE_CHECK(is_legal_transition(from, s), "tensor '{}': illegal state change {} -> {}",
             layout_.slot(id).name, tensor_state_name(from), tensor_state_name(s));
  states_[id] = s;
}

bool ChunkStore::chunk_movable(int c) const {
  for (int id : layout_.tensors_in_chunk(c))
    if (states_[id] == TensorState::COMPUTE) return false;
  return true;
}

void ChunkStore::mark_grad_ready(int id) {
  set_state(id, TensorState::READY_FOR_REDUCE);
  const int c = layout_.slot(id).chunk;
  if (++ready_in_chunk_[c] == static_cast<int>(layout_.tensors_in_chunk(c).size()) &&
      on_chunk_grads_ready)
    on_chunk_grads_ready(c);
}

void ChunkStore::begin_step() {
  states_.assign(states_.size(), TensorState::HOLD);
  ready_in_chunk_.assign(ready_in_chunk_.size(), 0);
}

}  // namespace tide
