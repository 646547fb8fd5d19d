#include "tide/data/tokenizer.h"

#include "tide/core/read_file.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_set>

#include "tide/core/error.h"
#include "tide/core/json_error.h"
#include "tide/data/unicode_normalize.h"

namespace tide {

// ---------------------------------------------------------------------------------------------
// GPT-2's bytes <-> unicode table

const std::array<uint32_t, 256>& bytes_to_unicode() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? static_cast<uint32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

namespace {

constexpr uint32_t kMaxByteCodePoint = 256 + 68;  // the table uses code points below this

const std::array<int, kMaxByteCodePoint>& unicode_to_byte() {
  static const std::array<int, kMaxByteCodePoint> table = [] {
    std::array<int, kMaxByteCodePoint> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[bytes_to_unicode()[b]] = b;
    return t;
  }();
  return table;
}

void append_utf8(uint32_t cp, std::string& out) {  // cp < 0x800 is all the table needs
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

std::string to_byte_unicode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(bytes_to_unicode()[b], out);
  return out;
}

std::string from_byte_unicode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = text[i];
    uint32_t cp = 0;
    size_t len = 1;
    if (c < 0x80) {
      cp = c;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < text.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
      len = 2;
    } else {  // 3- and 4-byte characters are never in the table: decoded for the message only
      len = (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
      if (i + len > text.size()) len = 1;
      cp = len == 3 ? (c & 0x0Fu) : len == 4 ? (c & 0x07u) : c;
      for (size_t k = 1; k < len; ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3Fu);
    }
    const int byte = cp < kMaxByteCodePoint ? unicode_to_byte()[cp] : -1;
    TIDE_CHECK(byte >= 0,
               "token string \"{}\" has a character (U+{:04X}) outside GPT-2's byte-to-unicode "
               "table; the file is not a byte-level BPE vocabulary",
               text, cp);
    out.push_back(static_cast<char>(byte));
    i += len;
  }
  return out;
}

void count_words(const Pretokenizer& pretok, std::string_view text, WordCounts& counts) {
  pretok.for_each(text, [&](std::string_view piece) { ++counts[std::string(piece)]; });
}

// ---------------------------------------------------------------------------------------------
// Training

namespace {

// The pair heap orders by count, then by smaller (a, b) so ties break the same way everywhere.
struct PairEntry {
  int64_t count;
  uint64_t key;
  bool operator<(const PairEntry& o) const {  // "lower priority than"
    return count != o.count ? count < o.count : key > o.key;
  }
};

}  // namespace

Tokenizer Tokenizer::train(std::string_view text, int vocab_size) {
  WordCounts words;
  count_words(Pretokenizer::gpt2(), text, words);
  return train(words, vocab_size);
}

Tokenizer Tokenizer::train(const WordCounts& word_counts, int vocab_size,
                           const std::function<void(int, int)>& progress) {
  TIDE_CHECK(
      vocab_size >= 257 && vocab_size <= 65536,
      "vocab_size {} is out of range; it must be at least 257 (256 bytes + <|endoftext|>) and "
      "at most 65536 (the size tide's BPE training is for; a larger vocabulary comes from a "
      "tokenizer.json)",
      vocab_size);
  Tokenizer tok;
  std::unordered_map<std::string, int> id_of;  // token bytes -> id
  for (int b = 0; b < 256; ++b) {
    tok.tokens_.emplace_back(1, static_cast<char>(b));
    tok.byte_id_[b] = b;
    id_of[tok.tokens_.back()] = b;
  }

  // The word table, sorted so that training does not depend on hash-map iteration order.
  std::vector<std::pair<std::string, int64_t>> sorted(word_counts.begin(), word_counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::vector<int32_t>> words(sorted.size());
  std::vector<int64_t> freq(sorted.size());
  for (size_t w = 0; w < sorted.size(); ++w) {
    words[w].assign(sorted[w].first.begin(), sorted[w].first.end());
    for (int32_t& s : words[w]) s = static_cast<unsigned char>(s);
    freq[w] = sorted[w].second;
  }

  // pair -> total count over the word table, and pair -> words that (may) contain it.
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> pair_words;
  auto note_word = [&](uint64_t key, uint32_t w) {
    std::vector<uint32_t>& list = pair_words[key];
    if (list.empty() || list.back() != w) list.push_back(w);
  };
  for (uint32_t w = 0; w < words.size(); ++w) {
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      const uint64_t key = pair_key(words[w][i], words[w][i + 1]);
      pair_count[key] += freq[w];
      note_word(key, w);
    }
  }
  std::priority_queue<PairEntry> heap;
  for (const auto& [key, count] : pair_count) heap.push({count, key});

  // Each merge rewrites only the words containing the pair, adjusting pair counts by the
  // difference between the word's old and new pairs. Heap entries go stale when a count changes;
  // a fresh entry is pushed and stale ones are skipped when popped.
  const int target_merges = vocab_size - 257;
  std::vector<int> touched_at(words.size(), -1);  // the merge that last rewrote word w
  std::vector<uint64_t> touched_pairs;
  std::vector<int32_t> merged;
  while (static_cast<int>(tok.tokens_.size()) + 1 < vocab_size && !heap.empty()) {
    const PairEntry top = heap.top();
    heap.pop();
    const auto it = pair_count.find(top.key);
    if (it == pair_count.end() || it->second != top.count) continue;  // stale
    const int a = static_cast<int>(top.key >> 32), b = static_cast<int>(top.key & 0xFFFFFFFFu);
    const std::string bytes = tok.tokens_[a] + tok.tokens_[b];
    // Should two different pairs ever spell the same bytes, they share one id: token strings
    // must stay unique for the vocabulary file (string -> id).
    auto [id_it, is_new] = id_of.try_emplace(bytes, static_cast<int>(tok.tokens_.size()));
    if (is_new) tok.tokens_.push_back(bytes);
    const int c = id_it->second;
    const int merge_index = tok.num_merges();
    tok.add_merge(a, b, c);

    std::vector<uint32_t> candidates = std::move(pair_words[top.key]);
    pair_words.erase(top.key);
    pair_count.erase(it);
    touched_pairs.clear();
    for (uint32_t w : candidates) {
      if (touched_at[w] == merge_index) continue;
      touched_at[w] = merge_index;
      std::vector<int32_t>& word = words[w];
      merged.clear();
      for (size_t i = 0; i < word.size(); ++i) {
        if (i + 1 < word.size() && word[i] == a && word[i + 1] == b) {
          merged.push_back(c);
          ++i;
        } else {
          merged.push_back(word[i]);
        }
      }
      if (merged.size() == word.size()) continue;  // a stale listing: the pair left this word
      for (size_t i = 0; i + 1 < word.size(); ++i) {
        const uint64_t key = pair_key(word[i], word[i + 1]);
        if (key == top.key) continue;  // already removed as a whole
        pair_count[key] -= freq[w];
        touched_pairs.push_back(key);
      }
      for (size_t i = 0; i + 1 < merged.size(); ++i) {
        const uint64_t key = pair_key(merged[i], merged[i + 1]);
        pair_count[key] += freq[w];
        touched_pairs.push_back(key);
        if (merged[i] == c || merged[i + 1] == c) note_word(key, w);
      }
      word.swap(merged);
    }
    std::sort(touched_pairs.begin(), touched_pairs.end());
    touched_pairs.erase(std::unique(touched_pairs.begin(), touched_pairs.end()),
                        touched_pairs.end());
    for (uint64_t key : touched_pairs) {
      const auto pc = pair_count.find(key);
      if (pc->second > 0) {
        heap.push({pc->second, key});
      } else {
        pair_count.erase(pc);
      }
    }
    if (progress && (tok.num_merges() % 256 == 0)) progress(tok.num_merges(), target_merges);
  }
  tok.eot_id_ = static_cast<int>(tok.tokens_.size());
  tok.tokens_.emplace_back(kEndOfText);
  if (progress) progress(tok.num_merges(), target_merges);
  return tok;
}

void Tokenizer::add_merge(int a, int b, int result) {
  merge_of_.emplace(pair_key(a, b), Merge{static_cast<int>(merges_.size()), result});
  merges_.emplace_back(a, b);
}

// ---------------------------------------------------------------------------------------------
// Encoding and decoding

void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_ && piece.size() > 1) {  // HF's BPE: a whole vocabulary token skips merges
    const auto it = whole_.find(std::string(piece));
    if (it != whole_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> symbols(piece.size());
  for (size_t i = 0; i < piece.size(); ++i)
    symbols[i] = byte_id_[static_cast<unsigned char>(piece[i])];
  // GPT-2's bpe(): repeatedly take the adjacent pair with the lowest merge rank and merge all
  // its occurrences, left to right, until no adjacent pair has a merge. Pieces are short
  // (words), so the quadratic scan is cheaper than a heap.
  while (symbols.size() > 1) {
    int best_rank = std::numeric_limits<int>::max();
    uint64_t best_key = 0;
    int best_result = -1;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const uint64_t key = pair_key(symbols[i], symbols[i + 1]);
      const auto it = merge_of_.find(key);
      if (it != merge_of_.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank;
        best_key = key;
        best_result = it->second.result;
      }
    }
    if (best_result < 0) break;
    const int32_t a = static_cast<int32_t>(best_key >> 32),
                  b = static_cast<int32_t>(best_key & 0xFFFFFFFFu);
    size_t j = 0;
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size() && symbols[i] == a && symbols[i + 1] == b) {
        symbols[j++] = best_result;
        ++i;
      } else {
        symbols[j++] = symbols[i];
      }
    }
    symbols.resize(j);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& out,
                            SpecialTokens special) const {
  // As HF: added tokens that are matched after normalizing, then the pre-tokenizer and BPE on
  // the text between them.
  added_normalized_.split(
      text, special == SpecialTokens::kMatch,
      [&](std::string_view part) {
        pretok_->for_each(part, [&](std::string_view piece) { encode_piece(piece, out); });
      },
      [&](int32_t id) { out.push_back(id); });
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out,
                              SpecialTokens special) const {
  // As HF: added tokens matched in the raw text first; the text between them is normalized.
  added_raw_.split(
      text, special == SpecialTokens::kMatch,
      [&](std::string_view part) {
        if (nfc_) {
          encode_text(nfc(part), out, special);
        } else {
          encode_text(part, out, special);
        }
      },
      [&](int32_t id) { out.push_back(id); });
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, SpecialTokens special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  encode_append(text, out, special);
  return out;
}

