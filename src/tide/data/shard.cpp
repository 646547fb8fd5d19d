#include "tide/data/shard.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tide/core/error.h"

namespace tide {

// The format is little-endian; we read and write it with plain memcpy, which is only right on a
// little-endian host (every machine tide targets).
static_assert(std::endian::native == std::endian::little,
              "token shards assume a little-endian host");

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

constexpr const char* kHowToMake = "create shards with `tide prepare`";

}  // namespace

namespace {

// tokens: n ids of `token_bytes` bytes each (2: uint16, 4: uint32).
void write_shard(const std::string& path, const void* tokens, size_t n, int token_bytes,
                 std::span<const uint8_t> loss_mask) {
  TIDE_CHECK(n <= static_cast<size_t>(INT32_MAX),
             "{}: {} tokens do not fit one shard (the header counts them in an int32); split the "
             "data into several shards",
             path, n);
  const bool wide = token_bytes == 4;
  std::array<int32_t, kShardHeaderInts> header{};
  header[0] = wide ? kShardMagic32 : kShardMagic;
  header[1] = wide ? kShardVersion32 : kShardVersion;
  header[2] = static_cast<int32_t>(n);
  header[3] = loss_mask.empty() ? 0 : kShardHasLossMask;
  File f(std::fopen(path.c_str(), "wb"));
  TIDE_CHECK(f != nullptr,
             "{}: cannot open for writing ({}); check that the directory exists and is writable",
             path, std::strerror(errno));
  bool ok = std::fwrite(header.data(), sizeof(int32_t), header.size(), f.get()) == header.size();
  // An empty shard is only its header (and fwrite of an empty span may get a null pointer).
  if (n > 0) ok = ok && std::fwrite(tokens, token_bytes, n, f.get()) == n;
  if (!loss_mask.empty())
    ok = ok && std::fwrite(loss_mask.data(), 1, loss_mask.size(), f.get()) == loss_mask.size();
  ok = (std::fclose(f.release()) == 0) && ok;
  TIDE_CHECK(ok, "{}: write failed ({}); check free disk space", path, std::strerror(errno));
}

}  // namespace

void write_token_shard(const std::string& path, std::span<const uint16_t> tokens) {
  write_shard(path, tokens.data(), tokens.size(), 2, {});
}

void write_token_shard(const std::string& path, std::span<const int32_t> tokens,
                       std::span<const uint8_t> loss_mask, int vocab_size) {
  TIDE_CHECK(loss_mask.empty() || loss_mask.size() == tokens.size(),
             "{}: a loss mask of {} entries for {} tokens; it needs one per token", path,
             loss_mask.size(), tokens.size());
  for (size_t i = 0; i < loss_mask.size(); ++i) {
    TIDE_CHECK(loss_mask[i] <= 1, "{}: loss mask entry {} at position {} is not 0 or 1", path,
               loss_mask[i], i);
  }
  int32_t max_id = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    TIDE_CHECK(tokens[i] >= 0 && (vocab_size <= 0 || tokens[i] < vocab_size),
               "{}: token id {} at position {} is outside the vocabulary [0, {})", path, tokens[i],
               i, vocab_size > 0 ? vocab_size : INT32_MAX);
    max_id = std::max(max_id, tokens[i]);
  }
  const bool wide = vocab_size > 0 ? vocab_size > 65536 : max_id >= 65536;
  if (wide) {  // llm.c's uint32 format; int32 ids >= 0 are their own uint32 bits
    write_shard(path, tokens.data(), tokens.size(), 4, loss_mask);
    return;
  }
  std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
  write_shard(path, narrow.data(), narrow.size(), 2, loss_mask);
}

