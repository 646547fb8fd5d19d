#include "tide/data/added_tokens.h"

#include <algorithm>

namespace tide {

AddedTokens::AddedTokens(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  std::erase_if(tokens_, [](const AddedToken& t) { return t.content.empty(); });
  // Longest first, so the first token that matches at a position is the longest there.
  std::stable_sort(tokens_.begin(), tokens_.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.content.size() > b.content.size();
  });
  starts_with_.assign(256, false);
  for (const AddedToken& t : tokens_) starts_with_[static_cast<unsigned char>(t.content[0])] = true;
}

const AddedToken* AddedTokens::match_at(std::string_view text, size_t pos) const {
  if (!starts_with_[static_cast<unsigned char>(text[pos])]) return nullptr;
  const std::string_view rest = text.substr(pos);
  for (const AddedToken& t : tokens_) {
    if (rest.starts_with(t.content)) return &t;
  }
  return nullptr;
}

}  // namespace tide
