#pragma once
// Errors in tide: every failure is a tide::Error whose message names the cause and, where
// there is one, the fix. Checks stay on in release builds: a wrong shape or a bad config must
// stop the run with a clear line, not corrupt a model silently.

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tide {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tide

// TIDE_CHECK(cond, "fmt {}", args...): user-facing check. The message should say what was wrong
// and how to fix it, e.g. TIDE_CHECK(T <= max_T, "sequence length {} exceeds max_seq_len {}; ...").
#define TIDE_CHECK(cond, ...)                                   \
  do {                                                          \
    if (!(cond)) throw ::tide::Error(fmt::format(__VA_ARGS__)); \
  } while (0)

// TIDE_FAIL("fmt {}", args...): unconditional error.
#define TIDE_FAIL(...) throw ::tide::Error(fmt::format(__VA_ARGS__))

// TIDE_ASSERT(cond): internal invariant (a bug in tide if it fires); reports file and line.
#define TIDE_ASSERT(cond)                                                                         \
  do {                                                                                            \
    if (!(cond))                                                                                  \
      throw ::tide::Error(                                                                        \
          fmt::format("internal error at {}:{}: `{}` does not hold", __FILE__, __LINE__, #cond)); \
  } while (0)
