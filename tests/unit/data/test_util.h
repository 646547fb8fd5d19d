#pragma once
// Helpers for the data tests: a temporary directory per test, file writing, error capture.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "error_of.h"
#include "tide/core/error.h"

namespace tide::test {

// A fresh directory per test, removed afterwards. Named after the test so that tests running in
// parallel (ctest -j) never share one.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (std::string("tide_data_") + info->test_suite_name() + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// Runs fn, expects a tide::Error, and returns its message.
template <typename Fn>
std::string expected_error(Fn&& fn) {
  std::string message = test::error_of(std::forward<Fn>(fn));
  if (message.empty()) ADD_FAILURE() << "expected a tide::Error";
  return message;
}

}  // namespace tide::test
