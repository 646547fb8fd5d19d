#include "tide/parallel/auto_placement.h"

#include <algorithm>
#include <chrono>

#include "tide/core/byte_size.h"

namespace tide {

namespace {
constexpr ChunkKind kKinds[] = {ChunkKind::PARAM, ChunkKind::GRAD, ChunkKind::MASTER,
                                ChunkKind::ADAM_M, ChunkKind::ADAM_V};
}  // namespace

// ZeRO's buffers: bytes of the compute tier, room made first (a buffer the pool adds while the
// chunks fill the budget evicts the farthest of them instead of running out of memory).
class AutoPlacement::BufferAllocator final : public Allocator {
 public:
  BufferAllocator(AutoPlacement& owner, Allocator& device) : owner_(owner), device_(device) {}
  Device device() const override { return device_.device(); }
  Tier tier() const override { return device_.tier(); }
  std::string name() const override { return device_.name(); }

 protected:
  void* do_allocate(size_t bytes) override {
    owner_.make_room_for_buffer(bytes);
    return device_.allocate(bytes, "a ZeRO communication buffer");
  }
  void do_free(void* p, size_t bytes) override { device_.free(p, bytes); }

 private:
  AutoPlacement& owner_;
  Allocator& device_;
};

AutoPlacement::AutoPlacement(ChunkStore& store, Allocator& device, Allocator& host,
                             std::vector<std::vector<int>> group_chunks,
                             std::span<const ParamAccess> accesses,
                             std::function<size_t()> activation_bytes, const OpContext& op)
    : store_(store),
      device_(device),
      host_(host),
      op_(op),
      buffers_(std::make_unique<BufferAllocator>(*this, device)),
      group_chunks_(std::move(group_chunks)),
      activation_bytes_(std::move(activation_bytes)),
      num_chunks_(store.layout().num_chunks()),
      budget_(device.limit()),
      accesses_(accesses) {
  TIDE_CHECK(budget_ > 0,
             "placement.policy=auto needs a compute tier with a byte limit "
             "(placement.device_memory_limit > 0)");
  // ZeRO-3 on 2 or more ranks: the gathers bring each group's parameters into buffers of the
  // compute tier (from buffer_allocator()); the owned slices are needed there only by Adam.
  gathered_params_ = store_.sliced(ChunkKind::PARAM) && store_.layout().group_size() > 1;
  for (ChunkKind k : kKinds)
    for (int c = 0; c < num_chunks_ && store_.has(k); ++c)
      if (movable_kind(k, c)) {
        TIDE_CHECK(store_.resident(k, c) && store_.chunk_info(k, c).alloc == &host_,
                   "placement.policy=auto: {} chunk {} must start on the host tier",
                   chunk_kind_name(k), c);
      }
  plan(accesses);
}

void AutoPlacement::plan(std::span<const ParamAccess> accesses) {
  for (const ParamAccess& a : accesses)
    TIDE_CHECK(a.group >= 0 && a.group < static_cast<int>(group_chunks_.size()),
               "access to parameter group {} of {}", a.group, group_chunks_.size());
  accesses_ = accesses;
  uses_.assign(kNumChunkKinds * num_chunks_, {});
  for (int p = 0; p < positions(); ++p)
    for (int item : needs_at(p)) uses_[item].push_back(p);
  recorded_.assign(positions(), 0);
}

void AutoPlacement::replan(std::span<const ParamAccess> accesses) {
  TIDE_CHECK(!in_step_, "placement.policy=auto: a new schedule's accesses arrive between steps");
  plan(accesses);
  warm_up_ = true;  // the next step records the new order's non-model bytes
}

AutoPlacement::~AutoPlacement() = default;

Allocator& AutoPlacement::buffer_allocator() {
  return *buffers_;
}

bool AutoPlacement::movable_kind(ChunkKind k, int c) const {
  if (!store_.has(k)) return false;
  // An f32 MASTER aliasing PARAM has no allocation of its own: it moves with PARAM.
  return k != ChunkKind::MASTER || store_.chunk_info(k, c).alloc != nullptr;
}

bool AutoPlacement::on_device(int item) const {
  const auto k = static_cast<ChunkKind>(item / num_chunks_);
  return store_.chunk_info(k, item % num_chunks_).alloc == &device_;
}

size_t AutoPlacement::item_bytes(int item) const {
  return store_.chunk_info(static_cast<ChunkKind>(item / num_chunks_), item % num_chunks_).bytes;
}

std::vector<int> AutoPlacement::needs_at(int pos) const {
  std::vector<int> need;
  const int A = static_cast<int>(accesses_.size());
  if (pos < A) {
    const ParamAccess& a = accesses_[pos];
    const ChunkKind k = a.use == Use::WEIGHT ? ChunkKind::GRAD : ChunkKind::PARAM;
    if (k == ChunkKind::PARAM && gathered_params_) return need;
    for (int c : group_chunks_[a.group])
      if (movable_kind(k, c)) need.push_back(item_index(k, c));
    return need;
  }
  const int c = pos - A;
  for (ChunkKind k : kKinds)
    if (movable_kind(k, c)) need.push_back(item_index(k, c));
  return need;
}

int64_t AutoPlacement::next_use(int item, int pos) const {
  const std::vector<int>& u = uses_[item];
  if (u.empty()) return INT64_MAX;
  const auto it = std::upper_bound(u.begin(), u.end(), pos);
  return it != u.end() ? *it : int64_t{u.front()} + positions();  // the next step's
}

size_t AutoPlacement::non_model_now() const {
  const size_t buffers = device_.allocated() - on_device_bytes_;
  return buffers + (activation_bytes_ ? activation_bytes_() : 0);
}

size_t AutoPlacement::non_model_at(int pos) const {
  size_t non_model = non_model_now();
  if (!warm_up_ && pos >= 0 && pos < static_cast<int>(recorded_.size()))
    non_model = std::max(non_model, recorded_[pos]);
  return non_model;
}

size_t AutoPlacement::limit_at(int pos) const {
  const size_t non_model = non_model_at(pos);
  return non_model >= budget_ ? 0 : budget_ - non_model;
}

size_t AutoPlacement::recorded_non_model_bytes() const {
  if (warm_up_ || recorded_.empty()) return 0;
  return *std::max_element(recorded_.begin(), recorded_.end());
}

void AutoPlacement::record(int pos) {
  if (!warm_up_ || !in_step_ || pos < 0 || pos >= static_cast<int>(recorded_.size())) return;
  recorded_[pos] = std::max(recorded_[pos], non_model_now());
}

void AutoPlacement::move(int item, Allocator& to) {
  const auto k = static_cast<ChunkKind>(item / num_chunks_);
  const int c = item % num_chunks_;
  const TraceSpan span(store_.tracer(), &to == &device_ ? "move to device" : "move to host",
                       "memory", {{"chunk", c}});
  const auto t0 = std::chrono::steady_clock::now();
  const size_t bytes = store_.move_chunk(k, c, to, op_);
  counters_.wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (bytes == 0) return;
  if (&to == &device_) {
    on_device_bytes_ += bytes;
    counters_.bytes_to_compute += bytes;
    counters_.moves_to_compute += 1;
  } else {
    on_device_bytes_ -= bytes;
    counters_.bytes_to_host += bytes;
    counters_.moves_to_host += 1;
  }
}

bool AutoPlacement::evict_one(int pos, const std::function<bool(int)>& pinned) {
  int victim = -1, busy_victim = -1;
  int64_t farthest = -1;
  for (int item = 0; item < kNumChunkKinds * num_chunks_; ++item) {
    if (uses_[item].empty() || !on_device(item) || pinned(item)) continue;
    const auto k = static_cast<ChunkKind>(item / num_chunks_);
    const int c = item % num_chunks_;
    // A reduction in flight (its ZeRO-2/3 buffer attached): movable once it completes.
    if (inner_->busy(k, c)) {
      if (busy_victim < 0) busy_victim = item;
      continue;
    }
    if (store_.attached(k, c)) continue;  // ZeRO-3's gathered parameters
    const int64_t nu = next_use(item, pos);
    if (nu > farthest) farthest = nu, victim = item;
  }
  if (victim >= 0) {
    move(victim, host_);
    counters_.evictions += 1;
    return true;
  }
  if (busy_victim < 0) return false;
  // Only chunks under communication are left: wait for one (it is movable next time).
  inner_->settle(static_cast<ChunkKind>(busy_victim / num_chunks_), busy_victim % num_chunks_);
  return true;
}

bool AutoPlacement::make_resident(std::span<const int> need, int pos, bool allow_fail) {
  auto needed = [&](int item) { return std::find(need.begin(), need.end(), item) != need.end(); };
  size_t missing = 0;
  for (int item : need)
    if (!on_device(item)) missing += item_bytes(item);
  const size_t limit = limit_at(pos);
  const int total = kNumChunkKinds * num_chunks_;
  auto attached = [&](int item) {
    return store_.attached(static_cast<ChunkKind>(item / num_chunks_), item % num_chunks_);
  };
  // Never evicted now: needed, or with tensors in use.
  auto pinned = [&](int item) {
    return needed(item) ||
           std::find(current_need_.begin(), current_need_.end(), item) != current_need_.end() ||
           !store_.chunk_movable(item % num_chunks_);
  };
  auto busy_item = [&](int item) {
    return inner_->busy(static_cast<ChunkKind>(item / num_chunks_), item % num_chunks_);
  };
  if (allow_fail) {        // all or nothing: the bytes that stay whatever is evicted must fit
    for (int item : need)  // ZeRO-3's persistent parameters stay gathered: their slice stays
      if (!on_device(item) &&
          store_.attached(static_cast<ChunkKind>(item / num_chunks_), item % num_chunks_))
        return false;
    size_t fixed = 0;
    for (int item : need) fixed += item_bytes(item);
    for (int item = 0; item < total; ++item)
      if (!uses_[item].empty() && on_device(item) && !needed(item) &&
          (pinned(item) || busy_item(item) || attached(item)))
        fixed += item_bytes(item);
    if (fixed > limit) return false;
  }
  while (on_device_bytes_ + missing > limit) {
    if (evict_one(pos, pinned)) continue;
    const int A = static_cast<int>(accesses_.size());
    const std::string what =
        pos < 0 ? std::string("a forward outside the training step (validation)")
        : pos < A
            ? fmt::format("access {} of the step (parameter group {})", pos, accesses_[pos].group)
            : fmt::format("the optimizer step of chunk {}", pos - A);
    // The non-model figure itself, not the part of the limit it takes (which is the whole limit
    // when the non-model memory alone is over it).
    const size_t non_model = non_model_at(pos);
    // Figures in the unit that fits each (a few KiB of chunks read "0.00 MiB" before).
    const auto bytes = [](size_t b) { return format_bytes(static_cast<int64_t>(b)); };
    TIDE_CHECK(
        non_model<
            budget_,
            "placement.policy=auto: placement.device_memory_limit ({}) is below the non-model "
            "memory alone: {} (activations, ZeRO's buffers) at {}{}; raise "
            "placement.device_memory_limit (`tide estimate --config <this config> "
            "--placement auto --device-memory-limit ...` prints the least limit for the "
            "whole step), or lower the activations (activation_checkpointing.policy, "
            "micro-batch size)",
            bytes(budget_), bytes(non_model), what, missing> 0
            ? fmt::format(", which also needs {} of chunks on the compute tier", bytes(missing))
            : "");
    TIDE_FAIL(
        "placement.policy=auto: placement.device_memory_limit ({}) is too small: {} needs {} "
        "of chunks on the compute tier besides {} of non-model memory (activations, ZeRO's "
        "buffers) and {} of chunks that cannot move now; raise placement.device_memory_limit, "
        "or lower chunk_size_mb or ZeRO's bucket sizes",
        bytes(budget_), what, bytes(missing), bytes(non_model), bytes(on_device_bytes_));
  }
  for (int item : need) {
    if (on_device(item)) continue;
    const auto k = static_cast<ChunkKind>(item / num_chunks_);
    const int c = item % num_chunks_;
    // A ZeRO-2/3 gradient buffer still attached from an earlier micro-batch's reduction.
    if (busy_item(item) || store_.attached(k, c)) inner_->settle(k, c);
    TIDE_CHECK(!store_.attached(k, c),
               "placement.policy=auto: {} chunk {} is needed on the compute tier but a buffer is "
               "attached over it",
               chunk_kind_name(k), c);
    move(item, device_);
  }
  return true;
}

void AutoPlacement::make_room_for_buffer(size_t bytes) {
  if (device_.available() >= bytes) return;
  const size_t limit = budget_ > device_.allocated() - on_device_bytes_
                           ? budget_ - (device_.allocated() - on_device_bytes_)
                           : 0;
  // Never evicted now: the current access's items, chunks with tensors in use.
  auto pinned = [&](int item) {
    return std::find(current_need_.begin(), current_need_.end(), item) != current_need_.end() ||
           !store_.chunk_movable(item % num_chunks_);
  };
  // The chunks may fill what the buffers leave of the budget, less this buffer; when nothing
  // can move, the allocation reports the shortfall, naming the buffer.
  while (on_device_bytes_ + bytes > limit)
    if (!evict_one(pos_, pinned)) return;
}

void AutoPlacement::begin_step() {
  counters_ = {};
  in_step_ = true;
  pos_ = -1;
}

void AutoPlacement::end_step() {
  in_step_ = false;
  warm_up_ = false;
  pos_ = -1;
  current_need_.clear();
}

Tier AutoPlacement::prepare_update(int c) {
  const int pos = static_cast<int>(accesses_.size()) + c;
  record(pos_);
  pos_ = pos;
  record(pos);
  current_need_.clear();
  const std::vector<int> need = needs_at(pos);
  if (make_resident(need, pos, /*allow_fail=*/true)) {
    counters_.updated_on_compute += 1;
    return Tier::COMPUTE;
  }
  for (int item : need)
    if (on_device(item) &&
        !store_.attached(static_cast<ChunkKind>(item / num_chunks_), item % num_chunks_))
      move(item, host_);
  counters_.updated_on_host += 1;
  return Tier::HOST;
}

void AutoPlacement::on_acquire(ChunkStore& store, std::span<const int> ids, Use use) {
  const ChunkKind k = use == Use::WEIGHT ? ChunkKind::GRAD : ChunkKind::PARAM;
  std::vector<int> need;
  for (int id : k == ChunkKind::PARAM && gathered_params_ ? std::span<const int>() : ids) {
    const int c = store.layout().slot(id).chunk;
    if (movable_kind(k, c) && std::find(need.begin(), need.end(), item_index(k, c)) == need.end())
      need.push_back(item_index(k, c));
  }
  int pos = -1;
  if (in_step_ && pos_ + 1 < static_cast<int>(accesses_.size())) {
    pos = pos_ + 1;
    TIDE_CHECK(accesses_[pos].use == use,
               "placement.policy=auto: the model's parameter accesses do not follow the step's "
               "sequence at access {}: the engine's access list is wrong",
               pos);
    record(pos_);  // the previous access, its activations now allocated
    pos_ = pos;
    record(pos);
  }
  current_need_.clear();
  make_resident(need, pos, /*allow_fail=*/false);
  current_need_ = need;  // pinned while the inner policy attaches its buffers
  inner_->on_acquire(store, ids, use);
}

void AutoPlacement::fetch(ChunkStore& store, int chunk, Use use) {
  inner_->fetch(store, chunk, use);
}

void AutoPlacement::fetch_grads(ChunkStore& store, int chunk) {
  inner_->fetch_grads(store, chunk);
}

void AutoPlacement::evict(ChunkStore& store, int chunk, Use use) {
  inner_->evict(store, chunk, use);
}

void AutoPlacement::on_grads_ready(ChunkStore& store, int chunk, int micro_batch) {
  inner_->on_grads_ready(store, chunk, micro_batch);
}

bool AutoPlacement::busy(ChunkKind kind, int chunk) const {
  return inner_->busy(kind, chunk);
}

void AutoPlacement::settle(ChunkKind kind, int chunk) {
  inner_->settle(kind, chunk);
}

}  // namespace tide
