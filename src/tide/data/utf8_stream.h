#pragma once
// Utf8Stream: turns a stream of bytes that arrives in pieces (the bytes of one token at a time,
// as `tide sample` prints them) into valid UTF-8 as it goes.
//
// A byte-level BPE token is any run of bytes: a multi-byte character may be split over several
// tokens, and a model may emit a byte that starts no character at all. Printing each token's
// bytes as they are writes invalid UTF-8. Utf8Stream holds an incomplete sequence back until it
// completes, and writes U+FFFD for each maximal ill-formed subpart (Unicode's "substitution of
// maximal subparts", which Python's bytes.decode("utf-8", errors="replace") follows, and so
// Hugging Face's tokenizer.decode): the concatenation of every push() and finish() is exactly
// what that decode of all the bytes at once gives.
//
//   Utf8Stream u;
//   out += u.push("\xE2\x82");  // "": held, the sequence is incomplete
//   out += u.push("\xAC!");     // "€!"
//   out += u.push("\xF0\x9F");  // ""
//   out += u.finish();          // "\uFFFD": the sequence never completed

#include <string>
#include <string_view>

namespace tide {

class Utf8Stream {
 public:
  // The valid UTF-8 for `bytes` following what came before; an incomplete sequence at the end
  // is kept for the next call.
  std::string push(std::string_view bytes);
  // Ends the stream: U+FFFD for a sequence still incomplete ("" when none). The stream can then
  // be used again from a clean state.
  std::string finish();
  // Bytes held back (0-3).
  int pending() const { return held_; }

 private:
  // Appends one byte's worth of output to `out`.
  void put(unsigned char b, std::string& out);

  char buf_[4] = {};
  int held_ = 0;  // bytes of the current sequence in buf_
  int need_ = 0;  // its total length (2-4) while held_ > 0
};

// The replacement character U+FFFD in UTF-8.
inline constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";

}  // namespace tide
