#pragma once
// Token shards: the file format of llm.c and nanoGPT, so shards made by their scripts load here
// and ours load there. Two token widths, as llm.c's dev/data/data_common.py writes them:
//
//   header: 256 x int32 little-endian
//     header[0] = magic, header[1] = version, which together give the token width:
//       20240520, 1: uint16 tokens (llm.c's "gpt-2"; vocabularies up to 65536 tokens)
//       20240801, 7: uint32 tokens (llm.c's "llama-3"; Llama 3's 128256, Qwen2's 151646, ...)
//     header[2] = number of tokens,
//     header[3] = flags: 0, or kShardHasLossMask (tide's extension; llm.c leaves it 0)
//   body:   number-of-tokens x uint16 or uint32 little-endian
//   then, with kShardHasLossMask: number-of-tokens x uint8, the loss mask: 1 where the token is
//     a target the loss counts, 0 where it is not (a fine-tuning prompt's tokens)
//
// `tide prepare` writes uint32 exactly when the tokenizer has more than 65536 tokens, so every
// shard of a corpus has one width; readers take either.
//
// A shard without the flag is exactly llm.c's, and every token counts; one with it is refused by
// llm.c's reader (the size differs) rather than trained on with the prompts in the loss.
//
// The reader checks everything it can before anyone trains on the file: magic, version, and
// that the size on disk is exactly header + tokens (a truncated copy is the common failure).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tide {

inline constexpr int32_t kShardMagic = 20240520;  // uint16 tokens
inline constexpr int32_t kShardVersion = 1;
inline constexpr int32_t kShardMagic32 = 20240801;  // uint32 tokens
inline constexpr int32_t kShardVersion32 = 7;
inline constexpr size_t kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);
inline constexpr int32_t kShardHasLossMask = 1;  // header[3] bit: a loss mask follows the tokens

// Writes tokens as one uint16 shard (replacing the file). Throws tide::Error if the file cannot
// be written.
void write_token_shard(const std::string& path, std::span<const uint16_t> tokens);
// The same from int32 ids (every id >= 0), in the width of the vocabulary: uint32 when
// vocab_size > 65536, uint16 otherwise (vocab_size 0: uint16 when every id is below 65536).
// An id >= vocab_size (when given) is an error. With a loss mask (one 0/1 byte per token) the
// shard carries it; an empty mask writes none.
void write_token_shard(const std::string& path, std::span<const int32_t> tokens,
                       std::span<const uint8_t> loss_mask = {}, int vocab_size = 0);

// A validated shard, memory-mapped read-only: opening one costs no reading, and the pages a
// loader touches are cached by the OS and shared between ranks on the same machine, so
// datasets larger than memory work.
class TokenShard {
 public:
  explicit TokenShard(std::string path);
  ~TokenShard();
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  size_t size() const { return size_; }
  // 2 (uint16 tokens) or 4 (uint32), from the header.
  int token_bytes() const { return wide_ ? 4 : 2; }
  uint32_t operator[](size_t i) const { return wide_ ? tokens32()[i] : tokens16()[i]; }
  // Tokens [begin, begin + n) as int32 ids into out (n entries).
  void copy_tokens(size_t begin, size_t n, int32_t* out) const;
  // Every token as an int32 id (a copy: for small shards, tools and tests).
  std::vector<int32_t> token_ids() const;
  // The loss mask (1: the token counts as a target), or empty for a shard without one.
  bool has_loss_mask() const { return loss_mask_ != nullptr; }
  std::span<const uint8_t> loss_mask() const {
    return {loss_mask_, loss_mask_ ? size_ : size_t{0}};
  }

  // The largest token id in the shard (0 for an empty shard); computed once, on first use.
  uint32_t max_token() const;
  // Throws a tide::Error naming the first token id >= vocab_size, its position and the file.
  void check_vocab(int vocab_size) const;

 private:
  void unmap();
  const uint16_t* tokens16() const { return static_cast<const uint16_t*>(tokens_); }
  const uint32_t* tokens32() const { return static_cast<const uint32_t*>(tokens_); }

  std::string path_;
  void* map_ = nullptr;  // the whole file, header included
  size_t map_bytes_ = 0;
  const void* tokens_ = nullptr;  // uint16 or uint32 (wide_)
  bool wide_ = false;
  const uint8_t* loss_mask_ = nullptr;  // after the tokens, or nullptr
  size_t size_ = 0;
  mutable int64_t max_token_ = -1;  // -1: not computed yet
};

}  // namespace tide
