#pragma once
// ChunkStore: the memory of all model data, as one chunk list per kind with the layout of
// ChunkLayout. Kinds:
//
//   PARAM   the parameters the kernels compute with (compute dtype: f32, bf16 or f16)
//   GRAD    their gradients (same dtype)
//   MASTER  fp32 master parameters; with an f32 compute dtype this IS the PARAM list (unless
//           StoreOptions::separate_master: ZeRO-Offload keeps it on the host)
//   ADAM_M, ADAM_V  Adam's first and second moments (f32)
//
// Each chunk of each kind is a separate allocation from an Allocator, so placement policies
// move or free chunks one by one. A kind can be *sliced*: only this rank's slice of every chunk
// is allocated (ZeRO partitioning; with N ranks each holds 1/N of that kind's bytes). A chunk
// of a non-sliced kind is either resident whole or not at all.
//
// Ops reach parameters through acquire()/release(), which count users per tensor (the COMPUTE
// state) and call the PlacementPolicy's fetch/evict hooks; gradient completion is counted per
// micro-batch and reported through on_grads_ready.

#include <array>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "tide/core/trace.h"
#include "tide/kernels/ops.h"
#include "tide/memory/allocator.h"
#include "tide/memory/chunk_layout.h"
#include "tide/memory/placement.h"
#include "tide/memory/tensor_state.h"

namespace tide {

enum class ChunkKind : int { PARAM = 0, GRAD, MASTER, ADAM_M, ADAM_V };
constexpr int kNumChunkKinds = 5;
const char* chunk_kind_name(ChunkKind k);
constexpr unsigned kind_bit(ChunkKind k) {
  return 1u << static_cast<int>(k);
}
// The kinds ZeRO stage `stage` keeps only as this rank's slice (StoreOptions::sliced_kinds):
// 1 the optimizer states (master, m, v), 2 also the gradients, 3 also the parameters.
constexpr unsigned zero_sliced_kinds(int stage) {
  unsigned k = 0;
  if (stage >= 1)
    k |= kind_bit(ChunkKind::MASTER) | kind_bit(ChunkKind::ADAM_M) | kind_bit(ChunkKind::ADAM_V);
  if (stage >= 2) k |= kind_bit(ChunkKind::GRAD);
  if (stage >= 3) k |= kind_bit(ChunkKind::PARAM);
  return k;
}

struct StoreOptions {
  DType compute_dtype = DType::F32;  // PARAM (and, unless grad_dtype says otherwise, GRAD)
  // GRAD's dtype when it differs from the compute dtype: DeepSpeed's
  // data_types.grad_accum_dtype (bf16 parameters with f32 gradients). MASTER and ADAM are f32.
  std::optional<DType> grad_dtype;
  bool with_optimizer = true;  // false: no MASTER/ADAM_M/ADAM_V (inference, sampling)
  int group_rank = 0;          // this rank's slice of every chunk (DP rank)
  unsigned sliced_kinds = 0;   // kind_bit()s allocated only as this rank's slice (ZeRO)
  // Where PARAM and GRAD chunks go (the compute tier) and where MASTER/ADAM go. nullptr: the
  // store's own host allocator. Not owned.
  Allocator* compute = nullptr;
  Allocator* optimizer = nullptr;
  // Where this rank's slices of a sliced PARAM kind live; nullptr: `compute`. ZeRO-3 with
  // offload_param: the slices on the host; the policy gathers each chunk on use into a buffer
  // of the compute tier and frees it after use.
  Allocator* param_slices = nullptr;
  // Where a separate MASTER goes (separate_master, or 16-bit parameters); nullptr: `optimizer`.
  // ZeRO-Offload in f32: page-locked host memory, as the master is copied up as the parameters.
  Allocator* master = nullptr;
  // false: PARAM chunks start unallocated; the placement policy's fetch() brings them in.
  // (A sliced PARAM kind starts with only this rank's slice; fetch() gathers the rest.)
  bool params_resident = true;
  // true: MASTER gets its own f32 chunks from `optimizer` even when the compute dtype is f32
  // (ZeRO-Offload: the master weights live on the host tier, the parameters on the compute
  // tier); false: f32 MASTER aliases PARAM.
  bool separate_master = false;
  // kind_bit()s whose chunks (this rank's part of each) start unallocated: a placement puts
  // each on a tier with place_chunk() before anything reads it (placement.policy=auto starts
  // every chunk where its first use wants it, so the host never holds all of them). An f32
  // MASTER aliasing PARAM follows PARAM's placement.
  unsigned placed_kinds = 0;
};

struct Chunk {
  void* data = nullptr;  // what ops see; nullptr while not resident
  int64_t begin = 0;     // first element of the chunk held (rank r's slice: r * slice_elems)
  int64_t elems = 0;     // elements held
  DType dtype = DType::F32;
  Allocator* alloc = nullptr;  // nullptr when aliasing another kind's chunk (MASTER == PARAM)
  // Bytes allocated from `alloc` (0 for an alias); for a placed kind's chunk not yet placed,
  // the bytes it will take.
  size_t bytes = 0;
  // A sliced kind's own slice stays where it was allocated (`slice_home`) while a policy's
  // whole-chunk buffer is attached over it (`data`): the ZeRO-3 gather target, the ZeRO-2/3
  // gradient accumulation buffer.
  void* slice_home = nullptr;
  Device whole_device = Device::cpu();  // where the attached buffer is (with slice_home)
};

class ChunkStore {
 public:
  ChunkStore(ChunkLayout layout, StoreOptions options = {});
  ~ChunkStore();
  ChunkStore(const ChunkStore&) = delete;
  ChunkStore& operator=(const ChunkStore&) = delete;

