#pragma once
// Every tensor of a checkpoint as raw bytes, by name: for tests that compare two checkpoints
// bit for bit (parameters and optimizer state alike).
#include <map>
#include <string>
#include <vector>

#include "tide/checkpoint/safetensors.h"

namespace tide::test {

inline std::map<std::string, std::vector<char>> checkpoint_tensors(const std::string& path) {
  SafetensorsReader r(path, "checkpoint");
  std::map<std::string, std::vector<char>> out;
  for (const SafetensorsEntry& e : r.entries()) {
    std::vector<char> bytes(e.nbytes);
    r.read(e.name, bytes.data(), e.dtype, e.shape);
    out.emplace(e.name, std::move(bytes));
  }
  return out;
}

}  // namespace tide::test
