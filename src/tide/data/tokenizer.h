#pragma once
// Byte-level BPE, the GPT-2 tokenizer scheme (Radford et al. 2019; Sennrich et al. 2016), and the
// byte-level BPE tokenizer.json files of Llama 3 and Qwen2.
//
// Text is bytes. Every byte is a token of its own, so any byte string can be encoded and
// decode(encode(s)) == s always (after the normalizer, for a file that has one). On top of the
// 256 byte tokens, BPE learns merges: "token a followed by token b becomes token ab", applied in
// the order they were learned. Encoding first splits text into pieces with a pre-tokenizer
// regex (pretokenize.h: GPT-2's, or the file's Split pattern), then merges inside each piece.
//
// A tokenizer.json from HF `tokenizers` may add what HF does around that, and tide does the same:
//  - added tokens (<|begin_of_text|>, <|im_start|>, ...) matched in the text before anything
//    else (added_tokens.h); special ones only with SpecialTokens::kMatch;
//  - an NFC normalizer (Qwen2; unicode_normalize.h);
//  - model.ignore_merges (Llama 3): a piece that is a whole vocabulary token is that token;
//  - a TemplateProcessing post-processor that puts tokens around a text (Llama 3's BOS):
//    template_prefix()/template_suffix().
// One token ends documents: <|endoftext|> (GPT-2, Qwen2, tide's own) or <|end_of_text|>
// (Llama 3): eot_id(). encode() never produces it from text unless asked (kMatch).
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
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tide/data/added_tokens.h"
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

// Special added tokens (<|endoftext|>, <|im_start|>, ...) written in a text: kAsText encodes them
// as ordinary text (HF with encode_special_tokens = True; what tide prepare does with documents),
// kMatch turns them into their ids (HF's default). Non-special added tokens always match.
enum class SpecialTokens { kAsText, kMatch };

class Tokenizer {
 public:
  static constexpr std::string_view kEndOfText = "<|endoftext|>";
  static constexpr std::string_view kLlama3EndOfText = "<|end_of_text|>";

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
  // tokenizer.json: HF `tokenizers`' format for a byte-level BPE (GPT-2's, Llama 3's and
  // Qwen2's pipelines; docs/data.md lists what is accepted), or tide's older "tide-bpe" format.
  // Settings tide cannot reproduce exactly are refused with an error naming the field.
  static Tokenizer load(const std::string& path);
  // Writes HF's format (see docs/data.md), loadable by `tokenizers.Tokenizer.from_file`: tide's
  // GPT-2-style file, or, for a file loaded with more than that (a normalizer, another regex,
  // other added tokens, ...), that file's text as it was.
  void save(const std::string& path) const;
  // The text save() writes.
  std::string to_hf_json() const;

  std::vector<int32_t> encode(std::string_view text,
                              SpecialTokens special = SpecialTokens::kAsText) const;
  // Appends to out (for encoding many documents without reallocating).
  void encode_append(std::string_view text, std::vector<int32_t>& out,
                     SpecialTokens special = SpecialTokens::kAsText) const;
  // The ids HF's post-processor puts before and after an encoded text (tokenizer(text) in HF:
  // Llama 3's <|begin_of_text|> first); empty without a TemplateProcessing.
  const std::vector<int32_t>& template_prefix() const { return template_prefix_; }
  const std::vector<int32_t>& template_suffix() const { return template_suffix_; }
  // What `tide prepare` puts around each document: the template's tokens, with eot_id() first
  // when there is no template and last when the template has no eot_id() (so end-of-text always
  // separates documents): GPT-2 and Qwen2 [eot] doc, Llama 3 [bos] doc [eot].
  std::vector<int32_t> document_prefix() const;
  std::vector<int32_t> document_suffix() const;
  std::string decode(std::span<const int32_t> ids) const;
  std::string decode(const std::vector<int32_t>& ids) const {
    return decode(std::span<const int32_t>(ids));
  }

  int vocab_size() const { return static_cast<int>(tokens_.size()); }
  int eot_id() const { return eot_id_; }
  int num_merges() const { return static_cast<int>(merges_.size()); }
  const Pretokenizer& pretokenizer() const { return *pretok_; }
  // Whether the file's pipeline is GPT-2's (what tide's own tokenizer.json holds): no
  // normalizer, GPT-2's regex, no added token but <|endoftext|>, no template but tide export's.
  bool is_gpt2_pipeline() const { return hf_json_.empty(); }
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
  // Builds a tokenizer from GPT-2-style tables (token strings in byte-unicode form) and the added
  // tokens (plain strings; <|endoftext|> found in vocab counts as one when none is added).
  static Tokenizer from_tables(const std::vector<std::pair<std::string, int>>& vocab,
                               const std::vector<std::pair<std::string, std::string>>& merges,
                               std::vector<AddedToken> added, const std::string& source);
  // encode_append() of text with no added token in it.
  void encode_text(std::string_view text, std::vector<int32_t>& out, SpecialTokens special) const;
  void add_merge(int a, int b, int result);
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;               // id -> bytes
  std::array<int32_t, 256> byte_id_{};            // byte -> id of its single-byte token
  std::vector<std::pair<int, int>> merges_;       // in rank order
  std::unordered_map<uint64_t, Merge> merge_of_;  // (a, b) -> merge
  int eot_id_ = -1;
  // Splits text before BPE: GPT-2's pattern (trained tokenizers, GPT-2's files) or the file's.
  std::shared_ptr<const Pretokenizer> pretok_{std::shared_ptr<void>(), &Pretokenizer::gpt2()};
  // From an HF file (all empty/false for GPT-2's pipeline):
  bool nfc_ = false;                                // normalizer NFC
  bool ignore_merges_ = false;                      // model.ignore_merges
  std::unordered_map<std::string, int32_t> whole_;  // token bytes -> id, for ignore_merges
  AddedTokens added_raw_, added_normalized_;        // "normalized": false / true
  std::vector<int32_t> template_prefix_, template_suffix_;
  std::string hf_json_;  // the file's text, for save(), when the pipeline is not GPT-2's
};

}  // namespace tide
