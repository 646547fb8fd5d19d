// `tide prepare --format nanogpt` (data/nanogpt_import.h): nanoGPT's headerless uint16 .bin
// files become tide shards holding the same ids, with a meta.json the trainer reads.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_util.h"
#include "tide/core/error.h"
#include "tide/data/prepare.h"
#include "tide/data/shard.h"

namespace tide {
namespace {

using test::TempDir;
using test::write_file;

// What nanoGPT's prepare.py writes: np.array(ids, dtype=np.uint16).tofile(path).
std::vector<uint16_t> write_nanogpt_bin(const std::string& path, size_t n, int vocab, int salt) {
  std::vector<uint16_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<uint16_t>((i * 7 + salt) % vocab);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(2 * n));
  return ids;
}

PrepareOptions nanogpt_options(const TempDir& dir) {
  PrepareOptions o;
  o.format = "nanogpt";
  o.inputs = {dir / "shakespeare"};
  o.out_dir = dir / "out";
  o.vocab_size = 0;
  o.log = [](const std::string&) {};
  return o;
}

std::vector<uint16_t> ids_of(const std::string& shard) {
  const std::vector<int32_t> ids = TokenShard(shard).token_ids();
  return {ids.begin(), ids.end()};
}

// An earlier `tide prepare` into the same directory leaves val.bin and tokenizer.json; an
// import without val.bin or a tokenizer removes them rather than let the trainer read them.
TEST(NanoGptImport, LeavesNoStaleValOrTokenizer) {
  TempDir dir;
  std::filesystem::create_directories(dir / "shakespeare");
  write_nanogpt_bin(dir / "shakespeare/train.bin", 5000, 65, 1);
  std::filesystem::create_directories(dir / "out");
  write_file(dir / "out/val.bin", "an earlier prepare's val.bin");
  write_file(dir / "out/tokenizer.json", "{}");
  const PrepareResult r = prepare_corpus(nanogpt_options(dir));
  EXPECT_TRUE(std::filesystem::exists(r.train_path));
  EXPECT_FALSE(std::filesystem::exists(dir / "out/val.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir / "out/tokenizer.json"));
  EXPECT_EQ(read_prepared_corpus(dir / "out").val_tokens, 0);
}

TEST(NanoGptImport, SameIdsInTideShards) {
  TempDir dir;
  std::filesystem::create_directories(dir / "shakespeare");
  const auto train = write_nanogpt_bin(dir / "shakespeare/train.bin", 5000, 65, 1);
  const auto val = write_nanogpt_bin(dir / "shakespeare/val.bin", 700, 60, 3);
  const PrepareResult r = prepare_corpus(nanogpt_options(dir));
  EXPECT_EQ(ids_of(r.train_path), train);
  EXPECT_EQ(ids_of(r.val_path), val);
  EXPECT_EQ(r.vocab_size, 65);  // the largest id + 1
  const PrepareResult back = read_prepared_corpus(dir / "out");
  EXPECT_EQ(back.vocab_size, 65);
  EXPECT_EQ(back.train_tokens, 5000);
  EXPECT_EQ(back.val_tokens, 700);
  EXPECT_GT(back.val_unigram_entropy, 0);

  PrepareOptions o = nanogpt_options(dir);
  o.vocab_size = 50257;  // GPT-2's, as nanoGPT's openwebtext
  EXPECT_EQ(prepare_corpus(o).vocab_size, 50257);
  o.vocab_size = 10;
  EXPECT_THROW(prepare_corpus(o), Error);  // ids above it
}

TEST(NanoGptImport, RejectsWhatIsNotNanoGptData) {
  TempDir dir;
  std::filesystem::create_directories(dir / "shakespeare");
  write_file(dir / "shakespeare/train.bin", std::string(3, 'x'));  // odd size
  EXPECT_THROW(prepare_corpus(nanogpt_options(dir)), Error);
  // A tide/llm.c shard already has its header.
  const std::vector<uint16_t> ids(100, 1);
  write_token_shard(dir / "shakespeare/train.bin", std::span<const uint16_t>(ids));
  EXPECT_THROW(prepare_corpus(nanogpt_options(dir)), Error);
  std::filesystem::remove(dir / "shakespeare/train.bin");
  EXPECT_THROW(prepare_corpus(nanogpt_options(dir)), Error);  // no train.bin
}

}  // namespace
}  // namespace tide
