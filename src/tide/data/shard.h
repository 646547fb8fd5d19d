#pragma once
// Token shards: the file format of llm.c and nanoGPT, so shards made by their scripts load here
// and ours load there.
//
//   header: 256 x int32 little-endian
//     header[0] = 20240520 (magic), header[1] = 1 (version), header[2] = number of tokens,
//     header[3] = flags: 0, or kShardHasLossMask (tide's extension; llm.c leaves it 0)
//   body:   number-of-tokens x uint16 little-endian (so vocabularies up to 65536 tokens)
//   then, with kShardHasLossMask: number-of-tokens x uint8, the loss mask: 1 where the token is
//     a target the loss counts, 0 where it is not (a fine-tuning prompt's tokens)
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

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);
inline constexpr int32_t kShardHasLossMask = 1;  // header[3] bit: a loss mask follows the tokens

// Writes tokens as one shard (replacing the file). Throws tide::Error if the file cannot be
// written.
void write_token_shard(const std::string& path, std::span<const uint16_t> tokens);
// The same from int32 ids; every id must be in [0, 65536). With a loss mask (one 0/1 byte per
// token) the shard carries it; an empty mask writes none.
void write_token_shard(const std::string& path, std::span<const int32_t> tokens,
                       std::span<const uint8_t> loss_mask = {});

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
  std::span<const uint16_t> tokens() const { return {tokens_, size_}; }
  uint16_t operator[](size_t i) const { return tokens_[i]; }
  // The loss mask (1: the token counts as a target), or empty for a shard without one.
  bool has_loss_mask() const { return loss_mask_ != nullptr; }
  std::span<const uint8_t> loss_mask() const {
    return {loss_mask_, loss_mask_ ? size_ : size_t{0}};
  }

  // The largest token id in the shard (0 for an empty shard); computed once, on first use.
  uint16_t max_token() const;
  // Throws a tide::Error naming the first token id >= vocab_size, its position and the file.
  void check_vocab(int vocab_size) const;

 private:
  void unmap();

  std::string path_;
  void* map_ = nullptr;  // the whole file, header included
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  const uint8_t* loss_mask_ = nullptr;  // after the tokens, or nullptr
  size_t size_ = 0;
  mutable int max_token_ = -1;  // -1: not computed yet
};

}  // namespace tide
