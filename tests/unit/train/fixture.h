#pragma once
// Loads tests/fixtures/gpt_tiny.json, written by tools/gen_fixtures.py (JAX reference).

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tide/model/config.h"

namespace tide::test {

struct Fixture {
  nlohmann::json j;
  GPTConfig config;
  int B = 0, T = 0;

  Fixture() {
    std::ifstream f(std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/gpt_tiny.json");
    j = nlohmann::json::parse(f);
    const auto& c = j["config"];
    config.n_layer = c["n_layer"];
    config.n_head = c["n_head"];
    config.n_embd = c["n_embd"];
    config.vocab_size = c["vocab_size"];
    config.max_seq_len = c["max_seq_len"];
    B = c["B"];
    T = c["T"];
  }
  // {name: flat values} of a params-layout entry ("params", "grads0", "final_params").
  std::map<std::string, std::vector<float>> tensors(const char* key) const {
    std::map<std::string, std::vector<float>> out;
    for (const auto& t : j[key]) out[t["name"]] = t["data"].get<std::vector<float>>();
    return out;
  }
  // Inputs and targets of step s, each (B,T) row-major.
  void batch(int s, int32_t* inputs, int32_t* targets) const {
    const auto& d = j["data"][s];
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        inputs[b * T + t] = d[b][t];
        targets[b * T + t] = d[b][t + 1];
      }
  }
};

// ||a - b|| / ||b|| over a whole tensor.
inline double rel_error(const float* a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace tide::test
