#include "tide/data/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "tide/core/error.h"

namespace tide {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? fmt::format("PCRE2 error {}", code) : std::string(reinterpret_cast<char*>(buf));
}

}  // namespace

const Pretokenizer& Pretokenizer::gpt2() {
  static const Pretokenizer pretok(kGpt2Pattern);
  return pretok;
}

Pretokenizer::Pretokenizer(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // UTF: characters, not bytes. UCP: \s (and \d, \w, POSIX classes) follow Unicode properties,
  // as in Python's `regex` on str; without it \s is ASCII only. MATCH_INVALID_UTF: invalid UTF-8
  // in the subject is never matched (a barrier) instead of an error, so any bytes can be split.
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  TIDE_CHECK(code_ != nullptr, "pre-tokenizer regex /{}/ does not compile at offset {}: {}",
             pattern, offset, pcre2_message(error));
  // JIT is several times faster; without it (some architectures) pcre2_match interprets.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

Pretokenizer::~Pretokenizer() {
  pcre2_code_free(code_);
}

Pretokenizer::Cursor::Cursor(const Pretokenizer& pretok, std::string_view text)
    : pretok_(pretok), text_(text) {
  match_ = pcre2_match_data_create_from_pattern(pretok.code_, nullptr);
  TIDE_CHECK(match_ != nullptr, "pre-tokenizer: out of memory for PCRE2 match data");
}

Pretokenizer::Cursor::~Cursor() {
  pcre2_match_data_free(match_);
}

bool Pretokenizer::Cursor::next(std::string_view& piece) {
  const size_t n = text_.size();
  if (pos_ >= n) return false;
  if (match_end_ <= pos_) {  // no match in hand: find the next one
    const int rc = pcre2_match(pretok_.code_, reinterpret_cast<PCRE2_SPTR>(text_.data()), n, pos_,
                               0, match_, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      match_begin_ = match_end_ = n;  // only invalid UTF-8 is left
    } else {
      TIDE_CHECK(rc > 0, "pre-tokenizer: PCRE2 failed at byte {} of a {}-byte text: {}", pos_, n,
                 pcre2_message(rc));
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_);
      match_begin_ = ovector[0];
      match_end_ = ovector[1];
      // GPT-2's, Llama 3's and Qwen2's alternatives all consume at least one character.
      TIDE_CHECK(match_end_ > match_begin_,
                 "pre-tokenizer: the regex matches the empty string at byte {} of a {}-byte text; "
                 "a pre-tokenizer pattern must match at least one character",
                 match_begin_, n);
      TIDE_ASSERT(match_begin_ >= pos_);
    }
  }
  // Bytes the pattern skipped become one piece before the match, as in HF's Isolated split. With
  // GPT-2's, Llama 3's and Qwen2's patterns those are invalid UTF-8 only (every valid character
  // is \s, \p{L}, \p{N} or none of them, so some alternative matches it).
  const size_t end = match_begin_ > pos_ ? match_begin_ : match_end_;
  piece = text_.substr(pos_, end - pos_);
  pos_ = end;
  return true;
}

std::vector<std::string_view> Pretokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  for_each(text, [&](std::string_view piece) { pieces.push_back(piece); });
  return pieces;
}

}  // namespace tide
