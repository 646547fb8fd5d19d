#include "tide/data/tokenizer.h"

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

std::string read_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  TIDE_CHECK(!std::filesystem::is_directory(path, ec),
             "{}: is a directory, not a {}; check the path", path, what);
  std::ifstream in(path, std::ios::binary);
  TIDE_CHECK(in.good(), "{}: cannot open {}; check the path", path, what);
  std::ostringstream ss;
  ss << in.rdbuf();
  TIDE_CHECK(!in.bad(), "{}: cannot read {}; check that it is a readable file", path, what);
  return ss.str();
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
      "at most 65536 (token shards store uint16 ids)",
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

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  pretok_->for_each(text, [&](std::string_view piece) { encode_piece(piece, out); });
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  encode_append(text, out);
  return out;
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
                                 const std::string& eot_string, const std::string& source) {
  const int n = static_cast<int>(vocab.size());
  TIDE_CHECK(n >= 257 && n <= 65536,
             "{}: the vocabulary has {} tokens; a byte-level BPE vocabulary has between 257 and "
             "65536 (256 bytes + <|endoftext|> at least)",
             source, n);
  Tokenizer tok;
  tok.tokens_.resize(n);
  std::vector<bool> seen(n, false);
  std::unordered_map<std::string, int> id_of;  // byte-unicode string -> id
  for (const auto& [text, id] : vocab) {
    TIDE_CHECK(id >= 0 && id < n && !seen[id],
               "{}: token \"{}\" has id {}, but ids must be 0..{} with each used once; the file is "
               "corrupt",
               source, text, id, n - 1);
    seen[id] = true;
    if (text == eot_string) {
      TIDE_CHECK(tok.eot_id_ < 0, "{}: {} is listed twice (ids {} and {}); the file is corrupt",
                 source, eot_string, tok.eot_id_, id);
      tok.eot_id_ = id;
      tok.tokens_[id] = std::string(kEndOfText);
      continue;
    }
    try {
      tok.tokens_[id] = from_byte_unicode(text);
    } catch (const Error& e) {
      TIDE_FAIL("{}: {}", source, e.what());
    }
    id_of.emplace(text, id);
  }
  TIDE_CHECK(tok.eot_id_ >= 0,
             "{}: no {} token in the vocabulary; add it (GPT-2 has it as id 50256)", source,
             eot_string);
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

std::vector<std::pair<std::string, int>> vocab_from_json(const nlohmann::json& j,
                                                         const std::string& source) {
  TIDE_CHECK(j.is_object(), "{}: the vocabulary must be a JSON object {{\"token\": id, ...}}",
             source);
  std::vector<std::pair<std::string, int>> vocab;
  for (const auto& [text, id] : j.items()) {
    TIDE_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < 65536,
               "{}: token \"{}\" has id {}, not an integer in [0, 65536)", source, text, id.dump());
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
  return from_tables(vocab_from_json(encoder, encoder_json_path), merges, std::string(kEndOfText),
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

bool is_gpt2_split(const nlohmann::json& j) {
  const nlohmann::json* pattern = field(j, "pattern");
  const nlohmann::json* regex = pattern ? field(*pattern, "Regex") : nullptr;
  return type_of(&j) == "Split" && regex && *regex == Pretokenizer::kGpt2Pattern &&
         is_null_or(field(j, "behavior"), "Isolated") && is_null_or(field(j, "invert"), false);
}

// `tide export`'s post-processor: <|endoftext|> before the text ("single": [<|endoftext|>, A]).
// It changes what HF's tokenizer(text) returns, not the encoding tide reads from the file, and
// tide puts <|endoftext|> before a document itself (training, `tide sample`).
bool is_eot_first_template(const nlohmann::json& p) {
  const nlohmann::json* single = field(p, "single");
  if (!single || !single->is_array() || single->size() != 2) return false;
  const nlohmann::json* special = field((*single)[0], "SpecialToken");
  const nlohmann::json* sequence = field((*single)[1], "Sequence");
  const nlohmann::json* special_id = special ? field(*special, "id") : nullptr;
  const nlohmann::json* sequence_id = sequence ? field(*sequence, "id") : nullptr;
  return special_id && *special_id == std::string(Tokenizer::kEndOfText) && sequence_id &&
         *sequence_id == "A";
}

void check_hf_pipeline(const nlohmann::json& j, const std::string& path) {
  const nlohmann::json* normalizer = field(j, "normalizer");
  TIDE_CHECK(normalizer == nullptr || normalizer->is_null(),
             "{}: \"normalizer\" is {}; tide applies no normalizer (GPT-2 has none), so its ids "
             "would differ from HF's: set it to null or use a tokenizer without one",
             path, show(*normalizer));
  const nlohmann::json* pre = field(j, "pre_tokenizer");
  const nlohmann::json* steps = pre ? field(*pre, "pretokenizers") : nullptr;
  const bool gpt2 =
      pre && (is_byte_level(*pre, true) ||
              (type_of(pre) == "Sequence" && steps && steps->is_array() && steps->size() == 2 &&
               is_gpt2_split((*steps)[0]) && is_byte_level((*steps)[1], false)));
  TIDE_CHECK(gpt2,
             "{}: \"pre_tokenizer\" is {}; tide runs GPT-2's pre-tokenizer only: {{\"type\": "
             "\"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}}, or a Sequence of "
             "a Split with GPT-2's regex (behavior Isolated) and a ByteLevel with use_regex false",
             path, pre ? show(*pre) : "missing");
  const nlohmann::json* post_processor = field(j, "post_processor");
  const std::string post = type_of(post_processor);
  TIDE_CHECK(post.empty() || post == "ByteLevel" || is_eot_first_template(*post_processor),
             "{}: \"post_processor\" is {}; tide adds no tokens after encoding (a "
             "TemplateProcessing adds BOS/EOS ids): set it to null or ByteLevel (or a "
             "TemplateProcessing that only puts <|endoftext|> first, as `tide export` writes)",
             path, post);
  const std::string decoder = type_of(field(j, "decoder"));
  TIDE_CHECK(decoder.empty() || decoder == "ByteLevel",
             "{}: \"decoder\" is {}; a byte-level BPE decodes with ByteLevel (or null)", path,
             decoder);
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
  std::vector<std::pair<std::string, int>> vocab;  // byte-unicode string -> id, with the special
  std::vector<std::pair<std::string, std::string>> merges;
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
  const nlohmann::json j = parse_json(read_file(path, "tokenizer file"), path);
  const Tables t = field(j, "format") != nullptr ? tide_bpe_tables(j, path) : hf_tables(j, path);
  return from_tables(t.vocab, t.merges, std::string(kEndOfText), path);
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
             "{}: \"model\" is {}; tide reads byte-level BPE tokenizers only (\"type\": \"BPE\")",
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
  TIDE_CHECK(is_null_or(field(*model, "ignore_merges"), false),
             "{}: model.ignore_merges is true (a piece found whole in the vocabulary skips the "
             "merges), which tide does not implement; set it to false",
             path);
  check_hf_pipeline(j, path);

  std::vector<std::pair<std::string, int>> vocab = vocab_from_json(*vocab_json, path);
  const std::string eot(Tokenizer::kEndOfText);
  int eot_in_vocab = -1;
  for (const auto& [text, id] : vocab) {
    if (text == eot) eot_in_vocab = id;
  }
  const nlohmann::json* added = field(j, "added_tokens");
  TIDE_CHECK(added == nullptr || added->is_null() || added->is_array(),
             "{}: \"added_tokens\" is {}, not a list", path, added ? show(*added) : "");
  for (size_t i = 0; added && added->is_array() && i < added->size(); ++i) {
    const nlohmann::json& a = (*added)[i];
    const nlohmann::json* content = field(a, "content");
    const nlohmann::json* id = field(a, "id");
    TIDE_CHECK(content && content->is_string() && id && id->is_number_integer(),
               "{}: added token {} is {}; it needs a \"content\" string and an integer \"id\"",
               path, i + 1, show(a));
    // HF matches added tokens in the text before pre-tokenizing; tide never does (callers insert
    // <|endoftext|> between documents), so other added tokens would change the ids.
    TIDE_CHECK(*content == eot,
               "{}: added token \"{}\" (id {}): tide knows one special token, {}; remove the "
               "others (or train the tokenizer with special_tokens=[\"{}\"] only)",
               path, content->get<std::string>(), show(*id), eot, eot);
    const int64_t eot_id = id->get<int64_t>();
    TIDE_CHECK(eot_in_vocab < 0 || eot_id == eot_in_vocab,
               "{}: {} has id {} in \"added_tokens\" but {} in model.vocab; the file is corrupt",
               path, eot, eot_id, eot_in_vocab);
    if (eot_in_vocab < 0) {  // an added token outside the model's vocabulary
      TIDE_CHECK(eot_id >= 0 && eot_id < 65536, "{}: {} has id {}, not in [0, 65536)", path, eot,
                 eot_id);
      vocab.emplace_back(eot, static_cast<int>(eot_id));
      eot_in_vocab = static_cast<int>(eot_id);
    }
  }
  return {std::move(vocab), merges_from_json(*merges_json, path)};
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
  return {std::move(vocab), merges_from_json(*merges_json, path)};
}

}  // namespace
}  // namespace tide
