#pragma once
// A whole file's bytes, with the errors a user can act on (a directory, a path that cannot be
// opened or read), each naming `what` the file was meant to be.

#include <string>

namespace tide {

std::string read_file(const std::string& path, const std::string& what);

}  // namespace tide
