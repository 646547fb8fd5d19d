#include "tide/parallel/auto_placement.h"

#include <algorithm>
#include <chrono>

#include "tide/core/byte_size.h"
#include "tide/kernels/mover.h"

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

// Store s's hooks: placement before an access, the rest delegated to the engine's policy.
class AutoPlacement::StorePolicy final : public PlacementPolicy {
 public:
  StorePolicy(AutoPlacement& owner, int s, PlacementPolicy& inner)
      : owner_(owner), s_(s), inner_(inner) {}
  PlacementPolicy& inner() { return inner_; }
  void on_acquire(ChunkStore& store, std::span<const int> ids, Use use) override {
    owner_.on_acquire(s_, ids, use);
    inner_.on_acquire(store, ids, use);
  }
  void fetch(ChunkStore& store, int chunk, Use use) override { inner_.fetch(store, chunk, use); }
  void fetch_grads(ChunkStore& store, int chunk) override { inner_.fetch_grads(store, chunk); }
  void evict(ChunkStore& store, int chunk, Use use) override { inner_.evict(store, chunk, use); }
  void on_grads_ready(ChunkStore& store, int chunk, int micro_batch) override {
    inner_.on_grads_ready(store, chunk, micro_batch);
  }
  bool busy(ChunkKind kind, int chunk) const override { return inner_.busy(kind, chunk); }
  void settle(ChunkKind kind, int chunk) override { inner_.settle(kind, chunk); }

 private:
  AutoPlacement& owner_;
  int s_;
  PlacementPolicy& inner_;
};

AutoPlacement::AutoPlacement(std::vector<PlacedStore> stores, Allocator& device, Allocator& host,
                             std::vector<PlacedAccess> accesses,
                             std::function<size_t()> activation_bytes, const OpContext& op,
                             const OpContext& copies)
    : stores_(std::move(stores)),
      device_(device),
      host_(host),
      op_(op),
      copies_(copies.device.is_cpu() ? op : copies),
      prefetching_(!op.device.is_cpu() && !copies.device.is_cpu() && host.pinned()),
      buffers_(std::make_unique<BufferAllocator>(*this, device)),
      activation_bytes_(std::move(activation_bytes)),
      budget_(device.limit()),
      blocks_(new ChunkBlocks(device)),
      accesses_(std::move(accesses)) {
  TIDE_CHECK(budget_ > 0,
             "placement.policy=auto needs a compute tier with a byte limit "
             "(placement.device_memory_limit > 0)");
  TIDE_CHECK(!stores_.empty(), "placement.policy=auto: no store to place");
  policies_.resize(stores_.size());
  std::vector<int> unplaced;  // items of placed kinds (StoreOptions::placed_kinds)
  for (int s = 0; s < static_cast<int>(stores_.size()); ++s) {
    const ChunkStore& st = *stores_[s].store;
    // ZeRO-3 on 2 or more ranks: the gathers bring each group's parameters into buffers of the
    // compute tier (from buffer_allocator()); the owned slices are needed there only by Adam.
    gathered_params_.push_back(st.sliced(ChunkKind::PARAM) && st.layout().group_size() > 1);
    first_item_.push_back(num_items());
    first_update_.push_back(total_chunks_);
    total_chunks_ += chunks_of(s);
    for (ChunkKind k : kKinds)
      for (int c = 0; c < chunks_of(s); ++c) {
        items_.push_back({s, k, c});
        if (!movable_kind(st, k)) continue;
        if (!st.resident(k, c) && (st.options().placed_kinds & kind_bit(k))) {
          unplaced.push_back(num_items() - 1);
          continue;
        }
        TIDE_CHECK(st.resident(k, c) && st.chunk_info(k, c).alloc == &host_,
                   "placement.policy=auto: {} chunk {} must start on the host tier, or be left "
                   "for the placement to allocate (StoreOptions::placed_kinds)",
                   chunk_kind_name(k), c);
      }
  }
  plan();
  place_at_start(unplaced);
}

