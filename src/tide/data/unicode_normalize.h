#pragma once
// NFC, the Unicode normalizer of Qwen2's tokenizer.json ("normalizer": {"type": "NFC"}).
//
// HF `tokenizers` normalizes text before pre-tokenizing it, so the same word typed with a
// combining accent ("e" + U+0301) or precomposed ("é") gets the same ids. tide runs utf8proc's NFC
// (Debian's libutf8proc-dev; Unicode 15), the standard algorithm HF's Rust crate also follows.
//
// Text is bytes and need not be valid UTF-8: each maximal run of valid UTF-8 is normalized on its
// own and invalid bytes are kept as they are (HF only takes valid strings, so there is no
// reference behaviour to match there).

#include <string>
#include <string_view>

namespace tide {

// The NFC form of text (text itself when it is already NFC: ASCII, for one, always is).
std::string nfc(std::string_view text);

}  // namespace tide
