#include "tide/memory/chunk_layout.h"

#include <algorithm>

namespace tide {

int ChunkLayout::add(std::string name, Shape shape, bool decay) {
  TIDE_ASSERT(!packed());
  TensorSlot s;
  s.name = std::move(name);
  s.shape = shape;
  s.numel = shape.numel();
  s.decay = decay;
  slots_.push_back(std::move(s));
  return static_cast<int>(slots_.size()) - 1;
}

void ChunkLayout::pack(int64_t chunk_elems, int group_size) {
  TIDE_ASSERT(!packed() && !slots_.empty());
  TIDE_CHECK(group_size >= 1, "chunk group size must be at least 1 (got {})", group_size);
  int64_t largest = 0;
  for (const TensorSlot& s : slots_) largest = std::max(largest, s.numel);
  // Round up to a multiple of 16 elements so every chunk starts 64-byte aligned in f32.
  chunk_elems_ = (std::max(chunk_elems, largest) + 15) / 16 * 16;
  group_size_ = group_size;
  int chunk = 0;
  int64_t used = 0;
  chunk_tensors_.assign(1, {});
  for (int id = 0; id < num_tensors(); ++id) {
    TensorSlot& s = slots_[id];
    if (used + s.numel > chunk_elems_) {  // does not fit: start the next chunk
      ++chunk;
      used = 0;
      chunk_tensors_.emplace_back();
    }
    s.chunk = chunk;
    s.offset = used;
    used += s.numel;
    chunk_tensors_[chunk].push_back(id);
  }
  num_chunks_ = chunk + 1;
  num_chunks_ = (num_chunks_ + group_size - 1) / group_size * group_size;
  chunk_tensors_.resize(num_chunks_);
}

int ChunkLayout::find(const std::string& name) const {
  for (int id = 0; id < num_tensors(); ++id)
    if (slots_[id].name == name) return id;
  TIDE_FAIL("no model tensor is called '{}'", name);
}

int64_t ChunkLayout::payload_elems(int c) const {
  int64_t n = 0;
  for (int id : chunk_tensors_[c]) n += slots_[id].numel;
  return n;
}

int64_t ChunkLayout::num_params() const {
  int64_t n = 0;
  for (const TensorSlot& s : slots_) n += s.numel;
  return n;
}

}  // namespace tide
