#pragma once
// Added tokens: strings HF `tokenizers` matches in the text *before* normalizing and
// pre-tokenizing it, each becoming its own id (<|begin_of_text|>, <|im_start|>, <tool_call>, ...).
//
// As HF's AddedVocabulary: matching is leftmost-longest over all tokens of a group (at the first
// position where some token starts, the longest one that matches there). Tokens with
// "normalized": false are matched in the raw text; those with "normalized": true in the text
// after the normalizer (tokenizer.cpp runs both steps). "special" tokens are matched only when
// the caller asks (HF matches them unless encode_special_tokens is set); other added tokens are
// always matched. As in HF, a special token that is not matched is still found, and skipped as
// text: no other added token matches inside it. single_word/lstrip/rstrip are not implemented:
// load() refuses them.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tide {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = true;
  bool normalized = false;
};

class AddedTokens {
 public:
  AddedTokens() = default;
  // The tokens of one group (all "normalized": false, or all true).
  explicit AddedTokens(std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }

  // Splits text at the tokens it matches: on_text(segment) for the text between matches (never
  // empty), on_token(id) for each match, in order. With match_special false, special tokens are
  // not matched (they stay text).
  template <typename OnText, typename OnToken>
  void split(std::string_view text, bool match_special, OnText&& on_text,
             OnToken&& on_token) const {
    size_t done = 0;  // text before this is handed out
    for (size_t pos = 0; !tokens_.empty() && pos < text.size();) {
      const AddedToken* t = match_at(text, pos);
      if (t == nullptr) {
        ++pos;
        continue;
      }
      if (t->special && !match_special) {  // as HF: found, then skipped as text
        pos += t->content.size();
        continue;
      }
      if (pos > done) on_text(text.substr(done, pos - done));
      on_token(t->id);
      pos += t->content.size();
      done = pos;
    }
    if (done < text.size()) on_text(text.substr(done));
  }

 private:
  // The longest token matching text at pos, or nullptr.
  const AddedToken* match_at(std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;  // longest first
  std::vector<bool> starts_with_;   // [byte]: some token starts with this byte
};

}  // namespace tide
