#pragma once
// The world as a pp x dp x tp mesh, in Megatron's order: tensor-parallel ranks are contiguous
// (tp varies fastest, so a tp group sits on one node's fast links), then data-parallel, then
// pipeline stages:
//
//   rank = tp_idx + tp * (dp_idx + dp * pp_idx)
//
// e.g. tp=2, dp=2, pp=2 on 8 ranks: tp groups {0,1} {2,3} {4,5} {6,7}; dp groups {0,2} {1,3}
// {4,6} {5,7}; pp groups {0,4} {1,5} {2,6} {3,7}.
//
// MeshShape is the pure coordinate math (no communication, unit-tested); Topology adds the
// process group of each axis, split from the world so that a rank's rank in its axis group equals
// its coordinate on that axis.

#include <memory>
#include <string>
#include <vector>

#include "tide/comm/process_group.h"

namespace tide {

enum class MeshAxis { TP, DP, PP };
const char* mesh_axis_name(MeshAxis a);  // "tp", "dp", "pp"

struct MeshCoord {
  int tp = 0, dp = 0, pp = 0;
  int operator[](MeshAxis a) const { return a == MeshAxis::TP ? tp : a == MeshAxis::DP ? dp : pp; }
  // Spelled out (not `= default`) so that the header stays C++17-clean for .cu files.
  bool operator==(const MeshCoord& o) const { return tp == o.tp && dp == o.dp && pp == o.pp; }
};

struct MeshShape {
  int tp = 1, dp = 1, pp = 1;

  int size() const { return tp * dp * pp; }
  int operator[](MeshAxis a) const { return a == MeshAxis::TP ? tp : a == MeshAxis::DP ? dp : pp; }
  std::string str() const;  // "pp=2 x dp=2 x tp=2"

  // Throws a tide::Error when a degree is below 1 or tp*dp*pp differs from `world`; the message
  // suggests a dp that fits when there is one.
  void check(int world) const;

  MeshCoord coord_of(int rank) const;
  int rank_of(const MeshCoord& c) const;
  // World ranks of the `axis` group that contains `rank`, in order of their coordinate on `axis`.
  std::vector<int> axis_ranks(MeshAxis axis, int rank) const;
  // Index of the `axis` group containing `rank` among all groups of that axis (0..size/degree-1):
  // the rank's coordinates on the two other axes, flattened.
  int axis_group_index(MeshAxis axis, int rank) const;
};

class Topology {
 public:
  // Collective over `world`: every rank must construct it with the same shape.
  Topology(std::shared_ptr<ProcessGroup> world, MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  const MeshCoord& coord() const { return coord_; }
  ProcessGroup& world() const { return *world_; }
  std::shared_ptr<ProcessGroup> world_ptr() const { return world_; }
  ProcessGroup& group(MeshAxis a) const { return *groups_[static_cast<int>(a)]; }
  ProcessGroup& tp() const { return group(MeshAxis::TP); }
  ProcessGroup& dp() const { return group(MeshAxis::DP); }
  ProcessGroup& pp() const { return group(MeshAxis::PP); }
  std::shared_ptr<ProcessGroup> group_ptr(MeshAxis a) const { return groups_[static_cast<int>(a)]; }

 private:
  std::shared_ptr<ProcessGroup> world_;
  MeshShape shape_;
  MeshCoord coord_;
  std::shared_ptr<ProcessGroup> groups_[3];
};

}  // namespace tide