  const ChunkLayout& layout() const { return layout_; }
  const StoreOptions& options() const { return opt_; }
  DType compute_dtype() const { return opt_.compute_dtype; }
  DType dtype(ChunkKind k) const;  // the element type of the kind's chunks
  bool has(ChunkKind k) const { return !chunks_[static_cast<int>(k)].empty(); }
  bool sliced(ChunkKind k) const { return opt_.sliced_kinds & kind_bit(k); }

  // View of tensor `id` inside the chunk list of kind `k`, shaped as declared; the chunk must
  // be resident whole.
  Tensor tensor(ChunkKind k, int id) const;
  // What this rank holds of chunk c of kind k, as a 1-D tensor (the whole chunk, padding
  // included, or the owned slice of a sliced kind).
  Tensor chunk(ChunkKind k, int c) const;
  // This rank's slice of chunk c of kind k, whether the kind is sliced (its own allocation,
  // also while a whole buffer is attached) or whole (a view into the chunk).
  Tensor slice(ChunkKind k, int c) const;
  const Chunk& chunk_info(ChunkKind k, int c) const { return chunks_[static_cast<int>(k)][c]; }
  // What this rank owns of chunk c of kind k: chunk_info, except that under an attached whole
  // buffer it is the own slice (data = slice_home). Checkpoints save and load this: the buffer
  // is a policy's copy (ZeRO-3's gathered parameters), refilled from the slices, so a load
  // written into it would be overwritten by the stale slices at the next gather.
  Chunk owned(ChunkKind k, int c) const;
  bool resident(ChunkKind k, int c) const { return chunk_info(k, c).data != nullptr; }
  // Resident and whole (not just this rank's slice): what ops need.
  bool whole(ChunkKind k, int c) const {
    return resident(k, c) && chunk_info(k, c).elems == layout_.chunk_elems(c);
  }
  // Zeroes every resident chunk of kind k (and an attached chunk's own slice) on `op`'s stream
  // (a chunk on a device is zeroed there, never by the host).
  void zero(ChunkKind k, const OpContext& op);

  // Placement primitives, for policies: allocate chunk c of kind k whole (zero-filled) from
  // `alloc`, or free it. A chunk with tensors in COMPUTE cannot be freed.
  void allocate_chunk(ChunkKind k, int c, Allocator& alloc);
  void free_chunk(ChunkKind k, int c);
  // Allocates what this rank holds of chunk c of a placed kind (StoreOptions::placed_kinds;
  // the whole chunk, or a sliced kind's own slice), zero-filled, from `alloc`; once.
  void place_chunk(ChunkKind k, int c, Allocator& alloc);
  // f32 training without a separate MASTER: MASTER is PARAM's bytes (no chunks of its own).
  bool master_aliases_param() const {
    return opt_.compute_dtype == DType::F32 && !opt_.separate_master;
  }
  // For a sliced kind: make chunk c whole by showing the ops `buffer` (chunk_elems(c) elements
  // of k's dtype, owned by the caller) instead of the own slice, which stays allocated and is
  // what slice() returns; detach_whole() goes back to the slice. The caller fills the buffer.
  // `device`: where the buffer is (a device's pool may cover a slice kept on the host:
  // offload_param).
  void attach_whole(ChunkKind k, int c, void* buffer, Device device = Device::cpu());
  void detach_whole(ChunkKind k, int c);
  // Moves what this rank holds of chunk c of kind k (the whole chunk, or a sliced kind's own
  // slice) to `to`: allocate there, copy the bytes, free the old allocation. An f32 MASTER that
  // aliases PARAM follows it. Refused while tensors of chunk c are in COMPUTE, while a whole
  // buffer is attached, for a chunk not resident, and for an alias (move the kind it aliases).
  // Returns the bytes copied (0 when the chunk is already in `to`). The copy is the mover's on
  // `op`'s stream (ordered after the ops queued there), waited for before the old allocation
  // goes.
  size_t move_chunk(ChunkKind k, int c, Allocator& to, const OpContext& op = {});
  // move_chunk into `dst` (chunk_info(k, c).bytes of `to`'s memory, given by the caller) without
  // the wait: returns the memory the chunk left, which the copy may still be reading. The caller
  // frees it after a wait for the stream, or reuses it for copies queued on the same stream.
  void* move_chunk_into(ChunkKind k, int c, void* dst, Allocator& to, const OpContext& op = {});
  bool attached(ChunkKind k, int c) const { return chunk_info(k, c).slice_home != nullptr; }

