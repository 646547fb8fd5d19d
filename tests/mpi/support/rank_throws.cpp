// A program in which rank 1 throws while the other ranks wait in a collective for it. Run by
// expect_abort.sh: run_ranks must print rank 1's message and end every rank, non-zero, fast.

#include <vector>

#include "tide/comm/distributed.h"

int main() {
  return tide::run_ranks([] {
    auto world = tide::init_distributed();
    world->barrier();
    if (world->rank() == 1)
      TIDE_FAIL("deliberate failure on rank 1; this message must reach the user");
    std::vector<float> x(16, 1.0f);
    // Without the abort, these ranks would wait here forever for rank 1.
    world->all_reduce(tide::Tensor(x.data(), {16}));
  });
}
