#pragma once
// Files for tests: temp_dir(name) is a fresh, empty directory under the build tree, named after
// the running test (build/test_tmp/<Suite.Test>/<name>), so tests that ctest runs in parallel
// never share one; slurp(path) is a file's bytes.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

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

}  // namespace tide::test
