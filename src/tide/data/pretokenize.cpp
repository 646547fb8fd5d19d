#include "tide/data/pretokenize.h"

namespace tide {
namespace pretok_detail {

size_t next_pretoken_length(std::string_view text, size_t i) {
  const size_t n = text.size();
  auto cls = [&](size_t j) { return classify(static_cast<unsigned char>(text[j])); };
  auto run_end = [&](size_t j, CharClass c) {  // first index >= j not of class c
    while (j < n && cls(j) == c) ++j;
    return j;
  };

  // 's 't 're 've 'm 'll 'd (lower case only, as in GPT-2)
  if (text[i] == '\'' && i + 1 < n) {
    const char a = text[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 < n) {
      const char b = text[i + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
  }
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional leading space, then a run of one
  // class.
  const size_t body = (text[i] == ' ' && i + 1 < n) ? i + 1 : i;
  const CharClass c = cls(body);
  if (c != CharClass::kSpace) return run_end(body, c) - i;
  // Whitespace. `\s+(?!\S)`: the run, minus its last character when a non-space follows (that
  // character then starts the next piece, so " word" keeps its space). `\s+` catches a single
  // whitespace character before a non-space (e.g. "\n" before a word).
  const size_t end = run_end(i, CharClass::kSpace);
  if (end == n || end - i == 1) return end - i;
  return end - 1 - i;
}

}  // namespace pretok_detail

std::vector<std::string_view> pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  for_each_pretoken(text, [&](std::string_view piece) { pieces.push_back(piece); });
  return pieces;
}

}  // namespace tide
