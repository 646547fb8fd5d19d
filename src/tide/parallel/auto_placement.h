#pragma once
// placement.policy=auto: PatrickStar's automatic chunk placement (Fang et al.,
// ../shared/papers/patrickstar.ja.md): each store's PlacementPolicy (policy()) decorates the
// engine's own policy of that store (stage 0's gradient all-reduce or ZeroPolicy, stages 1-3).
//
// Why: a model whose states (params, grads, Adam m and v: 16 bytes per parameter in f32) do
// not fit the device still trains when the chunks move between the device and the host on
// demand. PatrickStar's observation is that the non-model memory (activations, communication
// buffers) varies a lot over a step, so a fixed split (ZeRO-Offload: all optimizer state on the
// host) wastes the device whenever activations are small; recording the non-model memory per
// access in a warm-up step lets every later access use exactly what is left.
//
// Tiers: the compute tier is the budgeted allocator of placement.device_memory_limit (on a GPU
// the device), the host tier a HostAllocator (page-locked with placement.pin_memory). A store
// whose kinds are placed (StoreOptions::placed_kinds: tide train's) has its chunks allocated
// here, soonest first use first on the compute tier while they fit its limit at the start,
// the rest on the host: the host never holds every chunk, so the largest model is bound by
// the device and the host together. Chunks allocated already may start on either tier.
// The item that moves is what this rank holds of one chunk of one kind: the whole chunk, or a
// sliced kind's own slice (ZeRO). An f32 MASTER aliases PARAM and moves with it. ZeRO-3 on 2 or
// more ranks: F and B read the parameters the ZeRO-3 gathers put into buffers of the compute
// tier (from buffer_allocator()), so the owned PARAM slices are needed there only by Adam; its
// persistent chunks stay gathered (attached) and their slices where they are.
//
// One placement shares the budget between every store of a pipeline stage (its model chunks:
// two or more under interleaved 1F1B and ZB-V), so that an item of one chunk is evicted for
// another's access when its next use is farther.
//
// A step is a list of accesses (positions): the parameter-group accesses of the engine (F and B
// need the group's PARAM chunks, W its GRAD chunks), in the schedule's order over the stores,
// then one optimizer access per chunk c of each store (its PARAM, GRAD, ADAM_M, ADAM_V and a
// separate MASTER). Before each access:
//   * the limit for chunks on the compute tier is device_memory_limit minus the non-model bytes
//     of that access: in the warm-up (the first step) the bytes measured now; afterwards the max
//     of what the warm-up recorded for this access (between it and the next) and what is in use
//     now. Non-model bytes = the compute allocator's bytes that are not chunks (ZeRO's buffers)
//     + the micro-batches' activation arena bytes in use;
//   * the items the access needs move in; while they do not fit, the movable item on the
//     compute tier whose next use (in the recorded order, wrapping around to the next step) is
//     farthest away moves to the host. Not movable: items the access needs, chunks with tensors
//     in COMPUTE, attached buffers, items the inner policy is communicating on (busy(); when
//     nothing else can go, settle() waits for the oldest of them).
// ZeRO's buffers come from buffer_allocator(), which makes room the same way before it takes
// bytes from the budget, so a buffer the pool adds in any step fits too.
//
// Optimizer: Adam of chunk c runs where its state is put by its optimizer access: if all its
// items fit on the compute tier (evicting farther ones), there ("updated on the compute tier");
// otherwise every item of chunk c moves to the host and the update runs there. On the CPU both
// are the same AdamW code on the same values, so the result is bitwise the policy=device run;
// on a GPU the first is the device Adam, the second the CPU Adam. Simple and always correct;
// the cost is that a chunk updated on the host brings its PARAM and GRAD back with it.
//
// On a device every move is a copy on the copy stream (make_copy_context), after an event of the
// compute stream (the ops that wrote the chunk, or last read the memory it goes to). The ops
// that need a moved item wait for its copy on the device; the host does not. Prefetch (with
// page-locked host memory, after the warm-up): once an access's items are in, the next
// access's missing items move in too, evicting what that access's limit needs evicted (never an
// item either access needs, one in use, attached or under communication), beside the ops of
// this access; the compute stream waits for those copies when the next access begins, so no
// host code that waits for it (the tied sum, Adam on the host tier) reads a chunk still moving.
//
// Counters per step (StepStats::placement): bytes and moves each way, evictions, prefetched
// moves, the seconds the host spent on moves (synchronous copies on the CPU: their whole time),
// and the chunks updated on each tier.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "tide/memory/chunk_blocks.h"
#include "tide/memory/chunk_store.h"
#include "tide/parallel/zero.h"

namespace tide {

struct PlacementStepCounters {
  uint64_t bytes_to_host = 0, bytes_to_compute = 0;
  int moves_to_host = 0, moves_to_compute = 0;
  int evictions = 0;   // moves to the host to make room
  int prefetches = 0;  // moves to the compute tier for the next access, ahead of it
  // Host waits to give the compute tier's free chunk memory back to the budget: a move or a
  // buffer finding no free block that holds it and no room in the budget (AutoPlacement::room_for).
  int cache_releases = 0;
  double wait_seconds = 0;     // the compute blocked on moves
  int updated_on_compute = 0;  // chunks whose Adam ran on the compute tier
  int updated_on_host = 0;

