#include "tide/core/read_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tide/core/error.h"

namespace tide {

std::string read_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  TIDE_CHECK(!std::filesystem::is_directory(path, ec),
             "{}: is a directory, not a {}; check the path", path, what);
  std::ifstream in(path, std::ios::binary);
  TIDE_CHECK(in.good(), "{}: cannot open {}; check the path", path, what);
  std::ostringstream ss;
  ss << in.rdbuf();
  TIDE_CHECK(!in.bad(), "{}: cannot read {}; check that it is a readable file", path, what);
  return ss.str();
}

}  // namespace tide
