#pragma once
// The pre-tokenizer: a regex that splits text into the pieces BPE runs in. GPT-2's by default;
// a tokenizer.json's Split pattern (Llama 3's, Qwen2's) the same way, on the same engine.
//
// GPT-2 (and HF `tokenizers`' ByteLevel pre-tokenizer, and tiktoken's r50k/p50k) split text with
// the regex
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// and run BPE inside each piece, so merges never cross a piece boundary. The pattern needs
// Unicode properties (\p{L} letters, \p{N} numbers, Unicode \s) and a lookahead, so it runs on
// PCRE2 with UTF + UCP (Debian's libpcre2-8; RE2 has no lookahead). This is exact against
// Python's `regex` module for every character assigned in PCRE2's Unicode version (10.42:
// Unicode 14); tests/fixtures/tokenizer holds the multilingual reference.
//
// Text is bytes and need not be valid UTF-8. A run of invalid UTF-8 bytes is a piece of its own
// and acts as a barrier: the valid text on each side is split as if the run were the start/end of
// the text (PCRE2_MATCH_INVALID_UTF). The pieces always concatenate to the text exactly.

#include <string_view>
#include <vector>

// PCRE2's types (pcre2.h, PCRE2_CODE_UNIT_WIDTH 8), declared here so that pcre2.h stays out of
// every file that tokenizes.
struct pcre2_real_code_8;
struct pcre2_real_match_data_8;

namespace tide {

class Pretokenizer {
 public:
  static constexpr std::string_view kGpt2Pattern =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

  // GPT-2's pattern, compiled (and JIT-compiled where PCRE2 supports it) once, on first use.
  // A compiled pattern is immutable, so one object serves every thread.
  static const Pretokenizer& gpt2();

  explicit Pretokenizer(std::string_view pattern);
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Steps through the pieces of one text. Owns PCRE2 match data, so each thread uses its own.
  class Cursor {
   public:
    Cursor(const Pretokenizer& pretok, std::string_view text);
    ~Cursor();
    Cursor(const Cursor&) = delete;
    Cursor& operator=(const Cursor&) = delete;
    // The next piece, or false at the end of the text.
    bool next(std::string_view& piece);

   private:
    const Pretokenizer& pretok_;
    std::string_view text_;
    size_t pos_ = 0;
    size_t match_begin_ = 0, match_end_ = 0;  // a match found past an invalid-UTF-8 gap
    pcre2_real_match_data_8* match_ = nullptr;
  };

  // Calls fn(piece) for each piece of text, in order.
  template <typename Fn>
  void for_each(std::string_view text, Fn&& fn) const {
    Cursor cursor(*this, text);
    for (std::string_view piece; cursor.next(piece);) fn(piece);
  }
  // All pieces at once (for tests and small inputs).
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
};

}  // namespace tide