std::vector<int32_t> Tokenizer::document_prefix() const {
  if (template_prefix_.empty() && template_suffix_.empty()) return {eot_id_};
  return template_prefix_;
}

std::vector<int32_t> Tokenizer::document_suffix() const {
  if (template_prefix_.empty() && template_suffix_.empty()) return {};
  std::vector<int32_t> suffix = template_suffix_;
  const auto has_eot = [&](const std::vector<int32_t>& v) {
    return std::find(v.begin(), v.end(), eot_id_) != v.end();
  };
  if (!has_eot(template_prefix_) && !has_eot(template_suffix_)) suffix.push_back(eot_id_);
  return suffix;
}

const std::string& Tokenizer::token_bytes(int id) const {
  TIDE_CHECK(id >= 0 && id < vocab_size(),
             "token id {} is outside the vocabulary of {} tokens; the ids come from a different "
             "tokenizer (check model.vocab_size and the tokenizer file)",
             id, vocab_size());
  return tokens_[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Files

Tokenizer Tokenizer::from_tables(const std::vector<std::pair<std::string, int>>& vocab,
                                 const std::vector<std::pair<std::string, std::string>>& merges,
                                 std::vector<AddedToken> added, const std::string& source) {
  // Older files and GPT-2's encoder.json hold <|endoftext|> in the vocabulary only.
  const std::string eot_text(kEndOfText);
  const auto is_eot = [](const std::string& s) { return s == kEndOfText || s == kLlama3EndOfText; };
  if (std::none_of(added.begin(), added.end(),
                   [&](const AddedToken& a) { return is_eot(a.content); })) {
    for (const auto& [text, id] : vocab) {
      if (text == eot_text) added.push_back({eot_text, id, /*special=*/true, /*normalized=*/true});
    }
  }
  std::unordered_map<std::string, int> added_id;  // content -> id
  for (const AddedToken& a : added) {
    const auto [it, is_new] = added_id.emplace(a.content, a.id);
    TIDE_CHECK(is_new || it->second == a.id,
               "{}: added token \"{}\" is listed twice (ids {} and {}); the file is corrupt",
               source, a.content, it->second, a.id);
  }
  int n = 0;
  for (const auto& [text, id] : vocab) n = std::max(n, id + 1);
  for (const AddedToken& a : added) n = std::max(n, a.id + 1);
  // Checked before allocating n tokens: a corrupt id far past the end must not cost gigabytes.
  std::unordered_set<std::string_view> in_vocab;
  for (const auto& [text, id] : vocab) in_vocab.insert(text);
  size_t tokens = vocab.size();
  for (const AddedToken& a : added) tokens += in_vocab.contains(a.content) ? 0 : 1;
  TIDE_CHECK(static_cast<size_t>(n) <= tokens,
             "{}: ids run up to {}, but there are only {} tokens; ids must be 0..{} with each used "
             "once; the file is corrupt",
             source, n - 1, tokens, tokens - 1);
  TIDE_CHECK(n >= 257,
             "{}: the vocabulary has {} tokens; a byte-level BPE vocabulary has at least 257 (256 "
             "bytes + <|endoftext|>)",
             source, n);
  Tokenizer tok;
  tok.tokens_.resize(n);
  std::vector<bool> seen(n, false);
  std::unordered_map<std::string, int> id_of;  // byte-unicode string -> id (model vocabulary)
  for (const auto& [text, id] : vocab) {
    TIDE_CHECK(id >= 0 && !seen[id],
               "{}: token \"{}\" has id {}, but ids must be 0..{} with each used once; the file is "
               "corrupt",
               source, text, id, n - 1);
    seen[id] = true;
    const auto a = added_id.find(text);
    if (a != added_id.end()) {  // an added token that is also in the model's vocabulary
      TIDE_CHECK(a->second == id,
                 "{}: {} has id {} in \"added_tokens\" but {} in model.vocab; the file is corrupt",
                 source, text, a->second, id);
      continue;
    }
    try {
      tok.tokens_[id] = from_byte_unicode(text);
    } catch (const Error& e) {
      TIDE_FAIL("{}: {}", source, e.what());
    }
    id_of.emplace(text, id);
  }
  for (const AddedToken& a : added) {
    TIDE_CHECK(a.id >= 0 && (!seen[a.id] || added_id.contains(a.content)),
               "{}: added token \"{}\" has id {}, which the vocabulary gives another token; the "
               "file is corrupt",
               source, a.content, a.id);
    seen[a.id] = true;
    tok.tokens_[a.id] = a.content;
    if (is_eot(a.content) && (tok.eot_id_ < 0 || a.content == eot_text)) tok.eot_id_ = a.id;
  }
  const auto unused = std::find(seen.begin(), seen.end(), false);
  TIDE_CHECK(unused == seen.end(),
             "{}: no token has id {}, but ids must be 0..{} with each used once; the file is "
             "corrupt",
             source, unused - seen.begin(), n - 1);
  TIDE_CHECK(tok.eot_id_ >= 0,
             "{}: no end-of-text token; tide separates documents with {} (GPT-2, Qwen2; id 50256 "
             "in GPT-2) or {} (Llama 3): add one of them to \"added_tokens\"",
             source, kEndOfText, kLlama3EndOfText);
  std::vector<AddedToken> raw, normalized;
  for (AddedToken& a : added) (a.normalized ? normalized : raw).push_back(std::move(a));
  tok.added_raw_ = AddedTokens(std::move(raw));
  tok.added_normalized_ = AddedTokens(std::move(normalized));
  for (int b = 0; b < 256; ++b) {
    const std::string text = to_byte_unicode(std::string(1, static_cast<char>(b)));
    const auto it = id_of.find(text);
    TIDE_CHECK(it != id_of.end(),
               "{}: no token for byte 0x{:02x} (\"{}\"); a byte-level BPE vocabulary needs all 256 "
               "bytes",
               source, b, text);
    tok.byte_id_[b] = it->second;
  }
  for (size_t m = 0; m < merges.size(); ++m) {
    const auto& [left, right] = merges[m];
    const auto a = id_of.find(left), b = id_of.find(right), c = id_of.find(left + right);
    for (const auto& [it, what] : {std::pair{a, &left}, std::pair{b, &right}}) {
      TIDE_CHECK(it != id_of.end(),
                 "{}: merge {} (\"{} {}\") uses \"{}\", which is not in the vocabulary; the merges "
                 "and the vocabulary do not belong together",
                 source, m + 1, left, right, *what);
    }
    TIDE_CHECK(c != id_of.end(),
               "{}: merge {} (\"{} {}\") makes \"{}\", which is not in the vocabulary; the merges "
               "and the vocabulary do not belong together",
               source, m + 1, left, right, left + right);
    tok.add_merge(a->second, b->second, c->second);
  }
  return tok;
}

namespace {

// Far above any real vocabulary (Llama 3: 128256, Qwen2: 151646), far below int32's limit.
constexpr int64_t kMaxVocab = int64_t{1} << 24;

std::vector<std::pair<std::string, int>> vocab_from_json(const nlohmann::json& j,
                                                         const std::string& source) {
  TIDE_CHECK(j.is_object(), "{}: the vocabulary must be a JSON object {{\"token\": id, ...}}",
             source);
  std::vector<std::pair<std::string, int>> vocab;
  for (const auto& [text, id] : j.items()) {
    TIDE_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < kMaxVocab,
               "{}: token \"{}\" has id {}, not an integer in [0, {})", source, text, id.dump(),
               kMaxVocab);
    vocab.emplace_back(text, id.get<int>());
  }
  return vocab;
}

// "a b" -> (a, b); token strings never contain a space (a space byte is "Ġ" in byte-unicode).
std::pair<std::string, std::string> split_merge(std::string_view line, const std::string& where) {
  const size_t space = line.find(' ');
  TIDE_CHECK(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                 line.find(' ', space + 1) == std::string_view::npos,
             "{}: \"{}\" is not a merge; each merge is two tokens separated by one space", where,
             line);
  return {std::string(line.substr(0, space)), std::string(line.substr(space + 1))};
}

nlohmann::json parse_json(const std::string& text, const std::string& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    TIDE_FAIL("{}: not valid JSON ({}); check that the file is complete", path, json_error_text(e));
  }
}

}  // namespace

