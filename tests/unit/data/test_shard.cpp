#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "test_util.h"
#include "tide/core/error.h"
#include "tide/data/shard.h"

namespace tide {
namespace {

using test::expected_error;
using test::TempDir;

// A shard file written by hand, so the reader is tested against the format, not the writer.
void write_raw_shard(const std::string& path, int32_t magic, int32_t version, int32_t count,
                     const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
}

TEST(Shard, WriterProducesTheLlmcLayout) {
  TempDir dir;
  const std::vector<uint16_t> tokens = {1, 2, 65535, 0, 300};
  write_token_shard(dir / "a.bin", std::span<const uint16_t>(tokens));
  EXPECT_EQ(std::filesystem::file_size(dir / "a.bin"), 1024u + 2 * tokens.size());
  std::ifstream in(dir / "a.bin", std::ios::binary);
  std::vector<int32_t> header(256);
  in.read(reinterpret_cast<char*>(header.data()), 1024);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 5);
  unsigned char body[10];
  in.read(reinterpret_cast<char*>(body), 10);
  EXPECT_EQ(body[4], 0xFF);  // 65535, little-endian
  EXPECT_EQ(body[8], 300 & 0xFF);
  EXPECT_EQ(body[9], 300 >> 8);
}

TEST(Shard, ReadsBackWhatWasWritten) {
  TempDir dir;
  const std::vector<int32_t> tokens = {5, 0, 4095, 17, 65535};
  write_token_shard(dir / "a.bin", std::span<const int32_t>(tokens));
  const TokenShard shard(dir / "a.bin");
  ASSERT_EQ(shard.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(shard[i], tokens[i]);
  EXPECT_EQ(shard.max_token(), 65535);
}

// The loss mask (tide's extension): header[3] = 1, one byte per token after the tokens. A shard
// without it is llm.c's as before.
TEST(Shard, LossMaskIsAFlagAndOneBytePerTokenAfterTheTokens) {
  TempDir dir;
  const std::vector<int32_t> tokens = {5, 6, 7, 8};
  const std::vector<uint8_t> mask = {0, 0, 1, 1};
  write_token_shard(dir / "m.bin", std::span<const int32_t>(tokens), mask);
  EXPECT_EQ(std::filesystem::file_size(dir / "m.bin"), 1024u + 2 * 4 + 4);
  std::ifstream in(dir / "m.bin", std::ios::binary);
  std::vector<int32_t> header(256);
  in.read(reinterpret_cast<char*>(header.data()), 1024);
  EXPECT_EQ(header[1], 1);  // the version llm.c's reader knows; the flag tells tide
  EXPECT_EQ(header[3], kShardHasLossMask);
  const TokenShard shard(dir / "m.bin");
  ASSERT_EQ(shard.size(), 4u);
  EXPECT_EQ(shard[3], 8);
  ASSERT_TRUE(shard.has_loss_mask());
  EXPECT_EQ(std::vector<uint8_t>(shard.loss_mask().begin(), shard.loss_mask().end()), mask);
  const TokenShard moved(TokenShard(dir / "m.bin"));
  EXPECT_EQ(moved.loss_mask()[2], 1);
  // Without a mask: no flag, no bytes, no mask on reading (every token counts).
  write_token_shard(dir / "p.bin", std::span<const int32_t>(tokens));
  EXPECT_EQ(std::filesystem::file_size(dir / "p.bin"), 1024u + 2 * 4);
  EXPECT_FALSE(TokenShard(dir / "p.bin").has_loss_mask());
  EXPECT_TRUE(TokenShard(dir / "p.bin").loss_mask().empty());
  // A truncated mask, an unknown flag, and a mask that is not one 0/1 byte per token.
  std::filesystem::resize_file(dir / "m.bin", 1024 + 2 * 4 + 3);
  EXPECT_NE(expected_error([&] {
              TokenShard s(dir / "m.bin");
            }).find("header says 4 tokens and their loss mask = 1036 bytes, file has 1035"),
            std::string::npos);
  std::vector<int32_t> flags(256, 0);
  flags[0] = kShardMagic;
  flags[1] = 1;
  flags[3] = 6;
  test::write_file(dir / "f.bin", std::string(reinterpret_cast<const char*>(flags.data()), 1024));
  EXPECT_NE(expected_error([&] {
              TokenShard s(dir / "f.bin");
            }).find("token shard flags 6 are not supported"),
            std::string::npos);
  const std::vector<uint8_t> short_mask = {1, 1}, bad_mask = {0, 2, 1, 1};
  EXPECT_NE(expected_error([&] {
              write_token_shard(dir / "x.bin", std::span<const int32_t>(tokens), short_mask);
            }).find("a loss mask of 2 entries for 4 tokens"),
            std::string::npos);
  EXPECT_NE(expected_error([&] {
              write_token_shard(dir / "x.bin", std::span<const int32_t>(tokens), bad_mask);
            }).find("loss mask entry 2 at position 1 is not 0 or 1"),
            std::string::npos);
}

TEST(Shard, ReadsAHandWrittenShard) {
  TempDir dir;
  write_raw_shard(dir / "a.bin", 20240520, 1, 3, {7, 8, 9});
  const TokenShard shard(dir / "a.bin");
  EXPECT_EQ(shard.size(), 3u);
  EXPECT_EQ(shard[2], 9);
}

// llm.c's uint32 format (dev/data/data_common.py, "llama-3"): magic 20240801, version 7, the
// tokens as uint32; tide's loss-mask flag works the same after them.
void write_raw_shard32(const std::string& path, int32_t count, const std::vector<uint32_t>& tokens,
                       const std::vector<uint8_t>& mask = {}) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240801;
  header[1] = 7;
  header[2] = count;
  header[3] = mask.empty() ? 0 : 1;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
  out.write(reinterpret_cast<const char*>(mask.data()), mask.size());
}

TEST(Shard, ReadsAHandWrittenUint32Shard) {
  TempDir dir;
  write_raw_shard32(dir / "w.bin", 4, {7, 128255, 65536, 151645}, {0, 1, 1, 0});
  const TokenShard shard(dir / "w.bin");
  ASSERT_EQ(shard.size(), 4u);
  EXPECT_EQ(shard.token_bytes(), 4);
  EXPECT_EQ(shard[1], 128255u);
  EXPECT_EQ(shard[3], 151645u);
  EXPECT_EQ(shard.max_token(), 151645u);
  ASSERT_TRUE(shard.has_loss_mask());
  EXPECT_EQ(shard.loss_mask()[0], 0);
  EXPECT_EQ(shard.loss_mask()[2], 1);
  std::vector<int32_t> ids(3);
  shard.copy_tokens(1, 3, ids.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{128255, 65536, 151645}));
  EXPECT_NO_THROW(shard.check_vocab(151646));
  const std::string msg = expected_error([&] { shard.check_vocab(128256); });
  EXPECT_NE(msg.find("token id 151645 at position 3"), std::string::npos) << msg;
}