void AutoPlacement::place_at_start(std::vector<int> items) {
  // Soonest first use first (Belady's choice for an empty device): the compute tier takes
  // what fits its limit now (the budget less what is allocated already: the activation
  // arenas), the host the rest. The warm-up then evicts as the step's non-model bytes grow.
  auto first_use = [&](int item) {
    return uses_[item].empty() ? INT64_MAX : int64_t{uses_[item].front()};
  };
  std::stable_sort(items.begin(), items.end(),
                   [&](int a, int b) { return first_use(a) < first_use(b); });
  const size_t limit = limit_at(-1);
  for (int item : items) {
    const Item& i = items_[item];
    ChunkStore& st = store_of(item);
    const bool fits = blocks_->used_bytes() + item_bytes(item) <= limit;
    st.place_chunk(i.kind, i.chunk, fits ? static_cast<Allocator&>(*blocks_) : host_);
  }
}

void AutoPlacement::plan() {
  for (const PlacedAccess& a : accesses_) {
    TIDE_CHECK(a.store >= 0 && a.store < static_cast<int>(stores_.size()),
               "access to store {} of {}", a.store, stores_.size());
    const auto groups = stores_[a.store].group_chunks.size();
    TIDE_CHECK(a.access.group >= 0 && a.access.group < static_cast<int>(groups),
               "access to parameter group {} of {}", a.access.group, groups);
  }
  uses_.assign(num_items(), {});
  for (int p = 0; p < positions(); ++p)
    for (int item : needs_at(p)) uses_[item].push_back(p);
  recorded_.assign(positions(), 0);
}

void AutoPlacement::replan(std::vector<PlacedAccess> accesses) {
  TIDE_CHECK(!in_step_, "placement.policy=auto: a new schedule's accesses arrive between steps");
  accesses_ = std::move(accesses);
  plan();
  warm_up_ = true;  // the next step records the new order's non-model bytes
}

AutoPlacement::~AutoPlacement() {
  land_prefetches();
  try {
    synchronize(copies_);  // before the memory the moves left goes (an error is moot now)
  } catch (const Error&) {
  }
  for (const auto& [bytes, p] : host_cache_) host_.free(p, bytes);
  blocks_->release_free();
}

PlacementPolicy& AutoPlacement::policy(int s, PlacementPolicy* inner) {
  TIDE_CHECK(s >= 0 && s < static_cast<int>(stores_.size()) && inner != nullptr,
             "placement.policy=auto: store {} of {} needs the engine's policy", s, stores_.size());
  policies_[s] = std::make_unique<StorePolicy>(*this, s, *inner);
  return *policies_[s];
}

Allocator& AutoPlacement::buffer_allocator() {
  return *buffers_;
}

bool AutoPlacement::movable_kind(const ChunkStore& st, ChunkKind k) const {
  if (!st.has(k)) return false;
  // An f32 MASTER aliasing PARAM has no allocation of its own: it moves with PARAM.
  return k != ChunkKind::MASTER || !st.master_aliases_param();
}

bool AutoPlacement::on_device(int item) const {
  const Item& i = items_[item];
  return store_of(item).chunk_info(i.kind, i.chunk).alloc == blocks_.get();
}

size_t AutoPlacement::item_bytes(int item) const {
  const Item& i = items_[item];
  return store_of(item).chunk_info(i.kind, i.chunk).bytes;
}

bool AutoPlacement::attached(int item) const {
  return store_of(item).attached(items_[item].kind, items_[item].chunk);
}

bool AutoPlacement::busy(int item) const {
  return policies_[items_[item].store]->inner().busy(items_[item].kind, items_[item].chunk);
}

void AutoPlacement::settle(int item) {
  policies_[items_[item].store]->inner().settle(items_[item].kind, items_[item].chunk);
}