Tokenizer Tokenizer::load_gpt2(const std::string& encoder_json_path,
                               const std::string& vocab_bpe_path) {
  const nlohmann::json encoder =
      parse_json(read_file(encoder_json_path, "GPT-2 encoder.json"), encoder_json_path);
  const std::string bpe = read_file(vocab_bpe_path, "GPT-2 vocab.bpe");
  std::vector<std::pair<std::string, std::string>> merges;
  std::istringstream lines(bpe);
  std::string line;
  for (int line_no = 1; std::getline(lines, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    merges.push_back(split_merge(line, fmt::format("{} line {}", vocab_bpe_path, line_no)));
  }
  return from_tables(vocab_from_json(encoder, encoder_json_path), merges, {},
                     encoder_json_path + " + " + vocab_bpe_path);
}

// ---------------------------------------------------------------------------------------------
// tokenizer.json
//
// HF `tokenizers`' format, as in HF's own GPT-2 tokenizer.json: a BPE model (vocab: byte-unicode
// token -> id, <|endoftext|> included; merges in rank order), GPT-2's pre-tokenizer (ByteLevel
// with use_regex, or Split with GPT-2's regex followed by ByteLevel without it), a ByteLevel
// decoder, and <|endoftext|> as the one added (special) token. docs/data.md shows a file.

namespace {

// A field of an object, or nullptr: j.value() would throw a JSON type_error for another type.
const nlohmann::json* field(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

std::string show(const nlohmann::json& j) {
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return s.size() > 200 ? s.substr(0, 200) + "..." : s;
}

bool is_null_or(const nlohmann::json* j, const nlohmann::json& value) {
  return j == nullptr || j->is_null() || *j == value;
}

// "type" of an HF component; "" for null or absent.
std::string type_of(const nlohmann::json* j) {
  const nlohmann::json* t = j ? field(*j, "type") : nullptr;
  return t && t->is_string() ? t->get<std::string>() : "";
}

// ByteLevel with the given use_regex (HF's default is true) and no prefix space (HF's default
// is true, so a file must say false).
bool is_byte_level(const nlohmann::json& j, bool use_regex) {
  const nlohmann::json* prefix = field(j, "add_prefix_space");
  const nlohmann::json* regex = field(j, "use_regex");
  return type_of(&j) == "ByteLevel" && prefix && *prefix == false &&
         (regex ? *regex == use_regex : use_regex);
}

// What a tokenizer.json asks for around the BPE tables.
struct HfPipeline {
  std::string pattern;  // the Split regex; "" for ByteLevel(use_regex: true), GPT-2's
  bool nfc = false;     // normalizer NFC
  std::vector<std::string> prefix, suffix;  // TemplateProcessing's single: tokens around $A
  std::unordered_map<std::string, std::vector<int32_t>> template_ids;  // its special_tokens
};

std::string parse_split(const nlohmann::json& split, const std::string& path) {
  const nlohmann::json* pattern = field(split, "pattern");
  const nlohmann::json* regex = pattern ? field(*pattern, "Regex") : nullptr;
  TIDE_CHECK(regex && regex->is_string(),
             "{}: the Split pre-tokenizer's \"pattern\" is {}; tide runs a regex ({{\"Regex\": "
             "\"...\"}}, as in Llama 3's and Qwen2's files), not a literal {{\"String\": ...}}",
             path, pattern ? show(*pattern) : "missing");
  TIDE_CHECK(
      is_null_or(field(split, "behavior"), "Isolated") && is_null_or(field(split, "invert"), false),
      "{}: the Split pre-tokenizer has behavior {} and invert {}; tide splits with behavior "
      "\"Isolated\" and invert false only (every match a piece of its own)",
      path, show(split.value("behavior", nlohmann::json())),
      show(split.value("invert", nlohmann::json())));
  return regex->get<std::string>();
}

// TemplateProcessing: "single" is special tokens around one sequence $A.
void parse_template(const nlohmann::json& t, const std::string& path, HfPipeline& p) {
  const nlohmann::json* single = field(t, "single");
  const auto bad = [&] {
    TIDE_FAIL(
        "{}: the TemplateProcessing post-processor's \"single\" is {}; tide supports special "
        "tokens around one sequence ($A), e.g. Llama 3's [<|begin_of_text|>, $A]",
        path, single ? show(*single) : "missing");
  };
  if (!single || !single->is_array()) bad();
  bool seen_a = false;
  for (const nlohmann::json& item : *single) {
    const nlohmann::json* special = field(item, "SpecialToken");
    const nlohmann::json* sequence = field(item, "Sequence");
    const nlohmann::json* id = special    ? field(*special, "id")
                               : sequence ? field(*sequence, "id")
                                          : nullptr;
    if (!id || !id->is_string()) bad();
    if (sequence) {
      if (seen_a || *id != "A") bad();
      seen_a = true;
    } else {
      (seen_a ? p.suffix : p.prefix).push_back(id->get<std::string>());
    }
  }
  if (!seen_a) bad();
  const nlohmann::json* specials = field(t, "special_tokens");
  for (const auto& list : {p.prefix, p.suffix}) {
    for (const std::string& name : list) {
      const nlohmann::json* entry = specials ? field(*specials, name.c_str()) : nullptr;
      const nlohmann::json* ids = entry ? field(*entry, "ids") : nullptr;
      TIDE_CHECK(ids && ids->is_array() && !ids->empty() &&
                     std::all_of(ids->begin(), ids->end(),
                                 [](const nlohmann::json& i) { return i.is_number_integer(); }),
                 "{}: the TemplateProcessing post-processor uses \"{}\" but its "
                 "\"special_tokens\" give no ids for it; the file is corrupt",
                 path, name);
      p.template_ids[name] = ids->get<std::vector<int32_t>>();
    }
  }
}

HfPipeline parse_pipeline(const nlohmann::json& j, const std::string& path) {
  HfPipeline p;
  const nlohmann::json* normalizer = field(j, "normalizer");
  if (normalizer && !normalizer->is_null()) {
    TIDE_CHECK(type_of(normalizer) == "NFC",
               "{}: \"normalizer\" is {}; tide applies none (GPT-2, Llama 3) or NFC (Qwen2): with "
               "another its ids would differ from HF's; use a tokenizer with one of those",
               path, show(*normalizer));
    p.nfc = true;
  }
  const nlohmann::json* pre = field(j, "pre_tokenizer");
  const nlohmann::json* steps = pre ? field(*pre, "pretokenizers") : nullptr;
  if (pre && is_byte_level(*pre, true)) {
    p.pattern.clear();  // GPT-2's regex, inside ByteLevel
  } else if (type_of(pre) == "Sequence" && steps && steps->is_array() && steps->size() == 2 &&
             type_of(&(*steps)[0]) == "Split" && is_byte_level((*steps)[1], false)) {
    p.pattern = parse_split((*steps)[0], path);
  } else {
    TIDE_FAIL(
        "{}: \"pre_tokenizer\" is {}; tide runs {{\"type\": \"ByteLevel\", "
        "\"add_prefix_space\": false, \"use_regex\": true}} (GPT-2), or a Sequence of a Split "
        "with a regex (behavior Isolated) and a ByteLevel with use_regex false and "
        "add_prefix_space false (Llama 3, Qwen2)",
        path, pre ? show(*pre) : "missing");
  }
  const nlohmann::json* post = field(j, "post_processor");
  const nlohmann::json* processors = post ? field(*post, "processors") : nullptr;
  std::vector<const nlohmann::json*> steps_post;
  if (type_of(post) == "Sequence" && processors && processors->is_array()) {
    for (const nlohmann::json& q : *processors) steps_post.push_back(&q);
  } else if (post && !post->is_null()) {
    steps_post.push_back(post);
  }
  int templates = 0;
  for (const nlohmann::json* q : steps_post) {
    const std::string type = type_of(q);
    TIDE_CHECK(type == "ByteLevel" || (type == "TemplateProcessing" && templates == 0),
               "{}: \"post_processor\" is {}; tide runs ByteLevel (it only changes offsets) and "
               "one TemplateProcessing (special tokens around the text, as Llama 3's BOS), alone "
               "or in a Sequence",
               path, show(*post));
    if (type == "TemplateProcessing") {
      parse_template(*q, path, p);
      ++templates;
    }
  }
  const std::string decoder = type_of(field(j, "decoder"));
  TIDE_CHECK(decoder.empty() || decoder == "ByteLevel",
             "{}: \"decoder\" is {}; a byte-level BPE decodes with ByteLevel (or null)", path,
             decoder);
  return p;
}

std::vector<AddedToken> added_tokens_from_json(const nlohmann::json* added,
                                               const std::string& path) {
  TIDE_CHECK(added == nullptr || added->is_null() || added->is_array(),
             "{}: \"added_tokens\" is {}, not a list", path, added ? show(*added) : "");
  std::vector<AddedToken> out;
  for (size_t i = 0; added && added->is_array() && i < added->size(); ++i) {
    const nlohmann::json& a = (*added)[i];
    const nlohmann::json* content = field(a, "content");
    const nlohmann::json* id = field(a, "id");
    TIDE_CHECK(content && content->is_string() && id && id->is_number_integer() &&
                   id->get<int64_t>() >= 0 && id->get<int64_t>() < kMaxVocab,
               "{}: added token {} is {}; it needs a \"content\" string and an integer \"id\" in "
               "[0, {})",
               path, i + 1, show(a), kMaxVocab);
    for (const char* key : {"single_word", "lstrip", "rstrip"}) {
      TIDE_CHECK(
          is_null_or(field(a, key), false),
          "{}: added token \"{}\" has \"{}\": true, which tide does not implement (it "
          "matches added tokens exactly, as Llama 3's and Qwen2's files ask); set it to false",
          path, content->get<std::string>(), key);
    }
    const nlohmann::json* special = field(a, "special");
    const nlohmann::json* normalized = field(a, "normalized");
    AddedToken t;
    t.content = content->get<std::string>();
    t.id = static_cast<int32_t>(id->get<int64_t>());
    t.special = special && special->is_boolean() && special->get<bool>();
    t.normalized = normalized && normalized->is_boolean() ? normalized->get<bool>() : !t.special;
    out.push_back(std::move(t));
  }
  return out;
}

// model.merges: "a b" strings (tokenizers < 0.20, and GPT-2's file) or ["a", "b"] pairs.
std::vector<std::pair<std::string, std::string>> merges_from_json(const nlohmann::json& j,
                                                                  const std::string& path) {
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(j.size());
  for (size_t m = 0; m < j.size(); ++m) {
    const nlohmann::json& e = j[m];
    if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      TIDE_CHECK(e.is_string(), "{}: merge {} is {}, not \"a b\" or [\"a\", \"b\"]", path, m + 1,
                 show(e));
      merges.push_back(split_merge(e.get<std::string>(), fmt::format("{} merge {}", path, m + 1)));
    }
  }
  return merges;
}

// A tokenizer file's contents, for from_tables().
struct Tables {
  std::vector<std::pair<std::string, int>> vocab;  // byte-unicode string -> id
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<AddedToken> added;
  bool ignore_merges = false;
};

Tables hf_tables(const nlohmann::json& j, const std::string& path);
Tables tide_bpe_tables(const nlohmann::json& j, const std::string& path);

}  // namespace

void Tokenizer::save(const std::string& path) const {
  const std::string text = to_hf_json();
  std::ofstream out(path, std::ios::binary);
  TIDE_CHECK(out.good(), "{}: cannot open for writing; check that the directory exists", path);
  out << text;
  TIDE_CHECK(out.good(), "{}: write failed; check free disk space", path);
}

std::string Tokenizer::to_hf_json() const {
  if (!hf_json_.empty()) return hf_json_;
  using OJson = nlohmann::ordered_json;  // keys in HF's order, vocab in id order
  const std::string eot(kEndOfText);
  // Appended to ordered_json's underlying vector: its operator[] searches linearly, which is
  // quadratic over a 50k vocabulary. Strings are unique (checked), as HF's vocab needs.
  // No other token is spelled "<|endoftext|>": files map strings to ids, and trained tokens
  // never cross a pre-token piece ("<|", "endoftext", "|>").
  OJson vocab = OJson::object();
  auto& entries = vocab.get_ref<OJson::object_t&>();
  entries.reserve(tokens_.size());
  std::unordered_set<std::string> seen;
  for (int id = 0; id < vocab_size(); ++id) {
    std::string text = id == eot_id_ ? eot : to_byte_unicode(tokens_[id]);
    TIDE_ASSERT(seen.insert(text).second);
    entries.emplace_back(std::move(text), id);
  }
  OJson merges = OJson::array();
  for (const auto& [a, b] : merges_)
    merges.push_back(to_byte_unicode(tokens_[a]) + " " + to_byte_unicode(tokens_[b]));
  const auto byte_level = [](bool add_prefix_space, bool trim_offsets) {
    return OJson{{"type", "ByteLevel"},
                 {"add_prefix_space", add_prefix_space},
                 {"trim_offsets", trim_offsets},
                 {"use_regex", true}};
  };
  // As HF's GPT-2 tokenizer.json. The post-processor and decoder flags only affect offsets.
  const OJson j = {{"version", "1.0"},
                   {"truncation", nullptr},
                   {"padding", nullptr},
                   {"added_tokens", OJson::array({OJson{{"id", eot_id_},
                                                        {"content", eot},
                                                        {"single_word", false},
                                                        {"lstrip", false},
                                                        {"rstrip", false},
                                                        {"normalized", true},
                                                        {"special", true}}})},
                   {"normalizer", nullptr},
                   {"pre_tokenizer", byte_level(false, true)},
                   {"post_processor", byte_level(true, false)},
                   {"decoder", byte_level(true, true)},
                   {"model",
                    {{"type", "BPE"},
                     {"dropout", nullptr},
                     {"unk_token", nullptr},
                     {"continuing_subword_prefix", ""},
                     {"end_of_word_suffix", ""},
                     {"fuse_unk", false},
                     {"byte_fallback", false},
                     {"vocab", vocab},
                     {"merges", merges}}}};
  return j.dump(1) + "\n";
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::string text = read_file(path, "tokenizer file");
  const nlohmann::json j = parse_json(text, path);
  if (field(j, "format") != nullptr) {
    const Tables t = tide_bpe_tables(j, path);
    return from_tables(t.vocab, t.merges, {}, path);
  }
  const Tables t = hf_tables(j, path);
  const HfPipeline p = parse_pipeline(j, path);
  Tokenizer tok = from_tables(t.vocab, t.merges, t.added, path);
  if (!p.pattern.empty() && p.pattern != Pretokenizer::kGpt2Pattern) {
    try {
      tok.pretok_ = std::make_shared<const Pretokenizer>(p.pattern);
    } catch (const Error& e) {
      TIDE_FAIL(
          "{}: the Split pre-tokenizer: {}; tide runs the pattern on PCRE2 (Perl syntax, "
          "as HF's Oniguruma for Llama 3's and Qwen2's patterns), which must accept it",
          path, e.what());
    }
  }
  tok.nfc_ = p.nfc;
  tok.ignore_merges_ = t.ignore_merges;
  if (tok.ignore_merges_) {  // the model's own tokens (added tokens are matched before BPE)
    std::unordered_set<std::string_view> added;
    for (const AddedToken& a : t.added) added.insert(a.content);
    tok.whole_.reserve(t.vocab.size());
    for (const auto& [text, id] : t.vocab) {
      if (!added.contains(text)) tok.whole_.emplace(tok.tokens_[id], id);
    }
  }
  for (const auto& [names, ids] :
       {std::pair{&p.prefix, &tok.template_prefix_}, std::pair{&p.suffix, &tok.template_suffix_}}) {
    for (const std::string& name : *names) {
      for (int32_t id : p.template_ids.at(name)) {
        TIDE_CHECK(id >= 0 && id < tok.vocab_size(),
                   "{}: the TemplateProcessing post-processor's \"{}\" has id {}, outside the "
                   "vocabulary of {} tokens; the file is corrupt",
                   path, name, id, tok.vocab_size());
        ids->push_back(id);
      }
    }
  }
  // tide's own writer (to_hf_json) reproduces GPT-2's pipeline, with tide export's template
  // (<|endoftext|> first) at most; anything else is saved as the file was.
  const bool gpt2 = p.pattern.empty() || p.pattern == Pretokenizer::kGpt2Pattern;
  const bool eot_only = t.added.empty() || (t.added.size() == 1 &&
                                            t.added[0].content == kEndOfText && t.added[0].special);
  const bool eot_template =
      tok.template_suffix_.empty() &&
      (tok.template_prefix_.empty() || tok.template_prefix_ == std::vector<int32_t>{tok.eot_id_});
  if (!(gpt2 && !p.nfc && !t.ignore_merges && eot_only && eot_template))
    tok.hf_json_ = std::move(text);
  return tok;
}

namespace {

Tables hf_tables(const nlohmann::json& j, const std::string& path) {
  const nlohmann::json* model = field(j, "model");
  TIDE_CHECK(model != nullptr,
             "{}: not a tokenizer.json: neither HF tokenizers' format (no \"model\") nor tide's "
             "older \"tide-bpe\" format; create one with `tide prepare` or HF's "
             "Tokenizer.save(), or load GPT-2's encoder.json + vocab.bpe instead",
             path);
  const std::string type = type_of(model);
  TIDE_CHECK(type == "BPE" || (type.empty() && model->is_object()),
             "{}: \"model\" is {}; tide reads byte-level BPE tokenizers only (\"type\": \"BPE\", "
             "as in GPT-2's, Llama 3's and Qwen2's files), not WordPiece or Unigram (BERT, T5)",
             path, type.empty() ? show(*model) : "of type " + type);
  const nlohmann::json* vocab_json = field(*model, "vocab");
  const nlohmann::json* merges_json = field(*model, "merges");
  TIDE_CHECK(vocab_json && merges_json && merges_json->is_array(),
             "{}: \"model\" lacks \"vocab\" or \"merges\"; the file is not a complete BPE "
             "tokenizer",
             path);
  // Options that change which ids HF produces, and that tide does not implement.
  const nlohmann::json* dropout = field(*model, "dropout");
  TIDE_CHECK(is_null_or(dropout, 0),  // 0 == 0.0 in nlohmann::json
             "{}: model.dropout is {}; BPE dropout makes encoding random: set it to null", path,
             dropout ? show(*dropout) : "");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const nlohmann::json* affix = field(*model, key);
    TIDE_CHECK(is_null_or(affix, ""),
               "{}: model.{} is {}; a byte-level BPE has none: set it to \"\" or null", path, key,
               affix ? show(*affix) : "");
  }
  const nlohmann::json* ignore_merges = field(*model, "ignore_merges");
  TIDE_CHECK(ignore_merges == nullptr || ignore_merges->is_null() || ignore_merges->is_boolean(),
             "{}: model.ignore_merges is {}, not true or false", path, show(*ignore_merges));
  Tables t;
  t.ignore_merges = ignore_merges && ignore_merges->is_boolean() && ignore_merges->get<bool>();
  t.vocab = vocab_from_json(*vocab_json, path);
  t.merges = merges_from_json(*merges_json, path);
  t.added = added_tokens_from_json(field(j, "added_tokens"), path);
  return t;
}

// tide's tokenizer.json before it took HF's format (still read: runs and checkpoints hold it):
//   {"format": "tide-bpe", "version": 1, "pretokenizer": "gpt2",
//    "vocab": {"<byte-unicode token>": id, ...},        (GPT-2 encoder.json, without specials)
//    "merges": ["a b", ...],                             (GPT-2 vocab.bpe, in rank order)
//    "special_tokens": {"<|endoftext|>": id}}
Tables tide_bpe_tables(const nlohmann::json& j, const std::string& path) {
  const nlohmann::json* format = field(j, "format");
  TIDE_CHECK(format != nullptr && *format == "tide-bpe",
             "{}: \"format\" is {}; tide reads HF tokenizers' tokenizer.json (no \"format\" field) "
             "or its own older \"format\": \"tide-bpe\"; re-create the file with `tide prepare`",
             path, format ? show(*format) : "");
  const nlohmann::json* version = field(j, "version");
  TIDE_CHECK(version != nullptr && *version == 1,
             "{}: tokenizer file version {} is not supported (expected 1)", path,
             version ? show(*version) : "(none)");
  const nlohmann::json* merges_json = field(j, "merges");
  const nlohmann::json* specials = field(j, "special_tokens");
  const std::string eot_text(Tokenizer::kEndOfText);
  const nlohmann::json* eot = specials ? field(*specials, eot_text.c_str()) : nullptr;
  TIDE_CHECK(
      field(j, "vocab") && merges_json && merges_json->is_array() && eot,
      "{}: tokenizer file lacks \"vocab\", \"merges\" or \"special_tokens\".\"{}\"; re-create "
      "it with `tide prepare`",
      path, eot_text);
  std::vector<std::pair<std::string, int>> vocab = vocab_from_json(j["vocab"], path);
  TIDE_CHECK(eot->is_number_integer() && eot->get<int64_t>() >= 0 && eot->get<int64_t>() < 65536,
             "{}: special token id {} must be an integer in [0, 65536); re-create the file with "
             "`tide prepare`",
             path, show(*eot));
  vocab.emplace_back(std::string(Tokenizer::kEndOfText), eot->get<int>());
  Tables t;
  t.vocab = std::move(vocab);
  t.merges = merges_from_json(*merges_json, path);
  return t;
}

}  // namespace
}  // namespace tide
