#include "tide/comm/topology.h"

#include "tide/comm/local_process_group.h"

namespace tide {

const char* mesh_axis_name(MeshAxis a) {
  switch (a) {
    case MeshAxis::TP:
      return "tp";
    case MeshAxis::DP:
      return "dp";
    case MeshAxis::PP:
      return "pp";
  }
  return "?";
}

std::string MeshShape::str() const {
  return fmt::format("pp={} x dp={} x tp={}", pp, dp, tp);
}

void MeshShape::check(int world) const {
  for (MeshAxis a : {MeshAxis::TP, MeshAxis::DP, MeshAxis::PP})
    TIDE_CHECK((*this)[a] >= 1, "parallel degree {} = {} must be at least 1; set {} >= 1",
               mesh_axis_name(a), (*this)[a], mesh_axis_name(a));
  if (size() == world) return;
  std::string hint;
  if (world % (tp * pp) == 0)
    hint = fmt::format(" (with tp={} and pp={}, set dp={})", tp, pp, world / (tp * pp));
  TIDE_FAIL(
      "the mesh {} has {} ranks but the job has {}; choose tp, dp, pp whose product is {}{} or "
      "launch with mpirun -np {}",
      str(), size(), world, world, hint, size());
}

MeshCoord MeshShape::coord_of(int rank) const {
  TIDE_CHECK(rank >= 0 && rank < size(), "rank {} is outside the mesh {} of {} ranks", rank, str(),
             size());
  return {rank % tp, (rank / tp) % dp, rank / (tp * dp)};
}

int MeshShape::rank_of(const MeshCoord& c) const {
  TIDE_CHECK(c.tp >= 0 && c.tp < tp && c.dp >= 0 && c.dp < dp && c.pp >= 0 && c.pp < pp,
             "mesh coordinate (pp={}, dp={}, tp={}) is outside the mesh {}", c.pp, c.dp, c.tp,
             str());
  return c.tp + tp * (c.dp + dp * c.pp);
}

std::vector<int> MeshShape::axis_ranks(MeshAxis axis, int rank) const {
  MeshCoord c = coord_of(rank);
  std::vector<int> ranks;
  for (int i = 0; i < (*this)[axis]; ++i) {
    MeshCoord m = c;
    (axis == MeshAxis::TP ? m.tp : axis == MeshAxis::DP ? m.dp : m.pp) = i;
    ranks.push_back(rank_of(m));
  }
  return ranks;
}

int MeshShape::axis_group_index(MeshAxis axis, int rank) const {
  const MeshCoord c = coord_of(rank);
  switch (axis) {
    case MeshAxis::TP:
      return c.dp + dp * c.pp;
    case MeshAxis::DP:
      return c.tp + tp * c.pp;
    case MeshAxis::PP:
      return c.tp + tp * c.dp;
  }
  return 0;
}

Topology::Topology(std::shared_ptr<ProcessGroup> world, MeshShape shape)
    : world_(std::move(world)), shape_(shape) {
  shape_.check(world_->size());
  coord_ = shape_.coord_of(world_->rank());
  // One split per axis: color = which group of that axis, key = the coordinate on the axis, so
  // the rank inside the group is the coordinate. An axis of one rank is a local group, and the
  // one axis that spans the whole world is the world itself (no communicator is split for
  // what is unused: a mesh costs nothing where tide runs without pp or tp).
  for (MeshAxis a : {MeshAxis::TP, MeshAxis::DP, MeshAxis::PP}) {
    std::shared_ptr<ProcessGroup>& g = groups_[static_cast<int>(a)];
    if (shape_[a] == 1)
      g = std::make_shared<LocalProcessGroup>();
    else if (shape_[a] == world_->size())
      g = world_;
    else
      g = world_->split(shape_.axis_group_index(a, world_->rank()), coord_[a]);
    TIDE_ASSERT(groups_[static_cast<int>(a)]->rank() == coord_[a]);
    TIDE_ASSERT(groups_[static_cast<int>(a)]->size() == shape_[a]);
  }
}

}  // namespace tide