  PlacementStepCounters& operator+=(const PlacementStepCounters& o) {  // several stores' step
    bytes_to_host += o.bytes_to_host;
    bytes_to_compute += o.bytes_to_compute;
    moves_to_host += o.moves_to_host;
    moves_to_compute += o.moves_to_compute;
    evictions += o.evictions;
    prefetches += o.prefetches;
    cache_releases += o.cache_releases;
    wait_seconds += o.wait_seconds;
    updated_on_compute += o.updated_on_compute;
    updated_on_host += o.updated_on_host;
    return *this;
  }
};

// What the executor needs for placement.policy=auto; device == nullptr: policy=device.
struct AutoPlacementSettings {
  Allocator* device = nullptr;  // the budgeted compute tier (placement.device_memory_limit)
  Allocator* host = nullptr;    // the store's allocator of every kind
};

// One of the stores a placement shares its budget between (a pipeline stage's model chunks:
// interleaved 1F1B and ZB-V run two or more per stage).
struct PlacedStore {
  ChunkStore* store = nullptr;
  std::vector<std::vector<int>> group_chunks;  // [g]: the chunks of parameter group g
};
// A parameter-group access of placed store `store`.
struct PlacedAccess {
  int store = 0;
  ParamAccess access;
};

class AutoPlacement {
 public:
  // `stores`: what shares the budget; `device`: the budgeted compute tier (its limit is the
  // budget); `host`: where chunks are evicted to (the stores' allocator of every kind). The
  // stores' placed chunks are allocated now (see the top). `accesses`: the group accesses of every
  // step, in order over all the stores. `activation_bytes`: the activation bytes in use now. `op`:
  // the models' context; on a device the moves are the mover's copies on its stream
  // (ChunkStore::move_chunk), and `activation_bytes` is empty when the activations come from
  // `device` itself (they are in its allocated bytes already). `copies`: the device's copy stream,
  // which the moves run on (left on the CPU: op's stream, and nothing is prefetched).
  AutoPlacement(std::vector<PlacedStore> stores, Allocator& device, Allocator& host,
                std::vector<PlacedAccess> accesses, std::function<size_t()> activation_bytes,
                const OpContext& op = {}, const OpContext& copies = {});
  ~AutoPlacement();
  // Store s's policy (ChunkStore::set_policy): it places before every access and delegates
  // every hook to `inner`, the engine's own policy of that store.
  PlacementPolicy& policy(int s, PlacementPolicy* inner);
  // Where ZeRO's buffers come from: the compute tier, room made first.
  Allocator& buffer_allocator();

  // A step begins (counters reset).
  void begin_step();
  // Before Adam of chunk c of store s: puts its items on one tier and says which. The stores'
  // updates run in store order.
  Tier prepare_update(int s, int chunk);
  // The step is done: the first one ends the warm-up.
  void end_step();
  // A new schedule (zb-auto's, built after its measured first step): the step's accesses in
  // their new order. Chunks stay where they are; the next step is a warm-up again, recording
  // the non-model bytes of the new order.
  void replan(std::vector<PlacedAccess> accesses);

  const PlacementStepCounters& counters() const { return counters_; }
  bool warmed_up() const { return !warm_up_; }
  // The largest non-model bytes the warm-up recorded for an access (0 before it ends).
  size_t recorded_non_model_bytes() const;
  // Bytes of chunk items on the compute tier now (their blocks may be larger).
  size_t compute_chunk_bytes() const { return blocks_->allocated(); }

  // Makes `bytes` free on the compute tier (for a buffer), evicting as for an access.
  void make_room_for_buffer(size_t bytes);

