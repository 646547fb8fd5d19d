#pragma once
// GPT-2's pre-tokenizer, written by hand. GPT-2 splits text with the regex
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// and runs BPE inside each piece, so merges never cross a piece boundary (no token spans
// "dog." and "dog!" alike). This version is exact for ASCII; every byte >= 0x80 (any part of
// a non-ASCII UTF-8 character) counts as a letter, so multi-byte characters stay in one piece.
// \s is the six ASCII whitespace characters: space, \t, \n, \v, \f, \r.

#include <string_view>
#include <vector>

namespace tide {

// Calls fn(piece) for each piece of text, in order; the pieces concatenate to text exactly.
template <typename Fn>
void for_each_pretoken(std::string_view text, Fn&& fn);

// All pieces at once (for tests and small inputs).
std::vector<std::string_view> pretokenize(std::string_view text);

namespace pretok_detail {
enum class CharClass { kLetter, kDigit, kSpace, kOther };
inline CharClass classify(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return CharClass::kLetter;
  if (c >= '0' && c <= '9') return CharClass::kDigit;
  if (c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r')
    return CharClass::kSpace;
  return CharClass::kOther;
}
// Length of the piece starting at text[i] (i < text.size()).
size_t next_pretoken_length(std::string_view text, size_t i);
}  // namespace pretok_detail

template <typename Fn>
void for_each_pretoken(std::string_view text, Fn&& fn) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = pretok_detail::next_pretoken_length(text, i);
    fn(text.substr(i, n));
    i += n;
  }
}

}  // namespace tide
