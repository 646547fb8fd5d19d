#include "tide/data/unicode_normalize.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "tide/core/error.h"

namespace tide {

namespace {

// Appends the NFC form of `valid`, which is valid UTF-8.
void append_nfc(std::string_view valid, std::string& out) {
  bool ascii = true;
  for (char ch : valid) ascii = ascii && static_cast<unsigned char>(ch) < 0x80;
  if (ascii) {  // ASCII is always NFC
    out.append(valid);
    return;
  }
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(valid.data()),
                   static_cast<utf8proc_ssize_t>(valid.size()), &mapped,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(mapped, &std::free);
  TIDE_CHECK(n >= 0, "NFC normalizer: utf8proc failed ({})", utf8proc_errmsg(n));
  out.append(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
}

}  // namespace

std::string nfc(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  const auto n = static_cast<utf8proc_ssize_t>(text.size());
  utf8proc_ssize_t run = 0;  // start of the current valid run
  for (utf8proc_ssize_t i = 0; i < n;) {
    if (s[i] < 0x80) {  // ASCII: valid, and never changed by NFC
      ++i;
      continue;
    }
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t len = utf8proc_iterate(s + i, n - i, &c);
    if (len > 0) {
      i += len;
      continue;
    }
    // An invalid byte: normalize what came before, keep it as it is.
    append_nfc(text.substr(run, i - run), out);
    out.push_back(text[i]);
    run = ++i;
  }
  append_nfc(text.substr(run), out);
  return out;
}

}  // namespace tide