 private:
  class BufferAllocator;
  class StorePolicy;
  // What moves: what this rank holds of one chunk of one kind of one store.
  struct Item {
    int store;
    ChunkKind kind;
    int chunk;
  };
  int item_index(int s, ChunkKind k, int c) const {
    return first_item_[s] + static_cast<int>(k) * chunks_of(s) + c;
  }
  int chunks_of(int s) const { return stores_[s].store->layout().num_chunks(); }
  ChunkStore& store_of(int item) const { return *stores_[items_[item].store].store; }
  int num_items() const { return static_cast<int>(items_.size()); }
  bool movable_kind(const ChunkStore& st, ChunkKind k) const;
  bool on_device(int item) const;
  size_t item_bytes(int item) const;
  bool attached(int item) const;
  bool busy(int item) const;
  void settle(int item);
  // Positions: group accesses 0..A-1, then the optimizer access of each chunk of each store.
  int positions() const { return static_cast<int>(accesses_.size()) + total_chunks_; }
  std::vector<int> needs_at(int pos) const;
  // The (store, chunk) whose optimizer access is position `pos` (>= the group accesses').
  std::pair<int, int> update_at(int pos) const;
  int64_t next_use(int item, int pos) const;
  size_t non_model_now() const;
  // The non-model bytes at `pos`: now, or the warm-up's record there when larger.
  size_t non_model_at(int pos) const;
  size_t limit_at(int pos) const;
  std::string position_name(int pos) const;
  // Moves `need` in within the limit of position `pos`, evicting farthest next use first; with
  // `allow_fail`, returns false instead of failing when they cannot fit (nothing moved in).
  bool make_resident(std::span<const int> need, int pos, bool allow_fail);
  // The error for a position that cannot get the `missing` bytes of its chunks in.
  [[noreturn]] void fail_to_fit(int pos, size_t missing) const;
  // Never evicted now: an item of `keep` or of the current access, or one whose chunk has
  // tensors in use.
  bool held(int item, std::span<const int> keep) const;
  // Frees room on the compute tier: moves to the host the item whose next use after `pos` is
  // farthest (not held for `keep`, not attached, no communication in flight; with `fits`, only
  // one whose block would hold `fits` bytes); when only items under communication are left,
  // waits for one (settle()), unless `ahead` (a prefetch's eviction, which never waits) or
  // `fits`. False: nothing can move.
  bool evict_one(int pos, std::span<const int> keep, bool ahead = false, size_t fits = 0);
  // Moves `item` to tier `to` on the copy stream. The compute stream waits for the copy now, or
  // with `ahead` (a prefetch's move) when the next access begins (land_prefetches).
  void move(int item, Tier to, bool ahead = false);
  // After the items of access `pos` are in: the next access's (see the top).
  void prefetch_after(int pos);
  // The compute stream waits for the prefetches' copies.
  void land_prefetches();
  // The memory a move leaves is kept for a later move into that tier. A move queues its copy and
  // keeps its source at once, without a wait: the memory is reused only as the target of a later
  // move, a copy queued on the same stream after the copy that reads it, so no move waits for the
  // stream, and once the step's moves have run once none allocates. On the compute tier it is a
  // free block of ChunkBlocks (memory/chunk_blocks.h: a chunk takes the smallest that holds it,
  // up to twice its bytes). On the host it is a block kept per size, only when the host's memory
  // is page-locked: then the host holds memory for every chunk that has been there; pageable
  // host memory is freed after the copy up, which returned once done.
  // `bytes` of the host tier for `what`: cached, or allocated.
  void* take_host_block(size_t bytes, const std::string& what);
  // Gives the free blocks back to the budget after a wait for the copies that read them
  // (counted in cache_releases); false when there is none.
  bool release_free_blocks();
  // Makes a block for item `item` available at position `pos`: an eviction of a chunk whose
  // block holds it, else the free blocks given back (not `ahead`: that waits), else any eviction
  // as evict_one(pos, keep, ahead). False when nothing more can go.
  bool room_for(int item, int pos, std::span<const int> keep, bool ahead = false);
  // The compute tier's bytes that are not chunk blocks: ZeRO's buffers, and the activations when
  // they come from the compute tier.
  size_t buffer_bytes() const { return device_.allocated() - blocks_->block_bytes(); }
  void record(int pos);
  // Store s is about to acquire tensors `ids` for `use`.
  void on_acquire(int s, std::span<const int> ids, Use use);
  // The uses of every item and an empty record for the step's accesses.
  void plan();
  // Allocates the placed `items` (none resident yet) on their starting tiers.
  void place_at_start(std::vector<int> items);

  std::vector<PlacedStore> stores_;
  std::vector<std::unique_ptr<StorePolicy>> policies_;  // [s], made by policy()
  Allocator& device_;
  Allocator& host_;
  OpContext op_;
  OpContext copies_;          // the moves' stream (op_ on the CPU)
  bool prefetching_ = false;  // a device, page-locked host memory, a copy stream of its own
  std::optional<StreamEvent> prefetched_;  // after the last prefetch's copies
  std::unique_ptr<BufferAllocator> buffers_;
  std::function<size_t()> activation_bytes_;
  std::vector<Item> items_;
  std::vector<int> first_item_;        // [s]: store s's first item
  std::vector<int> first_update_;      // [s]: the optimizer position of store s's chunk 0, less A
  std::vector<bool> gathered_params_;  // [s]: ZeRO-3 on 2+ ranks: F and B read gathered buffers
  int total_chunks_ = 0;
  size_t budget_ = 0;
  // The compute tier's chunk memory, from `device_` (owned; ChunkBlocks::abandon lets it
  // outlive this placement while the stores still hold chunks in it).
  std::unique_ptr<ChunkBlocks, ChunkBlocks::Abandon> blocks_;
  std::multimap<size_t, void*> host_cache_;  // bytes -> page-locked host memory (see above)

  std::vector<PlacedAccess> accesses_;
  std::vector<std::vector<int>> uses_;  // per item: the positions that need it, ascending
  int pos_ = 0;                         // the access under way (-1: outside a step)
  bool in_step_ = false;
  bool warm_up_ = true;
  std::vector<size_t> recorded_;  // per position: the warm-up's non-model bytes
  std::vector<int> current_need_;
  PlacementStepCounters counters_;
};

}  // namespace tide
