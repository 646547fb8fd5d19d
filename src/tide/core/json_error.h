#pragma once
// nlohmann::json's exception text without its "[json.exception.parse_error.101] " tag: what a
// user reads after "config file 'x' is not valid JSON: ".

#include <nlohmann/json.hpp>
#include <string>

namespace tide {

inline std::string json_error_text(const nlohmann::json::exception& e) {
  std::string s = e.what();
  if (s.starts_with("[json.exception.")) {
    const size_t end = s.find("] ");
    if (end != std::string::npos) s.erase(0, end + 2);
  }
  return s;
}

}  // namespace tide