std::vector<int> AutoPlacement::needs_at(int pos) const {
  std::vector<int> need;
  const int A = static_cast<int>(accesses_.size());
  if (pos < A) {
    const auto [s, a] = accesses_[pos];
    const ChunkKind k = a.use == Use::WEIGHT ? ChunkKind::GRAD : ChunkKind::PARAM;
    if (k == ChunkKind::PARAM && gathered_params_[s]) return need;
    for (int c : stores_[s].group_chunks[a.group])
      if (movable_kind(*stores_[s].store, k)) need.push_back(item_index(s, k, c));
    return need;
  }
  const auto [s, c] = update_at(pos);
  for (ChunkKind k : kKinds)
    if (movable_kind(*stores_[s].store, k)) need.push_back(item_index(s, k, c));
  return need;
}

std::pair<int, int> AutoPlacement::update_at(int pos) const {
  const int u = pos - static_cast<int>(accesses_.size());
  int s = 0;
  while (s + 1 < static_cast<int>(stores_.size()) && first_update_[s + 1] <= u) ++s;
  return {s, u - first_update_[s]};
}

int64_t AutoPlacement::next_use(int item, int pos) const {
  const std::vector<int>& u = uses_[item];
  if (u.empty()) return INT64_MAX;
  const auto it = std::upper_bound(u.begin(), u.end(), pos);
  return it != u.end() ? *it : int64_t{u.front()} + positions();  // the next step's
}

