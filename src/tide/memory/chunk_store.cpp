#include "tide/memory/chunk_store.h"

#include "tide/core/arena.h"
#include "tide/kernels/mover.h"

namespace tide {

const char* chunk_kind_name(ChunkKind k) {
  static const char* names[] = {"param", "grad", "master", "adam_m", "adam_v"};
  return names[static_cast<int>(k)];
}

namespace {
size_t chunk_bytes(int64_t elems, DType t) {
  return Arena::aligned(static_cast<size_t>(elems) * dtype_size(t));
}
}  // namespace

ChunkStore::ChunkStore(ChunkLayout layout, StoreOptions options)
    : layout_(std::move(layout)), opt_(options), host_(std::make_unique<HostAllocator>()) {
  TIDE_ASSERT(layout_.packed());
  const int n = layout_.num_chunks(), N = layout_.group_size();
  TIDE_CHECK(opt_.group_rank >= 0 && opt_.group_rank < N,
             "chunk group rank {} is outside a group of {}", opt_.group_rank, N);
  if (!opt_.compute) opt_.compute = host_.get();
  if (!opt_.optimizer) opt_.optimizer = host_.get();
  const bool alias_master = master_aliases_param();
  for (int k = 0; k < kNumChunkKinds; ++k) {
    const auto kind = static_cast<ChunkKind>(k);
    const bool optimizer_kind = k >= static_cast<int>(ChunkKind::MASTER);
    if (optimizer_kind && !opt_.with_optimizer) continue;
    const DType t = dtype(kind);
    chunks_[k].resize(n);
    for (int c = 0; c < n; ++c) {
      Chunk& ch = chunks_[k][c];
      ch.dtype = t;
      ch.elems = layout_.chunk_elems(c);
      if (sliced(kind)) {
        ch.elems = layout_.slice_elems(c);
        ch.begin = opt_.group_rank * ch.elems;
      }
      if (kind == ChunkKind::MASTER && alias_master) {
        // f32 training: the master weights are the compute weights (no copy, no rounding).
        continue;  // filled in below, once PARAM chunks exist
      }
      if (kind == ChunkKind::PARAM && !opt_.params_resident) continue;
      if (opt_.placed_kinds & kind_bit(kind)) {  // place_chunk() allocates it
        ch.bytes = chunk_bytes(ch.elems, t);
        continue;
      }
      const bool offloaded_param =
          kind == ChunkKind::PARAM && sliced(kind) && opt_.param_slices != nullptr;
      Allocator& a = kind == ChunkKind::MASTER && opt_.master ? *opt_.master
                     : optimizer_kind                         ? *opt_.optimizer
                     : offloaded_param                        ? *opt_.param_slices
                                                              : *opt_.compute;
      ch.alloc = &a;
      ch.bytes = chunk_bytes(ch.elems, t);
      ch.data = a.allocate(ch.bytes, fmt::format("{} chunk {}", chunk_kind_name(kind), c));
    }
  }
  if (opt_.with_optimizer && alias_master) {
    TIDE_CHECK(opt_.params_resident,
               "f32 master weights alias the parameters, which must then stay resident");
    for (int c = 0; c < n; ++c) follow_param(c);  // (a placed PARAM: once it is placed)
  }
  const int nt = layout_.num_tensors();
  states_.assign(nt, TensorState::HOLD);
  users_.assign(nt, 0);
  tensor_done_.assign(nt, 0);
  chunk_users_.assign(n, 0);
  begin_step(1);
}

DType ChunkStore::dtype(ChunkKind k) const {
  if (k == ChunkKind::PARAM) return opt_.compute_dtype;
  if (k == ChunkKind::GRAD) return opt_.grad_dtype.value_or(opt_.compute_dtype);
  return DType::F32;
}

ChunkStore::~ChunkStore() {
  for (auto& list : chunks_)
    for (Chunk& c : list)
      if (c.alloc) c.alloc->free(c.slice_home ? c.slice_home : c.data, c.bytes);
}

void PlacementPolicy::fetch_grads(ChunkStore&, int chunk) {
  TIDE_FAIL(
      "the gradients of chunk {} are not resident and this placement policy cannot bring "
      "them in",
      chunk);
}

Tensor ChunkStore::tensor(ChunkKind k, int id) const {
  const TensorSlot& s = layout_.slot(id);
  const Chunk& c = chunks_[static_cast<int>(k)].at(s.chunk);
  TIDE_CHECK(c.data != nullptr, "tensor '{}' ({}) is not resident: its chunk {} is not allocated",
             s.name, chunk_kind_name(k), s.chunk);
  TIDE_CHECK(s.offset >= c.begin && s.offset + s.numel <= c.begin + c.elems,
             "tensor '{}' ({}) is not held by this rank: only a slice of chunk {} is", s.name,
             chunk_kind_name(k), s.chunk);
  char* p = static_cast<char*>(c.data) + (s.offset - c.begin) * int64_t(dtype_size(c.dtype));
  return Tensor(p, s.shape, c.dtype, device_of(k, s.chunk));
}

Tensor ChunkStore::chunk(ChunkKind k, int c) const {
  const Chunk& ch = chunks_[static_cast<int>(k)].at(c);
  TIDE_CHECK(ch.data != nullptr, "{} chunk {} is not resident", chunk_kind_name(k), c);
  return Tensor(ch.data, Shape{ch.elems}, ch.dtype, device_of(k, c));
}

Tensor ChunkStore::slice(ChunkKind k, int c) const {
  const Chunk& ch = chunks_[static_cast<int>(k)].at(c);
  if (ch.slice_home)
    return Tensor(ch.slice_home, Shape{layout_.slice_elems(c)}, ch.dtype, ch.alloc->device());
  Tensor whole = chunk(k, c);
  const int64_t n = layout_.slice_elems(c);
  if (whole.numel() == n) return whole;
  const int64_t off = opt_.group_rank * n;
  return Tensor(static_cast<char*>(whole.data) + off * int64_t(dtype_size(whole.dtype)), Shape{n},
                whole.dtype, whole.device);
}

Chunk ChunkStore::owned(ChunkKind k, int c) const {
  Chunk ch = chunks_[static_cast<int>(k)].at(c);
  if (ch.slice_home) {  // as detach_whole leaves it
    ch.data = ch.slice_home;
    ch.slice_home = nullptr;
    ch.elems = layout_.slice_elems(c);
    ch.begin = opt_.group_rank * ch.elems;
  }
  return ch;
}

Device ChunkStore::device_of(ChunkKind k, int c) const {
  const Chunk& ch = chunks_[static_cast<int>(k)][c];
  if (ch.slice_home) return ch.whole_device;
  if (ch.alloc) return ch.alloc->device();
  // f32 master weights alias the parameters: the same bytes, where the parameters are.
  if (k == ChunkKind::MASTER && ch.data) return device_of(ChunkKind::PARAM, c);
  return Device::cpu();
}

void ChunkStore::zero(ChunkKind k, const OpContext& op) {
  std::vector<Tensor> zeroed;  // zeroed together: one wait for those on the host tier
  for (int i = 0; i < static_cast<int>(chunks_[static_cast<int>(k)].size()); ++i) {
    const Chunk& c = chunks_[static_cast<int>(k)][i];
    if (c.data) zeroed.emplace_back(c.data, Shape{c.elems}, c.dtype, device_of(k, i));
    if (c.slice_home)
      zeroed.emplace_back(c.slice_home, Shape{static_cast<int64_t>(c.bytes / dtype_size(c.dtype))},
                          c.dtype, c.alloc->device());
  }
  fill_zero(op, zeroed);
}

void ChunkStore::allocate_chunk(ChunkKind k, int c, Allocator& alloc) {
  Chunk& ch = at(k, c);
  TIDE_CHECK(ch.data == nullptr, "{} chunk {} is already resident (free it first)",
             chunk_kind_name(k), c);
  ch.begin = 0;
  ch.elems = layout_.chunk_elems(c);
  ch.alloc = &alloc;
  ch.bytes = chunk_bytes(ch.elems, ch.dtype);
  ch.data = alloc.allocate(ch.bytes, fmt::format("{} chunk {}", chunk_kind_name(k), c));
}

void ChunkStore::free_chunk(ChunkKind k, int c) {
  Chunk& ch = at(k, c);
  TIDE_CHECK(chunk_users_[c] == 0, "{} chunk {} cannot be freed: ops are using its tensors",
             chunk_kind_name(k), c);
  TIDE_CHECK(!ch.slice_home, "{} chunk {} has a buffer attached: detach it first",
             chunk_kind_name(k), c);
  if (ch.alloc) ch.alloc->free(ch.data, ch.bytes);
  ch.data = nullptr;
  ch.alloc = nullptr;
  ch.bytes = 0;
}

size_t ChunkStore::move_chunk(ChunkKind k, int c, Allocator& to, const OpContext& op) {
  const Chunk& ch = at(k, c);
  if (ch.alloc == &to && ch.data) return 0;
  check_movable(k, c, to);
  Allocator& from = *ch.alloc;
  const size_t bytes = ch.bytes;
  void* old = move_chunk_into(
      k, c, to.allocate(bytes, fmt::format("{} chunk {}", chunk_kind_name(k), c)), to, op);
  synchronize(op);
  from.free(old, bytes);
  return bytes;
}

void ChunkStore::check_movable(ChunkKind k, int c, const Allocator& to) const {
  const Chunk& ch = at(k, c);
  TIDE_CHECK(ch.data != nullptr, "{} chunk {} is not resident: there is nothing to move",
             chunk_kind_name(k), c);
  TIDE_CHECK(ch.alloc != nullptr,
             "{} chunk {} aliases the parameters (f32 master weights): move the param chunk",
             chunk_kind_name(k), c);
  TIDE_CHECK(chunk_users_[c] == 0, "{} chunk {} cannot move: ops are using its tensors",
             chunk_kind_name(k), c);
  TIDE_CHECK(!ch.slice_home, "{} chunk {} cannot move: a whole buffer is attached over its slice",
             chunk_kind_name(k), c);
  TIDE_CHECK(ch.alloc != &to, "{} chunk {} is already in {} memory", chunk_kind_name(k), c,
             to.name());
}

void* ChunkStore::move_chunk_into(ChunkKind k, int c, void* dst, Allocator& to,
                                  const OpContext& op) {
  check_movable(k, c, to);
  Chunk& ch = at(k, c);
  const Shape shape{static_cast<int64_t>(ch.bytes / dtype_size(ch.dtype))};
  copy(op, Tensor(dst, shape, ch.dtype, to.device()),
       Tensor(ch.data, shape, ch.dtype, ch.alloc->device()));
  void* old = ch.data;
  ch.data = dst;
  ch.alloc = &to;
  if (k == ChunkKind::PARAM) follow_param(c);
  return old;
}

void ChunkStore::follow_param(int c) {
  if (!has(ChunkKind::MASTER) || !master_aliases_param()) return;
  Chunk& m = at(ChunkKind::MASTER, c);
  const Chunk& p = at(ChunkKind::PARAM, c);
  m.alloc = nullptr;
  m.data = p.data ? static_cast<char*>(p.data) + (m.begin - p.begin) * 4 : nullptr;
}

void ChunkStore::place_chunk(ChunkKind k, int c, Allocator& alloc) {
  Chunk& ch = at(k, c);
  TIDE_CHECK((opt_.placed_kinds & kind_bit(k)) && ch.data == nullptr,
             "{} chunk {} is not a placed chunk waiting for its tier (StoreOptions::placed_kinds)",
             chunk_kind_name(k), c);
  ch.alloc = &alloc;
  ch.data = alloc.allocate(ch.bytes, fmt::format("{} chunk {}", chunk_kind_name(k), c));
  if (k == ChunkKind::PARAM) follow_param(c);
}

void ChunkStore::attach_whole(ChunkKind k, int c, void* buffer, Device device) {
  Chunk& ch = at(k, c);
  TIDE_CHECK(sliced(k) && ch.data && !ch.slice_home,
             "{} chunk {}: a whole buffer attaches only over the resident slice of a sliced kind",
             chunk_kind_name(k), c);
  ch.slice_home = ch.data;
  ch.whole_device = device;
  ch.data = buffer;
  ch.begin = 0;
  ch.elems = layout_.chunk_elems(c);
}

void ChunkStore::detach_whole(ChunkKind k, int c) {
  Chunk& ch = at(k, c);
  TIDE_CHECK(ch.slice_home, "{} chunk {} has no buffer attached", chunk_kind_name(k), c);
  TIDE_CHECK(k != ChunkKind::PARAM || chunk_users_[c] == 0,
             "param chunk {} cannot be detached: ops are using its tensors", c);
  ch.data = ch.slice_home;
  ch.slice_home = nullptr;
  ch.elems = layout_.slice_elems(c);
  ch.begin = opt_.group_rank * ch.elems;
}

size_t ChunkStore::bytes(ChunkKind k) const {
  size_t b = 0;
  for (const Chunk& c : chunks_[static_cast<int>(k)])
    if (c.alloc && c.data) b += c.bytes;
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

void ChunkStore::acquire(std::span<const int> ids, Use use) {
  if (policy_) policy_->on_acquire(*this, ids, use);
  for (int id : ids) {
    const int c = layout_.slot(id).chunk;
    // A W reads only its stash and writes gradients: its parameters need not be resident.
    if (use != Use::WEIGHT && !whole(ChunkKind::PARAM, c)) {
      TIDE_CHECK(policy_ != nullptr,
                 "tensor '{}' is not resident and no placement policy can fetch chunk {}",
                 layout_.slot(id).name, c);
      const TraceSpan span(tracer_, "fetch params", "memory", {{"chunk", c}});
      policy_->fetch(*this, c, use);
      TIDE_CHECK(whole(ChunkKind::PARAM, c), "the placement policy did not fetch chunk {}", c);
    }
    if (use == Use::WEIGHT && has(ChunkKind::GRAD) && !whole(ChunkKind::GRAD, c)) {
      TIDE_CHECK(policy_ != nullptr,
                 "the gradient of '{}' is not resident and no placement policy can fetch chunk {}",
                 layout_.slot(id).name, c);
      const TraceSpan span(tracer_, "fetch grads", "memory", {{"chunk", c}});
      policy_->fetch_grads(*this, c);
      TIDE_CHECK(whole(ChunkKind::GRAD, c), "the placement policy did not fetch gradient chunk {}",
                 c);
    }
    if (users_[id]++ == 0) {
      set_state(id, TensorState::COMPUTE);
      ++chunk_users_[c];
    }
  }
}

void ChunkStore::release(std::span<const int> ids, Use use) {
  for (int id : ids) {
    TIDE_CHECK(users_[id] > 0, "tensor '{}' released more often than acquired",
               layout_.slot(id).name);
    if (--users_[id] > 0) continue;
    set_state(id, use == Use::FORWARD ? TensorState::HOLD_AFTER_FWD : TensorState::HOLD_AFTER_BWD);
    const int c = layout_.slot(id).chunk;
    if (--chunk_users_[c] != 0 || !policy_) continue;
    if (!tracer_) {
      policy_->evict(*this, c, use);
      continue;
    }
    // Traced only when the chunk really leaves (most evict() calls keep it where it is).
    const bool was_whole = whole(ChunkKind::PARAM, c);
    const double t0 = Tracer::now_us();
    policy_->evict(*this, c, use);
    if (was_whole && !whole(ChunkKind::PARAM, c))
      tracer_->add("evict params", "memory", 0, t0, Tracer::now_us() - t0, {{"chunk", c}});
  }
}

void ChunkStore::abandon(std::span<const int> ids) {
  for (int id : ids) {
    if (users_[id] == 0) continue;
    --users_[id];
    if (users_[id] == 0) --chunk_users_[layout_.slot(id).chunk];
  }
}

void ChunkStore::begin_step(int micro_batches) {
  TIDE_CHECK(micro_batches >= 1, "a step needs at least one micro-batch (got {})", micro_batches);
  for (size_t id = 0; id < states_.size(); ++id)
    TIDE_CHECK(users_[id] == 0, "a step cannot begin while tensor '{}' is in use",
               layout_.slot(static_cast<int>(id)).name);
  micro_batches_ = micro_batches;
  states_.assign(states_.size(), TensorState::HOLD);
  tensor_done_.assign(tensor_done_.size(), 0);
  ready_.assign(layout_.num_chunks(), std::vector<int>(micro_batches, 0));
  done_micro_batches_.assign(layout_.num_chunks(), 0);
}

void ChunkStore::mark_grad_ready(int id, int mb) {
  TIDE_CHECK(mb >= 0 && mb < micro_batches_, "micro-batch {} is outside this step's {}", mb,
             micro_batches_);
  const int c = layout_.slot(id).chunk;
  TIDE_CHECK(tensor_done_[id] < micro_batches_, "gradient of '{}' marked complete too often",
             layout_.slot(id).name);
  if (++tensor_done_[id] == micro_batches_ && users_[id] == 0)
    set_state(id, TensorState::READY_FOR_REDUCE);
  if (++ready_[c][mb] == static_cast<int>(layout_.tensors_in_chunk(c).size())) {
    ++done_micro_batches_[c];
    if (policy_) policy_->on_grads_ready(*this, c, mb);
  }
}

void copy_chunks(const OpContext& op, const ChunkStore& from, ChunkStore& to) {
  TIDE_CHECK(from.layout().num_chunks() == to.layout().num_chunks(),
             "copy_chunks: the stores have {} and {} chunks; copy between stores of one layout",
             from.layout().num_chunks(), to.layout().num_chunks());
  for (int k = 0; k < kNumChunkKinds; ++k) {
    const auto kind = static_cast<ChunkKind>(k);
    if (!from.has(kind) || !to.has(kind)) continue;
    // A sliced kind: the own slices (a whole buffer attached over one, ZeRO-3's gathered
    // parameters, is a copy the policy makes again).
    const bool sliced = from.sliced(kind);
    TIDE_CHECK(sliced == to.sliced(kind),
               "copy_chunks: {} is sliced in one store and not in the other; copy between stores "
               "of one slicing",
               chunk_kind_name(kind));
    for (int c = 0; c < from.layout().num_chunks(); ++c)
      if (from.resident(kind, c) && to.resident(kind, c))
        copy(op, sliced ? to.slice(kind, c) : to.chunk(kind, c),
             sliced ? from.slice(kind, c) : from.chunk(kind, c));
  }
  synchronize(op);
}

}  // namespace tide
