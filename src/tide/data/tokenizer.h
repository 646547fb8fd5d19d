#pragma once
// Byte-level BPE, the GPT-2 tokenizer scheme (Radford et al. 2019; Sennrich et al. 2016).
//
// Text is bytes. Every byte is a token of its own, so any byte string can be encoded and
// decode(encode(s)) == s always. On top of the 256 byte tokens, BPE learns merges: "token a
// followed by token b becomes token ab", applied in the order they were learned. Encoding first
// splits text into pieces with GPT-2's pre-tokenizer (pretokenize.h), then merges inside each
// piece. One special token, <|endoftext|>, separates documents; it is never produced by
// encode() (the text "<|endoftext|>" encodes as ordinary bytes) — callers insert eot_id().
//
// Files:
//  - tokenizer.json in HF `tokenizers`' format (what `tide prepare` writes, and what HF's
//    GPT-2 and `tokenizers.Tokenizer.save()` write for a byte-level BPE): load() and save().
//    Token strings there are bytes mapped to printable unicode characters (bytes_to_unicode()),
//    so that every token is a printable, JSON-safe string. load() also reads tide's older
//    "tide-bpe" tokenizer.json (same tables, another layout).
//  - GPT-2's own encoder.json (token string -> id) + vocab.bpe (merges, one "a b" per line).

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tide/data/pretokenize.h"

namespace tide {

// GPT-2's byte -> unicode code point table: printable bytes map to themselves, the rest to
// code points 256 and up, in byte order.
const std::array<uint32_t, 256>& bytes_to_unicode();
// A byte string in that unicode form (UTF-8 encoded), and back. from_byte_unicode throws on a
// character outside the table.
std::string to_byte_unicode(std::string_view bytes);
std::string from_byte_unicode(std::string_view text);

// Pre-token pieces and how often each occurs: the input BPE training works on.
using WordCounts = std::unordered_map<std::string, int64_t>;
void count_words(const Pretokenizer& pretok, std::string_view text, WordCounts& counts);

class Tokenizer {
 public:
  static constexpr std::string_view kEndOfText = "<|endoftext|>";

  // Learns merges from word counts until the vocabulary (256 bytes + merged tokens +
  // <|endoftext|>) has vocab_size tokens, or until no adjacent pair is left to merge: a text
  // too small for vocab_size yields a smaller vocabulary (check vocab_size()). Each step merges
  // the most frequent pair (ties: the pair with the smaller ids), so training is deterministic.
  // progress(done, total) is called every few hundred merges. The words must come from
  // count_words() with Pretokenizer::gpt2(), the pre-tokenizer the trained tokenizer uses.
  static Tokenizer train(const WordCounts& words, int vocab_size,
                         const std::function<void(int, int)>& progress = {});
  static Tokenizer train(std::string_view text, int vocab_size);
  // GPT-2's files (https://openaipublic.blob.core.windows.net/gpt-2/models/124M/encoder.json,
  // vocab.bpe).
  static Tokenizer load_gpt2(const std::string& encoder_json_path,
                             const std::string& vocab_bpe_path);
  // tokenizer.json: HF `tokenizers`' format for a byte-level BPE with GPT-2's pre-tokenizer, or
  // tide's older "tide-bpe" format. Settings tide cannot reproduce exactly (a normalizer,
  // another regex, added tokens other than <|endoftext|>, ...) are refused with an error.
  static Tokenizer load(const std::string& path);
  // Writes HF's format (see docs/data.md), loadable by `tokenizers.Tokenizer.from_file`.
  void save(const std::string& path) const;
  // The text save() writes.
  std::string to_hf_json() const;

  std::vector<int32_t> encode(std::string_view text) const;
  // Appends to out (for encoding many documents without reallocating).
  void encode_append(std::string_view text, std::vector<int32_t>& out) const;
  std::string decode(std::span<const int32_t> ids) const;
  std::string decode(const std::vector<int32_t>& ids) const {
    return decode(std::span<const int32_t>(ids));
  }

  int vocab_size() const { return static_cast<int>(tokens_.size()); }
  int eot_id() const { return eot_id_; }
  int num_merges() const { return static_cast<int>(merges_.size()); }
  const Pretokenizer& pretokenizer() const { return *pretok_; }
  // The bytes of token id.
  const std::string& token_bytes(int id) const;

 private:
  struct Merge {
    int rank;    // position in the merge list: lower merges first
    int result;  // the merged token's id
  };
  static uint64_t pair_key(int a, int b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // Builds a tokenizer from GPT-2-style tables (token strings in byte-unicode form).
  static Tokenizer from_tables(const std::vector<std::pair<std::string, int>>& vocab,
                               const std::vector<std::pair<std::string, std::string>>& merges,
                               const std::string& eot_string, const std::string& source);
  void add_merge(int a, int b, int result);
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;               // id -> bytes
  std::array<int32_t, 256> byte_id_{};            // byte -> id of its single-byte token
  std::vector<std::pair<int, int>> merges_;       // in rank order
  std::unordered_map<uint64_t, Merge> merge_of_;  // (a, b) -> merge
  int eot_id_ = -1;
  // Splits text before BPE. Every tokenizer tide reads or trains uses GPT-2's pattern.
  const Pretokenizer* pretok_ = &Pretokenizer::gpt2();
};

}  // namespace tide
