#include "tide/data/unicode_normalize.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf8.h>

#include <vector>

#include "tide/core/error.h"

namespace tide {

namespace {

const UNormalizer2* nfc_instance() {
  static const UNormalizer2* n = [] {
    UErrorCode err = U_ZERO_ERROR;
    const UNormalizer2* p = unorm2_getNFCInstance(&err);
    TIDE_CHECK(U_SUCCESS(err) && p != nullptr,
               "NFC normalizer: ICU cannot load its normalization data ({}); reinstall libicu",
               u_errorName(err));
    return p;
  }();
  return n;
}

// Appends the NFC form of `valid`, which is valid UTF-8.
void append_nfc(std::string_view valid, std::string& out) {
  bool ascii = true;
  for (char ch : valid) ascii = ascii && static_cast<unsigned char>(ch) < 0x80;
  if (ascii) {
    out.append(valid);
    return;
  }
  UErrorCode err = U_ZERO_ERROR;
  int32_t n16 = 0;
  u_strFromUTF8(nullptr, 0, &n16, valid.data(), static_cast<int32_t>(valid.size()), &err);
  std::vector<UChar> utf16(n16 + 1);
  err = U_ZERO_ERROR;
  u_strFromUTF8(utf16.data(), n16 + 1, nullptr, valid.data(), static_cast<int32_t>(valid.size()),
                &err);
  TIDE_CHECK(U_SUCCESS(err), "NFC normalizer: UTF-8 -> UTF-16 failed ({})", u_errorName(err));
  const UNormalizer2* nfc = nfc_instance();
  if (unorm2_isNormalized(nfc, utf16.data(), n16, &err) && U_SUCCESS(err)) {
    out.append(valid);
    return;
  }
  err = U_ZERO_ERROR;
  const int32_t cap = unorm2_normalize(nfc, utf16.data(), n16, nullptr, 0, &err);
  std::vector<UChar> normalized(cap + 1);
  err = U_ZERO_ERROR;
  unorm2_normalize(nfc, utf16.data(), n16, normalized.data(), cap + 1, &err);
  TIDE_CHECK(U_SUCCESS(err), "NFC normalizer: ICU failed ({})", u_errorName(err));
  int32_t n8 = 0;
  err = U_ZERO_ERROR;
  u_strToUTF8(nullptr, 0, &n8, normalized.data(), cap, &err);
  const size_t at = out.size();
  out.resize(at + n8 + 1);
  err = U_ZERO_ERROR;
  u_strToUTF8(out.data() + at, n8 + 1, nullptr, normalized.data(), cap, &err);
  TIDE_CHECK(U_SUCCESS(err), "NFC normalizer: UTF-16 -> UTF-8 failed ({})", u_errorName(err));
  out.resize(at + n8);
}

}  // namespace

std::string nfc(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t n = static_cast<int32_t>(text.size());
  TIDE_CHECK(text.size() == static_cast<size_t>(n),
             "NFC normalizer: a text of {} bytes is over 2 GB", text.size());
  int32_t run = 0;  // start of the current valid run
  for (int32_t i = 0; i < n;) {
    if (s[i] < 0x80) {  // ASCII: valid, and never changed by NFC
      ++i;
      continue;
    }
    const int32_t start = i;
    UChar32 c = 0;
    U8_NEXT(s, i, n, c);
    if (c < 0) {  // invalid bytes [start, i): normalize what came before, keep these as they are
      append_nfc(text.substr(run, start - run), out);
      out.append(text.substr(start, i - start));
      run = i;
    }
  }
  append_nfc(text.substr(run), out);
  return out;
}

}  // namespace tide
