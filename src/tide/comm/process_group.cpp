#include "tide/comm/process_group.h"

#include <algorithm>

namespace tide {

CommAlgorithm parse_comm_algorithm(const std::string& s) {
  if (s == "mpi") return CommAlgorithm::Mpi;
  if (s == "ring") return CommAlgorithm::Ring;
  TIDE_FAIL("unknown communication algorithm '{}'; use mpi or ring", s);
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(const std::vector<int>& ranks) {
  TIDE_CHECK(!ranks.empty(), "new_group: the rank list is empty; list at least one rank");
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  TIDE_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
             "new_group: rank {} is listed twice; list each rank once",
             *std::adjacent_find(sorted.begin(), sorted.end()));
  TIDE_CHECK(sorted.front() >= 0 && sorted.back() < size(),
             "new_group: rank {} is outside this group of {} ranks; use ranks 0..{}",
             sorted.front() < 0 ? sorted.front() : sorted.back(), size(), size() - 1);
  auto it = std::find(ranks.begin(), ranks.end(), rank());
  // Members share color 0 and are ordered by their position in the list.
  if (it == ranks.end()) return split(-1, 0);
  return split(0, static_cast<int>(it - ranks.begin()));
}

void ProcessGroup::wait_on_device(const StreamEvent& event) {
  TIDE_FAIL(
      "the {} group runs its calls on the host and cannot wait for a {} stream on the "
      "device; wait for the event on the host before the call (model/stream_collectives.h)",
      backend(), event.device.str());
}

namespace comm_check {

void same_dtype_device(const Tensor& a, const Tensor& b, const char* who) {
  TIDE_CHECK(a.dtype == b.dtype, "{}: input is {} but output is {}; use the same dtype for both",
             who, dtype_name(a.dtype), dtype_name(b.dtype));
  TIDE_CHECK(a.device == b.device,
             "{}: input is on {} but output is on {}; put both on the same device", who,
             a.device.str(), b.device.str());
}

void reduce_scatter_sizes(const Tensor& in, const Tensor& out, int world) {
  same_dtype_device(in, out, "reduce_scatter");
  TIDE_CHECK(in.numel() == out.numel() * world,
             "reduce_scatter: input has {} elements but output has {} over {} ranks (input must "
             "be ranks*output = {}); pad the input to padded_numel(n, {}) = {} elements with zeros",
             in.numel(), out.numel(), world, out.numel() * world, world,
             padded_numel(in.numel(), world));
}

void all_gather_sizes(const Tensor& in, const Tensor& out, int world) {
  same_dtype_device(in, out, "all_gather");
  TIDE_CHECK(out.numel() == in.numel() * world,
             "all_gather: input has {} elements but output has {} over {} ranks (output must be "
             "ranks*input = {}); give every rank an equal slice, padding the full buffer to "
             "padded_numel(n, {}) elements",
             in.numel(), out.numel(), world, in.numel() * world, world);
}

void peer(int peer, int world, int self, const char* who) {
  TIDE_CHECK(peer >= 0 && peer < world,
             "{}: peer rank {} is outside this group of {} ranks; use 0..{}", who, peer, world,
             world - 1);
  TIDE_CHECK(peer != self,
             "{}: peer {} is this rank; a rank cannot send to or receive from itself, copy the "
             "buffer instead",
             who, peer);
}

void root(int root, int world) {
  TIDE_CHECK(root >= 0 && root < world,
             "broadcast: root {} is outside this group of {} ranks; use 0..{}", root, world,
             world - 1);
}

void tag(int tag) {
  // 32767 is the smallest MPI_TAG_UB the MPI standard allows.
  TIDE_CHECK(tag >= 0 && tag <= 32767, "send/recv: tag {} is outside 0..32767; use a smaller tag",
             tag);
}

void split_args(int color, int key) {
  (void)color;  // any color is valid: negative means "no group"
  TIDE_CHECK(key >= 0, "split: key {} is negative; keys order ranks and must be >= 0", key);
}

}  // namespace comm_check
}  // namespace tide