size_t AutoPlacement::non_model_now() const {
  return buffer_bytes() + (activation_bytes_ ? activation_bytes_() : 0);
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

void AutoPlacement::move(int item, Tier to, bool ahead) {
  const Item& i = items_[item];
  ChunkStore& st = store_of(item);
  const bool up = to == Tier::COMPUTE;
  Allocator& tier = up ? static_cast<Allocator&>(*blocks_) : host_;
  const TraceSpan span(st.tracer(), up ? "move to device" : "move to host", "memory",
                       {{"chunk", i.chunk}});
  const auto t0 = std::chrono::steady_clock::now();
  const Chunk ch = st.chunk_info(i.kind, i.chunk);
  if (ch.alloc == &tier) return;
  const std::string what = fmt::format("{} chunk {}", chunk_kind_name(i.kind), i.chunk);
  // A move up has its room made first (room_for).
  void* target = up ? blocks_->take(ch.bytes, what) : take_host_block(ch.bytes, what);
  // After what the ops queued so far: the chunk's writers, and the last readers of the target
  // (memory a move left is read last by that move, on this same stream).
  wait_stream(copies_, op_);
  void* left = st.move_chunk_into(i.kind, i.chunk, target, tier, copies_);
  const StreamEvent moved = record_event(copies_);
  if (ahead)
    prefetched_ = moved;
  else
    wait_event(op_, moved);
  if (!up) {
    blocks_->free(left, ch.bytes);  // a free block for a later move
  } else if (host_.pinned()) {
    host_cache_.emplace(ch.bytes, left);
  } else {
    // Pageable host memory: the copy up returned once it had read it (the mover's rule), so
    // it goes now, and the host keeps only the chunks it holds (the largest model is then
    // bound by the GPU and the host together).
    host_.free(left, ch.bytes);
  }
  counters_.wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  (up ? counters_.bytes_to_compute : counters_.bytes_to_host) += ch.bytes;
  (up ? counters_.moves_to_compute : counters_.moves_to_host) += 1;
}

void* AutoPlacement::take_host_block(size_t bytes, const std::string& what) {
  if (const auto it = host_cache_.find(bytes); it != host_cache_.end()) {
    void* p = it->second;
    host_cache_.erase(it);
    return p;
  }
  return host_.allocate(bytes, what);
}

bool AutoPlacement::release_free_blocks() {
  if (!blocks_->has_free()) return false;
  synchronize(copies_);  // the moves that left them may still be copying
  counters_.cache_releases += 1;
  blocks_->release_free();
  return true;
}

bool AutoPlacement::room_for(int item, int pos, std::span<const int> keep, bool ahead) {
  const size_t bytes = item_bytes(item);
  while (!blocks_->can_take(bytes)) {
    // First a chunk whose block would serve goes (farthest next use first: no wait, no
    // allocation), then the free blocks go back to the budget (a host wait), then any chunk.
    if (evict_one(pos, keep, ahead, bytes)) continue;
    if (!ahead && release_free_blocks()) continue;
    if (!evict_one(pos, keep, ahead)) return false;
  }
  return true;
}

bool AutoPlacement::held(int item, std::span<const int> keep) const {
  auto in = [item](std::span<const int> items) {
    return std::find(items.begin(), items.end(), item) != items.end();
  };
  return in(keep) || in(current_need_) || !store_of(item).chunk_movable(items_[item].chunk);
}

bool AutoPlacement::evict_one(int pos, std::span<const int> keep, bool ahead, size_t fits) {
  int victim = -1, busy_victim = -1;
  int64_t farthest = -1;
  for (int item = 0; item < num_items(); ++item) {
    if (uses_[item].empty() || !on_device(item) || held(item, keep)) continue;
    // A reduction in flight (its ZeRO-2/3 buffer attached): movable once it completes.
    if (busy(item)) {
      if (busy_victim < 0) busy_victim = item;
      continue;
    }
    if (attached(item)) continue;  // ZeRO-3's gathered parameters
    if (fits > 0 &&
        !blocks_->holds(fits,
                        store_of(item).chunk_info(items_[item].kind, items_[item].chunk).data))
      continue;
    const int64_t nu = next_use(item, pos);
    if (nu > farthest) farthest = nu, victim = item;
  }
  if (victim >= 0) {
    move(victim, Tier::HOST, ahead);
    counters_.evictions += 1;
    return true;
  }
  if (busy_victim < 0 || ahead || fits > 0) return false;
  // Only chunks under communication are left: wait for one (it is movable next time).
  settle(busy_victim);
  return true;
}

std::string AutoPlacement::position_name(int pos) const {
  const int A = static_cast<int>(accesses_.size());
  const bool several = stores_.size() > 1;
  if (pos < 0) return "a forward outside the training step (validation)";
  if (pos < A) {
    const auto [s, a] = accesses_[pos];
    return fmt::format("access {} of the step (parameter group {}{})", pos, a.group,
                       several ? fmt::format(" of model chunk {}", s) : "");
  }
  const auto [s, c] = update_at(pos);
  return fmt::format("the optimizer step of chunk {}{}", c,
                     several ? fmt::format(" of model chunk {}", s) : "");
}

bool AutoPlacement::make_resident(std::span<const int> need, int pos, bool allow_fail) {
  auto needed = [&](int item) { return std::find(need.begin(), need.end(), item) != need.end(); };
  size_t missing = 0;
  for (int item : need)
    if (!on_device(item)) missing += item_bytes(item);
  const size_t limit = limit_at(pos);
  if (allow_fail) {        // all or nothing: the bytes that stay whatever is evicted must fit
    for (int item : need)  // ZeRO-3's persistent parameters stay gathered: their slice stays
      if (!on_device(item) && attached(item)) return false;
    size_t fixed = 0;
    for (int item : need) fixed += item_bytes(item);
    for (int item = 0; item < num_items(); ++item)
      if (!uses_[item].empty() && on_device(item) && !needed(item) &&
          (held(item, need) || busy(item) || attached(item)))
        fixed += item_bytes(item);
    if (fixed > limit) return false;
  }
  while (blocks_->used_bytes() + missing > limit) {
    if (evict_one(pos, need)) continue;
    fail_to_fit(pos, missing);
  }
  for (int item : need) {
    if (on_device(item)) continue;
    // A ZeRO-2/3 gradient buffer still attached from an earlier micro-batch's reduction.
    if (busy(item) || attached(item)) settle(item);
    TIDE_CHECK(!attached(item),
               "placement.policy=auto: {} chunk {} is needed on the compute tier but a buffer is "
               "attached over it",
               chunk_kind_name(items_[item].kind), items_[item].chunk);
    if (room_for(item, pos, need)) {
      move(item, Tier::COMPUTE);
      continue;
    }
    if (allow_fail) return false;  // (prepare_update moves what came in back out)
    fail_to_fit(pos, item_bytes(item));
  }
  return true;
}

void AutoPlacement::fail_to_fit(int pos, size_t missing) const {
  const std::string what = position_name(pos);
  // The non-model figure itself, not the part of the limit it takes (which is the whole limit
  // when the non-model memory alone is over it).
  const size_t non_model = non_model_at(pos);
  // Figures in the unit that fits each (a few KiB of chunks read "0.00 MiB" before).
  const auto bytes = [](size_t b) { return format_bytes(static_cast<int64_t>(b)); };
  TIDE_CHECK(
      non_model<budget_,
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
      bytes(budget_), what, bytes(missing), bytes(non_model), bytes(blocks_->used_bytes()));
}

void AutoPlacement::make_room_for_buffer(size_t bytes) {
  if (device_.available() >= bytes) return;
  const size_t limit = budget_ > buffer_bytes() ? budget_ - buffer_bytes() : 0;
  // The chunks may fill what the buffers leave of the budget, less this buffer; when nothing
  // can move, the allocation reports the shortfall, naming the buffer.
  while (blocks_->used_bytes() + bytes > limit)
    if (!evict_one(pos_, {})) break;
  // The room is the budget's: the free blocks go back (after the evictions above, or more when
  // the chunks' blocks were larger than their bytes).
  while (device_.available() < bytes && (release_free_blocks() || evict_one(pos_, {}))) {
  }
}

void AutoPlacement::begin_step() {
  counters_ = {};
  in_step_ = true;
  pos_ = -1;
}

void AutoPlacement::end_step() {
  land_prefetches();
  in_step_ = false;
  warm_up_ = false;
  pos_ = -1;
  current_need_.clear();
}

Tier AutoPlacement::prepare_update(int s, int c) {
  land_prefetches();
  const int pos = static_cast<int>(accesses_.size()) + first_update_[s] + c;
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
    if (on_device(item) && !attached(item)) move(item, Tier::HOST);
  counters_.updated_on_host += 1;
  return Tier::HOST;
}

void AutoPlacement::on_acquire(int s, std::span<const int> ids, Use use) {
  const ChunkStore& st = *stores_[s].store;
  const ChunkKind k = use == Use::WEIGHT ? ChunkKind::GRAD : ChunkKind::PARAM;
  std::vector<int> need;
  for (int id : k == ChunkKind::PARAM && gathered_params_[s] ? std::span<const int>() : ids) {
    const int c = st.layout().slot(id).chunk;
    if (movable_kind(st, k) &&
        std::find(need.begin(), need.end(), item_index(s, k, c)) == need.end())
      need.push_back(item_index(s, k, c));
  }
  land_prefetches();  // the previous access's ops are queued: this one's wait for the copies
  int pos = -1;
  if (in_step_ && pos_ + 1 < static_cast<int>(accesses_.size())) {
    pos = pos_ + 1;
    TIDE_CHECK(accesses_[pos].store == s && accesses_[pos].access.use == use,
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
  prefetch_after(pos);
}

void AutoPlacement::prefetch_after(int pos) {
  if (!prefetching_ || warm_up_ || pos < 0 || pos + 1 >= static_cast<int>(accesses_.size())) return;
  const std::vector<int> next = needs_at(pos + 1);
  size_t missing = 0;
  for (int item : next) {
    if (on_device(item)) continue;
    if (attached(item) || busy(item) || !store_of(item).chunk_movable(items_[item].chunk)) return;
    missing += item_bytes(item);
  }
  if (missing == 0) return;
  const size_t limit = std::min(limit_at(pos), limit_at(pos + 1));
  while (blocks_->used_bytes() + missing > limit)
    if (!evict_one(pos + 1, next, /*ahead=*/true)) return;
  for (int item : next) {
    if (on_device(item)) continue;
    if (!room_for(item, pos + 1, next, /*ahead=*/true)) return;
    move(item, Tier::COMPUTE, /*ahead=*/true);
    counters_.prefetches += 1;
  }
}

void AutoPlacement::land_prefetches() {
  if (!prefetched_) return;
  wait_event(op_, *prefetched_);
  prefetched_.reset();
}

}  // namespace tide