// The writer takes the vocabulary's width: uint32 above 65536 tokens (even when this shard's
// ids would fit uint16, so all shards of a corpus agree), uint16 otherwise; without a
// vocabulary, the ids decide.
TEST(Shard, WriterPicksUint32ForALargeVocabulary) {
  TempDir dir;
  const std::vector<int32_t> tokens = {5, 128000, 0, 70000};
  const std::vector<uint8_t> mask = {1, 0, 1, 1};
  write_token_shard(dir / "big.bin", std::span<const int32_t>(tokens), mask, 128256);
  EXPECT_EQ(std::filesystem::file_size(dir / "big.bin"), 1024u + 4 * 4 + 4);
  std::ifstream in(dir / "big.bin", std::ios::binary);
  std::vector<int32_t> header(256);
  in.read(reinterpret_cast<char*>(header.data()), 1024);
  EXPECT_EQ(header[0], 20240801);
  EXPECT_EQ(header[1], 7);
  EXPECT_EQ(header[2], 4);
  EXPECT_EQ(header[3], kShardHasLossMask);
  std::vector<uint32_t> body(4);
  in.read(reinterpret_cast<char*>(body.data()), 16);
  EXPECT_EQ(body, (std::vector<uint32_t>{5, 128000, 0, 70000}));
  const TokenShard shard(dir / "big.bin");
  EXPECT_EQ(shard[1], 128000u);
  EXPECT_EQ(shard.loss_mask()[1], 0);

  const std::vector<int32_t> small = {1, 2, 3};
  write_token_shard(dir / "wide.bin", std::span<const int32_t>(small), {}, 151646);
  EXPECT_EQ(TokenShard(dir / "wide.bin").token_bytes(), 4);
  write_token_shard(dir / "narrow.bin", std::span<const int32_t>(small), {}, 65536);
  EXPECT_EQ(TokenShard(dir / "narrow.bin").token_bytes(), 2);
  write_token_shard(dir / "auto.bin", std::span<const int32_t>(tokens));
  EXPECT_EQ(TokenShard(dir / "auto.bin").token_bytes(), 4);
  const std::string msg = expected_error(
      [&] { write_token_shard(dir / "x.bin", std::span<const int32_t>(tokens), {}, 100000); });
  EXPECT_NE(msg.find("token id 128000 at position 1 is outside the vocabulary [0, 100000)"),
            std::string::npos)
      << msg;
}

TEST(Shard, Uint32ShardTruncatedCountsFourBytesPerToken) {
  TempDir dir;
  write_raw_shard32(dir / "t.bin", 5, {1, 2, 3});
  const std::string msg = expected_error([&] { TokenShard s(dir / "t.bin"); });
  EXPECT_NE(msg.find("header says 5 tokens = 1044 bytes, file has 1036 bytes"), std::string::npos)
      << msg;
}

TEST(Shard, MovingKeepsTheMapping) {
  TempDir dir;
  const std::vector<uint16_t> tokens = {10, 20, 30};
  write_token_shard(dir / "a.bin", std::span<const uint16_t>(tokens));
  std::vector<TokenShard> shards;  // no reserve: growing moves the shards
  for (int i = 0; i < 5; ++i) shards.emplace_back(dir / "a.bin");
  TokenShard moved = std::move(shards[0]);
  shards[0] = std::move(shards[1]);
  for (const TokenShard* s : {&moved, &shards[0], &shards[4]}) {
    ASSERT_EQ(s->size(), 3u);
    EXPECT_EQ((*s)[2], 30);
  }
}

