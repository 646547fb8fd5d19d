#include "tide/data/utf8_stream.h"

namespace tide {

namespace {

// The length of the sequence lead byte `b` starts; 0 when it starts none: a continuation byte
// (80-BF), C0 and C1 (only overlong forms of ASCII) and F5-FF (beyond U+10FFFF) never do.
int sequence_length(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Whether `b` may follow the bytes held so far. The second byte's range depends on the lead:
// it is what excludes overlong forms (E0 80-9F, F0 80-8F), the surrogates U+D800-DFFF
// (ED A0-BF) and code points past U+10FFFF (F4 90-BF). Later bytes are any continuation byte.
bool may_continue(unsigned char lead, int held, unsigned char b) {
  if (held == 1) {
    switch (lead) {
      case 0xE0:
        return b >= 0xA0 && b <= 0xBF;
      case 0xED:
        return b >= 0x80 && b <= 0x9F;
      case 0xF0:
        return b >= 0x90 && b <= 0xBF;
      case 0xF4:
        return b >= 0x80 && b <= 0x8F;
    }
  }
  return b >= 0x80 && b <= 0xBF;
}

}  // namespace

void Utf8Stream::put(unsigned char b, std::string& out) {
  if (held_ > 0) {
    if (may_continue(static_cast<unsigned char>(buf_[0]), held_, b)) {
      buf_[held_++] = static_cast<char>(b);
      if (held_ == need_) {
        out.append(buf_, static_cast<size_t>(held_));
        held_ = 0;
      }
      return;
    }
    // The held bytes are a maximal subpart that cannot complete: one U+FFFD for all of them,
    // then `b` is looked at afresh (it may start a sequence of its own).
    out += kUtf8Replacement;
    held_ = 0;
  }
  const int n = sequence_length(b);
  if (n == 1) {
    out += static_cast<char>(b);
  } else if (n == 0) {
    out += kUtf8Replacement;
  } else {
    buf_[0] = static_cast<char>(b);
    held_ = 1;
    need_ = n;
  }
}

std::string Utf8Stream::push(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() + static_cast<size_t>(held_));
  for (char c : bytes) put(static_cast<unsigned char>(c), out);
  return out;
}

std::string Utf8Stream::finish() {
  if (held_ == 0) return {};
  held_ = 0;
  return std::string(kUtf8Replacement);
}

}  // namespace tide