  // Bytes held per kind (aliases count once) and in total.
  size_t bytes(ChunkKind k) const;
  size_t total_bytes() const;

  // --- use of parameters -------------------------------------------------------------------
  void set_policy(PlacementPolicy* policy) { policy_ = policy; }
  // Where chunk moves (the policy's fetch, fetch_grads and an evict that frees the chunk) are
  // recorded, and where policies record their communication (trace.h); nullptr: not traced.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }
  Tracer* tracer() const { return tracer_; }
  // Tensors `ids` are about to be used by ops: each joins COMPUTE (one more user), and every
  // chunk of theirs that is not resident whole is fetched by the policy first: PARAM chunks
  // for FORWARD and BACKWARD, GRAD chunks for WEIGHT.
  void acquire(std::span<const int> ids, Use use);
  // The ops are done with `ids`: one user less each; a tensor with none left goes to
  // HOLD_AFTER_FWD / HOLD_AFTER_BWD, and a chunk with no tensor in COMPUTE is offered to the
  // policy's evict().
  void release(std::span<const int> ids, Use use);
  // An op that threw lets go of `ids`: one user less each, and nothing else (no state change,
  // no policy: nothing may communicate while an error unwinds), so that the policies can still
  // free their buffers when the engine goes.
  void abandon(std::span<const int> ids);
  TensorState state(int id) const { return states_[id]; }
  int users(int id) const { return users_[id]; }
  // True when no tensor of chunk c is in COMPUTE (the chunk may move).
  bool chunk_movable(int c) const { return chunk_users_[c] == 0; }

  // --- gradient completion ----------------------------------------------------------------
  // Starts a step of `micro_batches` micro-batches: states back to HOLD, counts to zero.
  void begin_step(int micro_batches = 1);
  // Tensor `id` has its whole gradient contribution from micro-batch `mb`. When that completes
  // chunk c for mb, the policy's on_grads_ready(c, mb) runs; after the last micro-batch the
  // tensor is READY_FOR_REDUCE.
  void mark_grad_ready(int id, int mb = 0);
  // Chunk c's gradients are complete for every micro-batch of the step.
  bool grads_complete(int c) const { return done_micro_batches_[c] == micro_batches_; }
  int micro_batches() const { return micro_batches_; }

 private:
  // Throws unless chunk c of kind k can move to `to` now (move_chunk's rules).
  void check_movable(ChunkKind k, int c, const Allocator& to) const;
  // Where chunk c of kind k is as the ops see it (an attached buffer: its device; an aliased
  // f32 MASTER: where its PARAM is).
  Device device_of(ChunkKind k, int c) const;
  void set_state(int id, TensorState s);
  // An f32 MASTER aliasing PARAM points at PARAM chunk c's bytes again (after it moved).
  void follow_param(int c);
  Chunk& at(ChunkKind k, int c) { return chunks_[static_cast<int>(k)][c]; }
  const Chunk& at(ChunkKind k, int c) const { return chunks_[static_cast<int>(k)][c]; }

  ChunkLayout layout_;
  StoreOptions opt_;
  std::unique_ptr<HostAllocator> host_;
  PlacementPolicy* policy_ = nullptr;
  Tracer* tracer_ = nullptr;
  std::array<std::vector<Chunk>, kNumChunkKinds> chunks_;
  std::vector<TensorState> states_;
  std::vector<int> users_;               // per tensor: ops holding it in COMPUTE
  std::vector<int> chunk_users_;         // per chunk: tensors in COMPUTE
  std::vector<int> tensor_done_;         // per tensor: micro-batches whose gradient is in
  std::vector<std::vector<int>> ready_;  // [chunk][mb]: tensors complete for mb
  std::vector<int> done_micro_batches_;  // per chunk: micro-batches complete
  int micro_batches_ = 1;
};

// Copies every chunk `to` and `from` both hold of every kind both have, through the mover on
// `op` (stores of the same layout and slicing, e.g. a device model's and its host copy for a
// checkpoint), and waits for the copies.
void copy_chunks(const OpContext& op, const ChunkStore& from, ChunkStore& to);

}  // namespace tide