TEST(Shard, EmptyShardIsValid) {
  TempDir dir;
  write_token_shard(dir / "e.bin", std::span<const uint16_t>());
  const TokenShard shard(dir / "e.bin");
  EXPECT_EQ(shard.size(), 0u);
  EXPECT_EQ(shard.max_token(), 0);
}

TEST(Shard, EmptyShardFromAnEmptyVectorIsOnlyAHeader) {
  // An empty std::vector's data() is null: the writer must not hand it to fwrite (UBSan:
  // "null pointer passed as argument 1, which is declared to never be null").
  TempDir dir;
  const std::vector<int32_t> none;
  write_token_shard(dir / "e.bin", std::span<const int32_t>(none));
  EXPECT_EQ(std::filesystem::file_size(dir / "e.bin"), 1024u);
  const TokenShard shard(dir / "e.bin");
  EXPECT_EQ(shard.size(), 0u);
  EXPECT_EQ(shard.token_bytes(), 2);
}

TEST(Shard, WrongMagicNamesFileMagicAndFix) {
  TempDir dir;
  write_raw_shard(dir / "train.bin", 12345, 1, 2, {1, 2});
  const std::string msg = expected_error([&] { TokenShard s(dir / "train.bin"); });
  EXPECT_NE(msg.find(dir / "train.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a token shard (magic 12345, expected 20240520 for uint16 tokens or "
                     "20240801 for uint32)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("tide prepare"), std::string::npos) << msg;
}

TEST(Shard, WrongVersion) {
  TempDir dir;
  write_raw_shard(dir / "v.bin", 20240520, 7, 2, {1, 2});
  const std::string msg = expected_error([&] { TokenShard s(dir / "v.bin"); });
  EXPECT_NE(msg.find("version 7 is not supported"), std::string::npos) << msg;
}

TEST(Shard, TruncatedBody) {
  TempDir dir;
  write_raw_shard(dir / "t.bin", 20240520, 1, 100, {1, 2, 3});
  const std::string msg = expected_error([&] { TokenShard s(dir / "t.bin"); });
  EXPECT_NE(msg.find(dir / "t.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated token shard (header says 100 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1030 bytes"), std::string::npos) << msg;  // 1024 + 3*2 on disk
}

TEST(Shard, TruncatedHeader) {
  TempDir dir;
  test::write_file(dir / "h.bin", std::string(100, '\0'));
  const std::string msg = expected_error([&] { TokenShard s(dir / "h.bin"); });
  EXPECT_NE(msg.find("only 100 bytes, shorter than the 1024-byte header"), std::string::npos)
      << msg;
}

TEST(Shard, LongerThanHeaderSays) {
  TempDir dir;
  write_raw_shard(dir / "l.bin", 20240520, 1, 2, {1, 2, 3, 4});
  const std::string msg = expected_error([&] { TokenShard s(dir / "l.bin"); });
  EXPECT_NE(msg.find("longer than its header says"), std::string::npos) << msg;
}

TEST(Shard, MissingFile) {
  TempDir dir;
  const std::string msg = expected_error([&] { TokenShard s(dir / "nope.bin"); });
  EXPECT_NE(msg.find(dir / "nope.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no such token shard"), std::string::npos) << msg;
}

TEST(Shard, DirectoryIsNotAShard) {
  TempDir dir;
  const std::string msg = expected_error([&] { TokenShard s(dir.str()); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
}

TEST(Shard, CheckVocabNamesTokenPositionFileAndVocab) {
  TempDir dir;
  const std::vector<uint16_t> tokens = {1, 2, 3, 5000, 4, 6000};
  write_token_shard(dir / "train.bin", std::span<const uint16_t>(tokens));
  const TokenShard shard(dir / "train.bin");
  EXPECT_NO_THROW(shard.check_vocab(6001));
  const std::string msg = expected_error([&] { shard.check_vocab(4096); });
  EXPECT_NE(msg.find("token id 5000 at position 3 of " + (dir / "train.bin") +
                     " is >= model.vocab_size 4096"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("at least 6001"), std::string::npos) << msg;
}

TEST(Shard, WriterRejectsNegativeIds) {
  TempDir dir;
  const std::vector<int32_t> tokens = {1, -3};
  const std::string msg =
      expected_error([&] { write_token_shard(dir / "x.bin", std::span<const int32_t>(tokens)); });
  EXPECT_NE(msg.find("token id -3 at position 1 is outside the vocabulary"), std::string::npos)
      << msg;
}

TEST(Shard, WriterReportsAMissingDirectory) {
  TempDir dir;
  const std::vector<uint16_t> tokens = {1};
  const std::string msg = expected_error(
      [&] { write_token_shard(dir / "no/such/dir/x.bin", std::span<const uint16_t>(tokens)); });
  EXPECT_NE(msg.find("cannot open for writing"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tide
