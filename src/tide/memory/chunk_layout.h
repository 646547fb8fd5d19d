#pragma once
// ChunkLayout: where every model tensor lives inside fixed-size chunks (PatrickStar).
//
// Tensors are appended in forward-use order and packed greedily into chunks of `chunk_elems`
// elements; a tensor never straddles two chunks, so the end of a chunk may be padding. The same
// layout is used for every kind of model data (compute params, grads, fp32 master, Adam m, v),
// so "chunk c of the grads" covers exactly the tensors of "chunk c of the params".
//
// With data parallelism over N ranks the number of chunks is padded to a multiple of N: chunks
// form communication groups of N consecutive chunks, and chunk c is owned by DP rank c % N
// (ZeRO partitioning is a policy over this ownership).
//
//   chunk 0: [wte ............][wpe ....][pad]
//   chunk 1: [h.0.ln_1.weight][h.0.ln_1.bias][h.0.attn.c_attn.weight ....][pad]
//   ...

#include <cstdint>
#include <string>
#include <vector>

#include "tide/core/tensor.h"

namespace tide {

struct TensorSlot {
  std::string name;
  Shape shape;
  int64_t numel = 0;
  int chunk = -1;      // chunk index
  int64_t offset = 0;  // element offset inside the chunk
  bool decay = false;  // takes weight decay (matrices and embeddings; not biases or norms)
};

class ChunkLayout {
 public:
  // Appends a tensor; returns its id (its index in forward-use order).
  int add(std::string name, Shape shape, bool decay);

  // Packs the tensors. `chunk_elems` is raised to the largest tensor when smaller (a warning is
  // the caller's business); the chunk count is padded to a multiple of `group_size`.
  void pack(int64_t chunk_elems, int group_size = 1);

  bool packed() const { return chunk_elems_ > 0; }
  int num_tensors() const { return static_cast<int>(slots_.size()); }
  int num_chunks() const { return num_chunks_; }
  int group_size() const { return group_size_; }
  int64_t chunk_elems() const { return chunk_elems_; }
  const TensorSlot& slot(int id) const { return slots_[id]; }
  const std::vector<TensorSlot>& slots() const { return slots_; }
  // Id of the tensor called `name`; throws a tide::Error if there is none.
  int find(const std::string& name) const;
  // Ids of the tensors packed into chunk c (empty for padding chunks).
  const std::vector<int>& tensors_in_chunk(int c) const { return chunk_tensors_[c]; }
  // Elements of chunk c holding tensor data (the rest is padding).
  int64_t payload_elems(int c) const;
  // All model parameters (sum of tensor sizes) vs. all chunk elements (with padding).
  int64_t num_params() const;
  int64_t total_elems() const { return int64_t{num_chunks_} * chunk_elems_; }
  int owner_of_chunk(int c) const { return c % group_size_; }

 private:
  std::vector<TensorSlot> slots_;
  std::vector<std::vector<int>> chunk_tensors_;
  int64_t chunk_elems_ = 0;
  int num_chunks_ = 0;
  int group_size_ = 1;
};

}  // namespace tide
