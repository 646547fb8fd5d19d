// tide's GPT-2 tokenization against independent references, on multilingual text (curly quotes,
// « », ², emoji, CJK, Cyrillic, Greek, Devanagari, whitespace runs): tests/fixtures/tokenizer,
// written by tools/gen_tokenizer_fixture.py. The pieces come from Python's `regex` module
// running GPT-2's pattern; the ids from HF `tokenizers` with a byte-level BPE it trained and
// saved (hf_bpe.json), which tide loads here. Everything must match exactly.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"
#include "tide/data/pretokenize.h"
#include "tide/data/tokenizer.h"

namespace tide {
namespace {

using Ids = std::vector<int32_t>;

const std::string kDir = std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/tokenizer/";

nlohmann::json reference() {
  std::ifstream in(kDir + "reference.json");
  return nlohmann::json::parse(in);
}

TEST(TokenizerReference, FixtureCoversWhatAsciiRulesGetWrong) {
  const nlohmann::json ref = reference();
  ASSERT_GE(ref["lines"].size(), 30u);
  EXPECT_EQ(ref["pattern"], Pretokenizer::kGpt2Pattern);
  std::string all;
  for (const auto& line : ref["lines"]) all += line["text"].get<std::string>();
  for (const char* s : {"don\xe2\x80\x99t", "\xc2\xab", "\xc2\xb2", "\xf0\x9f\x98\x80",
                        "\xe6\x97\xa5\xe6\x9c\xac", "\xd0\x9f\xd1\x80", "\xce\x9e", "  \n"})
    EXPECT_NE(all.find(s), std::string::npos) << s;
}

TEST(TokenizerReference, PiecesMatchPythonRegex) {
  const nlohmann::json ref = reference();
  int wrong = 0;
  for (const auto& line : ref["lines"]) {
    const std::string text = line["text"];
    std::vector<std::string> got;
    for (std::string_view p : Pretokenizer::gpt2().split(text)) got.emplace_back(p);
    EXPECT_EQ(got, line["pieces"].get<std::vector<std::string>>()) << text;
    wrong += got != line["pieces"].get<std::vector<std::string>>();
  }
  EXPECT_EQ(wrong, 0) << "of " << ref["lines"].size() << " lines";
}

// Both ways HF writes GPT-2's pre-tokenizer: ByteLevel(use_regex) and Split(regex) + ByteLevel.
class HfTokenizerFile : public ::testing::TestWithParam<const char*> {};

TEST_P(HfTokenizerFile, IdsMatchHfTokenizersAndDecodeExactly) {
  const nlohmann::json ref = reference();
  const Tokenizer tok = Tokenizer::load(kDir + GetParam());
  EXPECT_EQ(tok.vocab_size(), ref["vocab_size"].get<int>());
  EXPECT_EQ(tok.eot_id(), ref["eot_id"].get<int>());
  int wrong = 0;
  for (const auto& line : ref["lines"]) {
    const std::string text = line["text"];
    const Ids want = line["ids"].get<Ids>();
    const Ids got = tok.encode(text);
    EXPECT_EQ(got, want) << text;
    wrong += got != want;
    EXPECT_EQ(tok.decode(want), text);
  }
  EXPECT_EQ(wrong, 0) << "of " << ref["lines"].size() << " lines";
}

INSTANTIATE_TEST_SUITE_P(TokenizerReference, HfTokenizerFile,
                         ::testing::Values("hf_bpe.json", "hf_bpe_split.json"));

// HF's file -> tide -> tide's tokenizer.json -> tide: the same tokenizer (HF loading tide's file
// is checked by tools/gen_tokenizer_fixture.py --tide).
TEST(TokenizerReference, SurvivesTideSaveAndLoad) {
  test::TempDir dir;
  const Tokenizer hf = Tokenizer::load(kDir + "hf_bpe.json");
  hf.save(dir / "tokenizer.json");
  const Tokenizer back = Tokenizer::load(dir / "tokenizer.json");
  ASSERT_EQ(back.vocab_size(), hf.vocab_size());
  EXPECT_EQ(back.eot_id(), hf.eot_id());
  EXPECT_EQ(back.num_merges(), hf.num_merges());
  for (int id = 0; id < hf.vocab_size(); ++id) ASSERT_EQ(back.token_bytes(id), hf.token_bytes(id));
  // Held in a local: a range-for over reference()["lines"] reads a destroyed temporary.
  const nlohmann::json ref = reference();
  for (const auto& line : ref["lines"])
    EXPECT_EQ(back.encode(line["text"].get<std::string>()), line["ids"].get<Ids>());
}

}  // namespace
}  // namespace tide
