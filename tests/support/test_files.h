#pragma once
// Files for tests: temp_dir(name) is a fresh, empty directory under the build tree, named after
// the running test (build/test_tmp/<Suite.Test>/<name>), so tests that ctest runs in parallel
// never share one; slurp(path) is a file's bytes; write_pattern_shard writes a small token shard
// of a fixed pattern.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "tide/data/shard.h"

namespace tide::test {

inline std::string temp_dir(const std::string& name) {
  const testing::TestInfo* t = testing::UnitTest::GetInstance()->current_test_info();
  std::string test = t ? std::string(t->test_suite_name()) + "." + t->name() : "no_test";
  for (char& c : test)
    if (c == '/') c = '_';  // parameterised tests: "Prefix/Suite.Name/0"
  const std::filesystem::path p = std::filesystem::path(TIDE_BINARY_DIR) / "test_tmp" / test / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A token shard `dir/name` of n tokens below `vocab`, in a fixed pattern; returns its path.
inline std::string write_pattern_shard(const std::string& dir, const std::string& name, int n,
                                       int vocab) {
  std::vector<uint16_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = static_cast<uint16_t>((i * 7 + i / 5) % vocab);
  const std::string path = dir + "/" + name;
  write_token_shard(path, std::span<const uint16_t>(tokens));
  return path;
}

}  // namespace tide::test
