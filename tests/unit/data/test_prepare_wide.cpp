// `tide prepare --tokenizer` with a vocabulary above 65536 tokens (Llama 3's 128256, Qwen2's
// 151646): the shards hold uint32 ids (llm.c's Llama 3 format) and the loader gives them back.
//
// The oracle: the Llama-3-style fixture (tests/fixtures/tokenizer/llama3_style.json, built with
// HF tokenizers by tools/gen_hf_pipelines_fixture.py and checked against it elsewhere) with its
// special tokens moved to Llama 3's ids (<|begin_of_text|> = 128000) and the ids between filled
// with tokens no text encodes to. Its encoding must be the fixture's with the special ids moved.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tide/data/loader.h"
#include "tide/data/prepare.h"
#include "tide/data/shard.h"
#include "tide/data/tokenizer.h"

namespace tide {
namespace {

using test::TempDir;
using test::write_file;

constexpr int kBegin = 128000;  // Llama 3's <|begin_of_text|>

// llama3_style.json with its added tokens (ids first_added..) moved to kBegin.. and the ids
// between filled with model tokens "§<n>" (no merge makes them, so no text encodes to them).
// Returns the id shift.
int write_wide_tokenizer(const std::string& path) {
  std::ifstream in(std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/tokenizer/llama3_style.json");
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(in);
  const int first_added = j["added_tokens"][0]["id"].get<int>();
  const int shift = kBegin - first_added;
  for (auto& a : j["added_tokens"]) a["id"] = a["id"].get<int>() + shift;
  for (auto& p : j["post_processor"]["processors"]) {
    if (p["type"] != "TemplateProcessing") continue;
    for (auto& [name, special] : p["special_tokens"].items())
      for (auto& id : special["ids"]) id = id.get<int>() + shift;
  }
  // Appended to ordered_json's vector: its operator[] searches linearly (quadratic here).
  auto& vocab = j["model"]["vocab"].get_ref<nlohmann::ordered_json::object_t&>();
  for (int id = first_added; id < kBegin; ++id)
    vocab.emplace_back("\xc2\xa7" + std::to_string(id), id);
  write_file(path, j.dump());
  return shift;
}

TEST(PrepareWide, LargeVocabularyWritesUint32ShardsTheLoaderReads) {
  TempDir dir;
  std::filesystem::create_directories(dir / "in");
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += fmt::format(
        "\xe2\x80\x9c"
        "Doc {}\xe2\x80\x9d: 12345 caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac  "
        "\xf0\x9f\x98\x80 the quick brown fox\n%\n",
        i);
  write_file(dir / "in/docs.txt", text);
  const int shift = write_wide_tokenizer(dir / "wide.json");
  PrepareOptions o;
  o.inputs = {dir / "in"};
  o.val_fraction = 0.1;
  o.doc_separator = "%";
  o.log = [](const std::string&) {};
  o.tokenizer_file = dir / "wide.json";
  o.out_dir = dir / "wide";
  const PrepareResult wide = prepare_corpus(o);
  o.tokenizer_file = std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/tokenizer/llama3_style.json";
  o.out_dir = dir / "narrow";
  const PrepareResult narrow = prepare_corpus(o);

  EXPECT_GT(wide.vocab_size, 65536);
  EXPECT_EQ(wide.vocab_size, narrow.vocab_size + shift);
  EXPECT_EQ(wide.eot_id, narrow.eot_id + shift);  // <|end_of_text|>: 128001
  EXPECT_EQ(read_prepared_corpus(dir / "wide").vocab_size, wide.vocab_size);
  EXPECT_EQ(read_prepared_corpus(dir / "wide").eot_id, kBegin + 1);
  for (const auto& [w, n] :
       {std::pair{wide.train_path, narrow.train_path}, std::pair{wide.val_path, narrow.val_path}}) {
    const TokenShard ws(w), ns(n);
    EXPECT_EQ(ws.token_bytes(), 4) << w;
    EXPECT_EQ(ns.token_bytes(), 2) << n;
    std::vector<int32_t> want = ns.token_ids();
    for (int32_t& id : want)
      if (id >= kBegin - shift) id += shift;
    ASSERT_EQ(ws.token_ids(), want) << w;
    EXPECT_EQ(ws[0], static_cast<uint32_t>(kBegin));  // each document starts <|begin_of_text|>
  }

  // The loader: sequence k of the shard is tokens kT .. kT+T, whatever the width.
  const int T = 16;
  DataLoader loader({wide.train_path}, 2, T);
  EXPECT_EQ(loader.max_token(), kBegin + 1);
  EXPECT_NO_THROW(loader.check_vocab(wide.vocab_size));
  EXPECT_THROW(loader.check_vocab(narrow.vocab_size), Error);
  const std::vector<int32_t> ids = TokenShard(wide.train_path).token_ids();
  loader.next_batch();
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < T; ++t) {
      EXPECT_EQ(loader.inputs()[b * T + t], ids[b * T + t]);
      EXPECT_EQ(loader.targets()[b * T + t], ids[b * T + t + 1]);
    }
  // The tokenizer kept beside the shards decodes them back to the documents.
  const Tokenizer tok = Tokenizer::load(wide.tokenizer_path);
  EXPECT_EQ(tok.vocab_size(), wide.vocab_size);
  const std::string decoded = tok.decode(ids);
  EXPECT_NE(decoded.find("<|begin_of_text|>\xe2\x80\x9c"
                         "Doc 0\xe2\x80\x9d: 12345 caf\xc3\xa9"),
            std::string::npos)
      << decoded.substr(0, 200);
}

}  // namespace
}  // namespace tide
