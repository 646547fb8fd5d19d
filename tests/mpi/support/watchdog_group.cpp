// A program in which world rank 0 waits, in the sub-group of world ranks {0, 2}, for a message
// that world rank 2 (rank 1 of that group) never sends. Run by expect_watchdog.sh on 3 ranks:
// the watchdog's line must name world rank 2 for the peer and as the rank that did not arrive
// (issue #24: it said "from rank 1 (group of 2 ranks)" while rank 2 was the one stopped).

#include <chrono>
#include <thread>
#include <vector>

#include "tide/comm/distributed.h"

int main() {
  return tide::run_ranks([] {
    auto world = tide::init_distributed();
    world->set_timeout(2);
    auto pair = world->new_group({0, 2});
    world->barrier();
    if (world->rank() == 0) {
      std::vector<float> x(16);
      pair->recv(tide::Tensor(x.data(), {16}), 1, 3);  // never sent: the watchdog ends the job
    } else {
      // Ranks 1 and 2 stand for stopped ranks: busy, in no collective. mpirun's abort ends them.
      std::this_thread::sleep_for(std::chrono::seconds(60));
    }
  });
}
