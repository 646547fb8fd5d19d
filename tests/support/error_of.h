#pragma once
// error_of(f): the message of the tide::Error that f() throws, or "" when it throws none.
// Tests of bad input check that the message names the problem and the fix.

#include <string>

#include "tide/core/error.h"

namespace tide::test {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace tide::test