TokenShard::TokenShard(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  TIDE_CHECK(std::filesystem::exists(path_, ec), "{}: no such token shard; {} (or fix the path)",
             path_, kHowToMake);
  TIDE_CHECK(!std::filesystem::is_directory(path_, ec),
             "{}: is a directory, not a token shard; pass a .bin file or a glob like {}/*.bin",
             path_, path_);
  const int fd = ::open(path_.c_str(), O_RDONLY);
  TIDE_CHECK(fd >= 0, "{}: cannot open ({}); check the file's permissions", path_,
             std::strerror(errno));
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const uintmax_t file_bytes = stat_ok ? static_cast<uintmax_t>(st.st_size) : 0;
  if (stat_ok && file_bytes >= kShardHeaderBytes) {
    map_ = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map_ == MAP_FAILED)
      map_ = nullptr;
    else
      map_bytes_ = file_bytes;
  }
  const int map_errno = errno;
  ::close(fd);  // the mapping stays valid without the descriptor
  TIDE_CHECK(stat_ok, "{}: cannot read its size ({})", path_, std::strerror(map_errno));
  TIDE_CHECK(file_bytes >= kShardHeaderBytes,
             "{}: not a token shard (only {} bytes, shorter than the {}-byte header); {}", path_,
             file_bytes, kShardHeaderBytes, kHowToMake);
  TIDE_CHECK(map_ != nullptr, "{}: cannot map the file into memory ({})", path_,
             std::strerror(map_errno));

  std::array<int32_t, kShardHeaderInts> header{};
  std::memcpy(header.data(), map_, kShardHeaderBytes);
  // From here on a failed check must not leak the mapping: the destructor does not run for a
  // constructor that throws, so check first and unmap on failure.
  try {
    TIDE_CHECK(header[0] == kShardMagic || header[0] == kShardMagic32,
               "{}: not a token shard (magic {}, expected {} for uint16 tokens or {} for uint32); "
               "{}",
               path_, header[0], kShardMagic, kShardMagic32, kHowToMake);
    wide_ = header[0] == kShardMagic32;
    const int32_t version = wide_ ? kShardVersion32 : kShardVersion;
    TIDE_CHECK(header[1] == version,
               "{}: token shard version {} is not supported (expected {} with magic {}); "
               "re-create it with `tide prepare`",
               path_, header[1], version, header[0]);
    TIDE_CHECK(header[2] >= 0,
               "{}: corrupt token shard header (token count {}); re-create it with `tide prepare`",
               path_, header[2]);
    TIDE_CHECK((header[3] & ~kShardHasLossMask) == 0,
               "{}: token shard flags {} are not supported (tide knows {}: a loss mask); "
               "re-create it with `tide prepare`",
               path_, header[3], kShardHasLossMask);
    const bool masked = (header[3] & kShardHasLossMask) != 0;
    const uintmax_t count = static_cast<uintmax_t>(header[2]);
    const uintmax_t expected =
        kShardHeaderBytes + count * (token_bytes() + (masked ? sizeof(uint8_t) : 0));
    TIDE_CHECK(file_bytes >= expected,
               "{}: truncated token shard (header says {} tokens{} = {} bytes, file has {} bytes); "
               "the copy is incomplete: copy it again or re-create it with `tide prepare`",
               path_, count, masked ? " and their loss mask" : "", expected, file_bytes);
    TIDE_CHECK(file_bytes == expected,
               "{}: token shard is longer than its header says ({} bytes for {} tokens, expected "
               "{} bytes); the file is corrupt: re-create it with `tide prepare`",
               path_, file_bytes, count, expected);
    size_ = count;
  } catch (...) {
    unmap();
    throw;
  }
  // The body starts 1024 bytes into a page-aligned mapping, so uint16 and uint32 reads are
  // aligned.
  tokens_ = static_cast<const char*>(map_) + kShardHeaderBytes;
  if ((header[3] & kShardHasLossMask) != 0)
    loss_mask_ = static_cast<const uint8_t*>(tokens_) + size_ * token_bytes();
}

TokenShard::~TokenShard() {
  unmap();
}

void TokenShard::unmap() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  tokens_ = nullptr;
  wide_ = false;
  loss_mask_ = nullptr;
  size_ = 0;
}

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)),
      wide_(std::exchange(other.wide_, false)),
      loss_mask_(std::exchange(other.loss_mask_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      max_token_(other.max_token_) {}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    wide_ = std::exchange(other.wide_, false);
    loss_mask_ = std::exchange(other.loss_mask_, nullptr);
    size_ = std::exchange(other.size_, 0);
    max_token_ = other.max_token_;
  }
  return *this;
}

void TokenShard::copy_tokens(size_t begin, size_t n, int32_t* out) const {
  TIDE_ASSERT(begin <= size_ && n <= size_ - begin);
  // uint32 ids above INT32_MAX cannot be a vocabulary's (check_vocab refuses them first).
  if (wide_)
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(tokens32()[begin + i]);
  else
    for (size_t i = 0; i < n; ++i) out[i] = tokens16()[begin + i];
}

std::vector<int32_t> TokenShard::token_ids() const {
  std::vector<int32_t> ids(size_);
  copy_tokens(0, size_, ids.data());
  return ids;
}

uint32_t TokenShard::max_token() const {
  if (max_token_ < 0) {
    if (size_ == 0)
      max_token_ = 0;
    else if (wide_)
      max_token_ = *std::max_element(tokens32(), tokens32() + size_);
    else
      max_token_ = *std::max_element(tokens16(), tokens16() + size_);
  }
  return static_cast<uint32_t>(max_token_);
}

void TokenShard::check_vocab(int vocab_size) const {
  if (int64_t{max_token()} < vocab_size) return;  // the common case: one pass, no search
  for (size_t i = 0; i < size_; ++i) {
    TIDE_CHECK(
        int64_t{(*this)[i]} < vocab_size,
        "token id {} at position {} of {} is >= model.vocab_size {}; the shard was made with "
        "a larger tokenizer: set model.vocab_size to at least {} or re-create the shard with "
        "a matching tokenizer",
        (*this)[i], i, path_, vocab_size, int64_t{max_token()} + 1);
  }
}

}  // namespace tide
