// Programs whose calls never complete, run on 3 ranks by expect_watchdog.sh:
//   (no argument) world rank 0 waits, in the sub-group of world ranks {0, 2}, for a message
//          that world rank 2 (rank 1 of that group) never sends: the watchdog's line must name
//          world rank 2 for the peer and as the rank that did not arrive (issue #24: it said
//          "from rank 1 (group of 2 ranks)" while rank 2 was the one stopped).
//   device world rank 0 issues an all-reduce on the simulated device's collectives (NCCL's
//          stand-in) that the others never join, and its host then waits for nothing tide
//          watches (as a GPU host blocks in the CUDA driver): the device call watchdog
//          (comm/work_watchdog.h) must abort the communicators and end the job, naming the call.

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tide/comm/device_routed_group.h"
#include "tide/comm/distributed.h"
#include "tide/comm/sim_collective_group.h"

int main(int argc, char** argv) {
  const bool device = argc > 1 && std::strcmp(argv[1], "device") == 0;
  return tide::run_ranks([device] {
    auto world = tide::init_distributed();
    world->set_timeout(2);
    auto compute = std::make_shared<tide::SimStream>(tide::Device::sim(0), 1);
    std::shared_ptr<tide::ProcessGroup> group =
        device ? std::make_shared<tide::DeviceRoutedGroup>(
                     world,
                     [compute](std::shared_ptr<tide::ProcessGroup> bootstrap) {
                       return std::make_shared<tide::SimCollectiveGroup>(std::move(bootstrap),
                                                                         compute);
                     })
               : world->new_group({0, 2});
    world->barrier();
    std::vector<float> x(16);
    if (world->rank() == 0) {
      if (device) {
        group->all_reduce_async(tide::Tensor(x.data(), {16}, tide::DType::F32, compute->device()));
      } else {
        group->recv(tide::Tensor(x.data(), {16}), 1, 3);  // never sent: the watchdog ends the job
      }
    }
    // Rank 0 (device): a host blocked where no timeout is. Ranks 1 and 2 stand for stopped
    // ranks: busy, in no collective. mpirun's abort ends them.
    std::this_thread::sleep_for(std::chrono::seconds(60));
  });
}
