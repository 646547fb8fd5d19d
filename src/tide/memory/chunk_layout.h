#pragma once
// ChunkLayout: where every model tensor lives inside chunks (PatrickStar), and how each chunk is
// sliced across the ranks of a data-parallel group (ColossalAI Gemini's scheme).
//
// Tensors are appended in forward-use order, in packing units (the tensors one op reads
// together: model/param_groups.h), and packed greedily: a chunk takes units until the next one
// would push it past the target size, so that an op's parameters sit in one chunk and ZeRO-3
// gathers (automatic placement moves) one chunk for it, not two. The default target is the
// largest unit. A unit larger than an explicit target is packed tensor by tensor; a tensor
// larger than the target gets a chunk of its own. A tensor never straddles two chunks, so every
// tensor is one contiguous view.
// Each chunk is sized to its payload, rounded up to a multiple of 16 x group_size elements, so
// that it splits into group_size equal slices, each 64-byte aligned in f32:
//
//   chunk 0: [wte ...................................][pad]   rank r owns slice r of it
//   chunk 1: [wpe][h.0.ln_1.weight][h.0.ln_1.bias][h.0.attn.c_attn.weight ...][pad]
//   ...
//
// Slicing every chunk (instead of giving whole chunks to ranks) balances the bytes each rank
// owns whatever the tensor sizes are, needs no padding chunks, and lets reduce-scatter and
// all-gather of a chunk work in place on contiguous memory. The same layout serves every kind
// of model data (compute params, grads, fp32 master, Adam m and v), so "chunk c" means the same
// tensors in each of them.

#include <cstdint>
#include <span>
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
  // Elements [0, norm_numel) count in the global gradient norm on this rank (numel unless
  // set_norm_numel says less): the rest are bitwise copies of elements that another rank
  // counts (the Llama family's key/value heads replicated over tensor-parallel ranks,
  // model/layout.h).
  int64_t norm_numel = 0;
};

// Elements of a chunk target of `mib` MiB of f32 elements: the unit of the config key
// chunk_size_mb, which `tide train` and `tide estimate` both read. 0 stays 0 (automatic).
int64_t chunk_elems_from_mib(double mib);

class ChunkLayout {
 public:
  // Element granularity of chunk sizes per group member (16 f32 = 64 bytes).
  static constexpr int64_t kAlignElems = 16;

  // Appends a tensor; returns its id (its index in forward-use order).
  int add(std::string name, Shape shape, bool decay);
  // Tensor `id` counts only its first `n` elements in the gradient norm (TensorSlot::norm_numel).
  void set_norm_numel(int id, int64_t n);
  // Starts a packing unit: the tensors added from here to the next begin_unit() stay in one
  // chunk when they fit in one. `own_chunk`: the unit starts a new chunk even when it would fit
  // in the current one. Without begin_unit() every tensor is a unit of its own.
  void begin_unit(bool own_chunk = false);

  // Packs the tensors into chunks of about `target_elems` elements (0: the largest unit's
  // size), each splittable into `group_size` equal slices.
  void pack(int64_t target_elems, int group_size = 1);

  bool packed() const { return !chunk_elems_.empty(); }
  int num_tensors() const { return static_cast<int>(slots_.size()); }
  int num_chunks() const { return static_cast<int>(chunk_elems_.size()); }
  int group_size() const { return group_size_; }
  int64_t target_elems() const { return target_elems_; }
  // Elements of chunk c (its payload plus the alignment padding at its end).
  int64_t chunk_elems(int c) const { return chunk_elems_[c]; }
  int64_t max_chunk_elems() const;
  int64_t max_tensor_elems() const;  // the largest tensor's elements
  // Elements of the pooled buffer that holds chunk c whole (ZeRO's communication buffers, a
  // BufferPool size class): the largest chunk halved as often as chunk c still fits (each
  // halving rounded up to the alignment granule). Halving classes keep the number of sizes
  // small (a chunk takes a buffer less than twice its size, and chunks of similar sizes share
  // buffers) where each chunk's exact size would leave free buffers of near sizes unusable
  // (gpt-7.5b, ZeRO-3, Nd = 1024: 12 buffers, 3.40 GiB, instead of 7, 2.01 GiB; at 1T the
  // embedding's chunk, 1.29e9 elements, takes a class of 1.31e9 instead of 2.62e9).
  int64_t buffer_elems(int c) const;
  // Rank r's slice of chunk c is elements [r * slice_elems(c), (r + 1) * slice_elems(c)).
  int64_t slice_elems(int c) const { return chunk_elems_[c] / group_size_; }
  const TensorSlot& slot(int id) const { return slots_[id]; }
  const std::vector<TensorSlot>& slots() const { return slots_; }
  // Id of the tensor called `name`; throws a tide::Error if there is none.
  int find(const std::string& name) const;
  // Id of the tensor called `name`, or -1 if there is none.
  int index_of(const std::string& name) const;
  // Ids of the tensors packed into chunk c.
  const std::vector<int>& tensors_in_chunk(int c) const { return chunk_tensors_[c]; }
  // The chunks tensors `ids` live in, ascending, each once (a block's chunks).
  std::vector<int> chunks_of(std::span<const int> ids) const;
  // Elements of those chunks (what gathering them all holds).
  int64_t chunk_elems_of(std::span<const int> ids) const;
  // Elements of chunk c holding tensor data (the rest is padding).
  int64_t payload_elems(int c) const;
  // All model parameters (sum of tensor sizes) vs. all chunk elements (with padding).
  int64_t num_params() const;
  int64_t total_elems() const;

 private:
  std::vector<TensorSlot> slots_;
  // Per tensor: it starts a packing unit / that unit must start a chunk (begin_unit).
  std::vector<bool> unit_start_, own_chunk_;
  bool units_ = false, pending_start_ = false, pending_own_ = false;
  std::vector<std::vector<int>> chunk_tensors_;
  std::vector<int64_t> chunk_elems_;
  int64_t target_elems_ = 0;
  int group_size_ = 1;
};

}  // namespace tide
