// Utf8Stream (data/utf8_stream.h): bytes in pieces -> valid UTF-8, with U+FFFD where Python's
// bytes.decode("utf-8", errors="replace") puts one (the expected strings below are its output).

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tide/data/utf8_stream.h"

namespace tide {
namespace {

const std::string R(kUtf8Replacement);

// Feeds `pieces` one push each, then finish(): what `tide sample` prints for those tokens.
std::string stream(const std::vector<std::string>& pieces) {
  Utf8Stream u;
  std::string out;
  for (const std::string& p : pieces) out += u.push(p);
  return out + u.finish();
}

TEST(Utf8Stream, AsciiPassesThrough) {
  Utf8Stream u;
  EXPECT_EQ(u.push("hello, "), "hello, ");
  EXPECT_EQ(u.push("world\n"), "world\n");
  EXPECT_EQ(u.pending(), 0);
  EXPECT_EQ(u.finish(), "");
}

TEST(Utf8Stream, MultiByteCharactersSplitAcrossPushesAreHeldUntilComplete) {
  Utf8Stream u;
  EXPECT_EQ(u.push("\xC3"), "");  // é = C3 A9
  EXPECT_EQ(u.pending(), 1);
  EXPECT_EQ(u.push("\xA9"), "\xC3\xA9");
  EXPECT_EQ(u.push("a\xE2\x82"), "a");  // € = E2 82 AC
  EXPECT_EQ(u.pending(), 2);
  EXPECT_EQ(u.push("\xAC"), "\xE2\x82\xAC");
  EXPECT_EQ(u.push("\xF0"), "");  // 😀 = F0 9F 98 80, one byte per push
  EXPECT_EQ(u.push("\x9F"), "");
  EXPECT_EQ(u.push("\x98"), "");
  EXPECT_EQ(u.push("\x80!"), "\xF0\x9F\x98\x80!");
  EXPECT_EQ(u.finish(), "");
  // The largest code point, U+10FFFF, and the ends of the 3-byte ranges around the surrogates.
  EXPECT_EQ(stream({"\xF4\x8F", "\xBF\xBF"}), "\xF4\x8F\xBF\xBF");
  EXPECT_EQ(stream({"\xED\x9F\xBF", "\xEE\x80\x80"}), "\xED\x9F\xBF\xEE\x80\x80");
}

TEST(Utf8Stream, LoneContinuationByteIsReplaced) {
  EXPECT_EQ(stream({"a\x80", "b"}), "a" + R + "b");
  EXPECT_EQ(stream({"\xBF\xBF"}), R + R);
  // A complete character followed by one continuation byte too many.
  EXPECT_EQ(stream({"\xC3\xA9\xA9"}), "\xC3\xA9" + R);
}

TEST(Utf8Stream, TruncatedSequenceFollowedByAsciiIsOneReplacement) {
  // Python: b"\xe2\x82A".decode(errors="replace") == "\ufffdA" (one U+FFFD per maximal
  // subpart, and the byte that broke it is kept).
  EXPECT_EQ(stream({"\xE2\x82", "A"}), R + "A");
  EXPECT_EQ(stream({"\xF0\x9F\x98", "xyz"}), R + "xyz");
  EXPECT_EQ(stream({"\xC3", "\xC3\xA9"}), R + "\xC3\xA9");  // a new lead byte ends it too
}

TEST(Utf8Stream, InvalidLeadBytesAreReplaced) {
  // C0, C1: overlong forms of ASCII; F5-FF: beyond U+10FFFF. Each byte is its own U+FFFD, and
  // a continuation byte after one is another.
  EXPECT_EQ(stream({"\xC0\x80"}), R + R);
  EXPECT_EQ(stream({"\xC1\xBF"}), R + R);
  for (int b = 0xF5; b <= 0xFF; ++b)
    EXPECT_EQ(stream({std::string(1, static_cast<char>(b)) + "a"}), R + "a") << b;
  // Overlong 3- and 4-byte forms and a code point past U+10FFFF: the lead byte cannot take that
  // second byte.
  EXPECT_EQ(stream({"\xE0\x80\xAF"}), R + R + R);
  EXPECT_EQ(stream({"\xF0\x8F\xBF\xBF"}), R + R + R + R);
  EXPECT_EQ(stream({"\xF4\x90\x80\x80"}), R + R + R + R);
}

TEST(Utf8Stream, SurrogatesAreReplaced) {
  // ED A0 80 .. ED BF BF encode U+D800-DFFF, which UTF-8 excludes.
  EXPECT_EQ(stream({"\xED\xA0\x80"}), R + R + R);
  EXPECT_EQ(stream({"\xED", "\xBF\xBF"}), R + R + R);
  EXPECT_EQ(stream({"\xED\xA0\x80\xED\xB0\x80"}), R + R + R + R + R + R);  // a surrogate pair
}

TEST(Utf8Stream, IncompleteSequenceAtTheEndIsOneReplacement) {
  Utf8Stream u;
  EXPECT_EQ(u.push("ok \xF0\x9F\x98"), "ok ");
  EXPECT_EQ(u.pending(), 3);
  EXPECT_EQ(u.finish(), R);
  EXPECT_EQ(u.pending(), 0);
  EXPECT_EQ(u.push("\xC3\xA9"), "\xC3\xA9");  // a fresh start after finish()
  EXPECT_EQ(stream({"\xE2"}), R);
}

// Well-formed UTF-8 by the definition (Unicode Table 3-7: code points, not byte ranges),
// written apart from Utf8Stream: shortest form, no surrogates, at most U+10FFFF.
bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? b : b & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c >> 6) != 2) return false;
      cp = cp << 6 | (c & 0x3F);
    }
    const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

TEST(Utf8Stream, TheReferenceValidatorKnowsTheCases) {
  EXPECT_TRUE(valid_utf8("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF" + R));
  for (const char* bad : {"\x80", "\xC3", "\xC0\x80", "\xE0\x80\xAF", "\xED\xA0\x80",
                          "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF"})
    EXPECT_FALSE(valid_utf8(bad)) << bad;
}

// Any bytes, cut anywhere: the output is valid UTF-8 and the same as pushing them whole.
TEST(Utf8Stream, RandomBytesInRandomPiecesGiveTheSameValidText) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    // Biased towards the bytes that matter: continuation bytes and lead bytes.
    std::string bytes;
    const int n = static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) {
      const unsigned pick = rng() % 4;
      const unsigned b = pick == 0   ? rng() % 0x80
                         : pick == 1 ? 0x80 + rng() % 0x40
                                     : 0xC0 + rng() % 0x40;
      bytes += static_cast<char>(b);
    }
    std::vector<std::string> pieces;
    for (size_t at = 0; at < bytes.size();) {
      const size_t len = 1 + rng() % 4;
      pieces.push_back(bytes.substr(at, len));
      at += len;
    }
    const std::string whole = stream({bytes});
    EXPECT_EQ(stream(pieces), whole);
    EXPECT_TRUE(valid_utf8(whole));
    // Valid input passes unchanged.
    if (valid_utf8(bytes)) EXPECT_EQ(whole, bytes);
  }
}

}  // namespace
}  // namespace tide
