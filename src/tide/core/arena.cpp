#include "tide/core/arena.h"

#include <cstdlib>
#include <cstring>
#include <utility>

namespace tide {

Arena::Arena(std::string name, size_t capacity, Allocator* allocator)
    : name_(std::move(name)), allocator_(allocator) {
  capacity_ = aligned(capacity);
  if (capacity_ == 0) return;
  if (allocator_) {
    base_ = static_cast<char*>(allocator_->allocate(capacity_, "arena '" + name_ + "'"));
  } else {
    base_ = static_cast<char*>(std::aligned_alloc(kAlign, capacity_));
    TIDE_CHECK(base_ != nullptr, "arena '{}': could not allocate {:.1f} MiB of host memory", name_,
               capacity_ / 1048576.0);
  }
}

void Arena::release() {
  if (allocator_)
    allocator_->free(base_, capacity_);
  else
    std::free(base_);
  base_ = nullptr;
}

Arena::~Arena() {
  release();
}

Arena::Arena(Arena&& o) noexcept
    : name_(std::move(o.name_)),
      allocator_(std::exchange(o.allocator_, nullptr)),
      base_(std::exchange(o.base_, nullptr)),
      capacity_(std::exchange(o.capacity_, 0)),
      used_(std::exchange(o.used_, 0)),
      peak_(std::exchange(o.peak_, 0)) {}

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    allocator_ = std::exchange(o.allocator_, nullptr);
    base_ = std::exchange(o.base_, nullptr);
    capacity_ = std::exchange(o.capacity_, 0);
    used_ = std::exchange(o.used_, 0);
    peak_ = std::exchange(o.peak_, 0);
  }
  return *this;
}

void* Arena::alloc(size_t bytes) {
  const size_t need = aligned(bytes);
  TIDE_CHECK(used_ + need <= capacity_,
             "arena '{}' is out of memory: {} bytes requested with {} of {} bytes in use; "
             "this is a sizing bug in tide or a smaller batch is needed",
             name_, bytes, used_, capacity_);
  void* p = base_ + used_;
  used_ += need;
  if (used_ > peak_) peak_ = used_;
  return p;
}

Tensor Arena::alloc_tensor(Shape shape, DType dtype) {
  return Tensor(alloc(static_cast<size_t>(shape.numel()) * dtype_size(dtype)), shape, dtype,
                device());
}

Tensor Arena::zeros(Shape shape, DType dtype) {
  TIDE_CHECK(device().is_cpu(),
             "arena '{}' holds {} memory, which the host must not write; zero it on a stream "
             "with the mover's fill_zero",
             name_, device().str());
  Tensor t = alloc_tensor(shape, dtype);
  std::memset(t.data, 0, t.nbytes());
  return t;
}

void Arena::rewind(size_t mark) {
  TIDE_ASSERT(mark <= used_);
  used_ = mark;
}

}  // namespace tide
