#pragma once
// Where memory lives and where work runs. The CPU is device "cpu"; GPUs are "cuda:N".
// "sim:N" is the simulated asynchronous device (core/sim_device.h): the CPU kernels run on
// worker threads standing in for streams, on memory the host reaches only through the mover,
// so that GPU orchestration (streams, events, copies) is tested on machines without a GPU.
// Streams and events are opaque handles here so that core/ does not include CUDA headers;
// kernels/cuda gives them meaning.

#include <cstddef>
#include <string>

namespace tide {

enum class DeviceType : unsigned char { CPU, CUDA, SIM };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  static Device sim(int i = 0) { return {DeviceType::SIM, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool is_sim() const { return type == DeviceType::SIM; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const {
    return is_cpu() ? "cpu" : (is_cuda() ? "cuda:" : "sim:") + std::to_string(index);
  }
};

// Parses "cpu", "cuda", "cuda:N", "sim", "sim:N"; throws a tide::Error naming the accepted forms
// otherwise.
Device parse_device(const std::string& s);

// True when this binary was built with CUDA and a GPU is visible at run time. Loads the CUDA
// module (core/cuda_module.h) in builds with CUDA; false when it cannot be loaded.
bool cuda_available();
// How many GPUs this process sees: 0 without CUDA in the build, a loadable module or a GPU.
int cuda_device_count();
// Copies `bytes` from src to dst, either or both in GPU memory, through the CUDA module, and
// returns when the copy is done (a one-rank group's collectives on device buffers); throws with
// the runtime's message, naming `who`.
void copy_device_bytes(void* dst, const void* src, size_t bytes, const char* who);

}  // namespace tide
