#include "tide/memory/chunk_layout.h"

#include <algorithm>

namespace tide {

int64_t chunk_elems_from_mib(double mib) {
  return static_cast<int64_t>(mib * 1048576.0 / 4.0);
}

int ChunkLayout::add(std::string name, Shape shape, bool decay) {
  TIDE_ASSERT(!packed());
  TensorSlot s;
  s.name = std::move(name);
  s.shape = shape;
  s.numel = shape.numel();
  s.norm_numel = s.numel;
  s.decay = decay;
  slots_.push_back(std::move(s));
  unit_start_.push_back(!units_ || pending_start_);
  own_chunk_.push_back(pending_start_ && pending_own_);
  pending_start_ = pending_own_ = false;
  return static_cast<int>(slots_.size()) - 1;
}

void ChunkLayout::set_norm_numel(int id, int64_t n) {
  TIDE_ASSERT(id >= 0 && id < num_tensors() && n >= 0 && n <= slots_[id].numel);
  slots_[id].norm_numel = n;
}

void ChunkLayout::begin_unit(bool own_chunk) {
  TIDE_ASSERT(!packed());
  units_ = pending_start_ = true;
  pending_own_ = own_chunk;
}

void ChunkLayout::pack(int64_t target_elems, int group_size) {
  TIDE_ASSERT(!packed() && !slots_.empty());
  TIDE_CHECK(group_size >= 1, "chunk group size must be at least 1 (got {})", group_size);
  TIDE_CHECK(target_elems >= 0, "chunk size must be >= 0 elements (got {})", target_elems);
  group_size_ = group_size;
  const int n = num_tensors();
  auto unit_end = [&](int begin) {
    int end = begin + 1;
    while (end < n && !unit_start_[end]) ++end;
    return end;
  };
  auto unit_elems = [&](int begin, int end) {
    int64_t e = 0;
    for (int id = begin; id < end; ++id) e += slots_[id].numel;
    return e;
  };
  int64_t largest = 0;
  for (int b = 0; b < n; b = unit_end(b)) largest = std::max(largest, unit_elems(b, unit_end(b)));
  target_elems_ = target_elems > 0 ? target_elems : largest;
  const int64_t granule = kAlignElems * group_size;
  int64_t used = 0;
  auto close_chunk = [&] {
    chunk_elems_.push_back((used + granule - 1) / granule * granule);
    used = 0;
  };
  for (int b = 0; b < n; b = unit_end(b)) {
    const int e = unit_end(b);
    const int64_t elems = unit_elems(b, e);
    // A unit that fits in a chunk starts the next one when it would overflow this one.
    if (used > 0 && (own_chunk_[b] || (elems <= target_elems_ && used + elems > target_elems_)))
      close_chunk();
    for (int id = b; id < e; ++id) {
      TensorSlot& s = slots_[id];
      // (Only for a unit larger than the target:) a tensor that would overflow a non-empty
      // chunk starts the next one.
      if (used > 0 && used + s.numel > target_elems_) close_chunk();
      if (used == 0) chunk_tensors_.emplace_back();
      s.chunk = static_cast<int>(chunk_tensors_.size()) - 1;
      s.offset = used;
      used += s.numel;
      chunk_tensors_.back().push_back(id);
    }
  }
  close_chunk();
}

int64_t ChunkLayout::max_chunk_elems() const {
  int64_t m = 0;
  for (int64_t e : chunk_elems_) m = std::max(m, e);
  return m;
}

int64_t ChunkLayout::max_tensor_elems() const {
  int64_t m = 0;
  for (const TensorSlot& s : slots_) m = std::max(m, s.numel);
  return m;
}

int64_t ChunkLayout::buffer_elems(int c) const {
  const int64_t granule = kAlignElems * group_size_;
  const int64_t largest = max_chunk_elems();
  int64_t cls = largest;
  for (int64_t d = 2; d <= largest; d *= 2) {
    const int64_t half = ((largest + d - 1) / d + granule - 1) / granule * granule;
    if (half < chunk_elems_[c] || half >= cls) break;
    cls = half;
  }
  return cls;
}

int ChunkLayout::index_of(const std::string& name) const {
  for (int id = 0; id < num_tensors(); ++id)
    if (slots_[id].name == name) return id;
  return -1;
}

int ChunkLayout::find(const std::string& name) const {
  const int id = index_of(name);
  TIDE_CHECK(id >= 0, "no model tensor is called '{}'", name);
  return id;
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

int64_t ChunkLayout::total_elems() const {
  int64_t n = 0;
  for (int64_t e : chunk_elems_) n += e;
  return n;
}

std::vector<int> ChunkLayout::chunks_of(std::span<const int> ids) const {
  std::vector<int> cs;
  for (int id : ids) cs.push_back(slots_[id].chunk);
  std::sort(cs.begin(), cs.end());
  cs.erase(std::unique(cs.begin(), cs.end()), cs.end());
  return cs;
}

int64_t ChunkLayout::chunk_elems_of(std::span<const int> ids) const {
  int64_t n = 0;
  for (int c : chunks_of(ids)) n += chunk_elems_[c];
  return n;
}

}  // namespace tide
