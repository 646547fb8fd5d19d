// tide's encoding with Llama-3-style and Qwen2-style tokenizer.json files against HF `tokenizers`,
// token for token, on mixed-language text (curly quotes, emoji, CJK, digits, whitespace runs,
// decomposed accents, special tokens written in the text). The files and the expected ids are in
// tests/fixtures/tokenizer (llama3_style.json, qwen2_style.json, pipelines_reference.json),
// written by tools/gen_hf_pipelines_fixture.py with HF `tokenizers`; this test needs no Python.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "tide/data/added_tokens.h"
#include "tide/data/tokenizer.h"
#include "tide/data/unicode_normalize.h"

namespace tide {
namespace {

using Ids = std::vector<int32_t>;

const std::string kPipelinesDir = std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/tokenizer/";

nlohmann::json pipelines_reference() {
  std::ifstream in(kPipelinesDir + "pipelines_reference.json");
  return nlohmann::json::parse(in);
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(TokenizerPipelines, FixtureHasTheMixedLanguageText) {
  const nlohmann::json ref = pipelines_reference();
  for (const char* name : {"llama3_style", "qwen2_style"}) {
    std::string all;
    for (const auto& line : ref["tokenizers"][name]["lines"])
      all += line["text"].get<std::string>();
    // curly quote, emoji, CJK, a digit run, a whitespace run, a decomposed accent, specials
    for (const char* s : {"\xe2\x80\x9c", "\xf0\x9f\x98\x80", "\xe6\x97\xa5\xe6\x9c\xac", "1234567",
                          "  \n\n", "e\xcc\x81", "<|im_start|>", "<|end_of_text|>"})
      EXPECT_NE(all.find(s), std::string::npos) << name << ": " << s;
  }
}

class PipelineFile : public ::testing::TestWithParam<const char*> {
 protected:
  nlohmann::json ref_ = pipelines_reference()["tokenizers"][GetParam()];
  Tokenizer tok_ = Tokenizer::load(kPipelinesDir + ref_["file"].get<std::string>());
};

TEST_P(PipelineFile, LoadsWithHfsVocabularyAndEndOfText) {
  EXPECT_EQ(tok_.vocab_size(), ref_["vocab_size"].get<int>());
  EXPECT_EQ(tok_.eot_id(), ref_["eot_id"].get<int>());
  EXPECT_FALSE(tok_.is_gpt2_pipeline());
}

// The pre-tokenizer (after the normalizer) splits as HF's does: the file's Split regex.
TEST_P(PipelineFile, PiecesMatchHf) {
  const bool nfc_normalizer = std::string(GetParam()) == "qwen2_style";
  int wrong = 0;
  for (const auto& line : ref_["lines"]) {
    const std::string text = line["text"];
    const std::string normalized = nfc_normalizer ? nfc(text) : text;
    std::vector<std::string> got;
    for (std::string_view p : tok_.pretokenizer().split(normalized)) got.emplace_back(p);
    EXPECT_EQ(got, line["pieces"].get<std::vector<std::string>>()) << text;
    wrong += got != line["pieces"].get<std::vector<std::string>>();
  }
  EXPECT_EQ(wrong, 0) << "of " << ref_["lines"].size() << " lines";
}

// Special tokens in the text stay text (HF with encode_special_tokens = True); other added
// tokens (Qwen2's <tool_call>) are matched.
TEST_P(PipelineFile, IdsMatchHfWithSpecialTokensAsText) {
  int wrong = 0;
  for (const auto& line : ref_["lines"]) {
    const std::string text = line["text"];
    const Ids got = tok_.encode(text);
    EXPECT_EQ(got, line["ids"].get<Ids>()) << text;
    wrong += got != line["ids"].get<Ids>();
    std::string normalized;
    for (const auto& p : line["pieces"]) normalized += p.get<std::string>();
    EXPECT_EQ(tok_.decode(got), normalized) << text;
  }
  EXPECT_EQ(wrong, 0) << "of " << ref_["lines"].size() << " lines";
}

// HF's default: special tokens written in the text become their ids.
TEST_P(PipelineFile, IdsMatchHfWithSpecialTokensMatched) {
  int wrong = 0;
  for (const auto& line : ref_["lines"]) {
    const std::string text = line["text"];
    const Ids got = tok_.encode(text, SpecialTokens::kMatch);
    EXPECT_EQ(got, line["ids_special"].get<Ids>()) << text;
    wrong += got != line["ids_special"].get<Ids>();
  }
  EXPECT_EQ(wrong, 0) << "of " << ref_["lines"].size() << " lines";
}

// HF's tokenizer(text): the post-processor's tokens around the text (Llama 3's BOS).
TEST_P(PipelineFile, TemplateMatchesHfPostProcessor) {
  for (const auto& line : ref_["lines"]) {
    const std::string text = line["text"];
    Ids got = tok_.template_prefix();
    tok_.encode_append(text, got, SpecialTokens::kMatch);
    got.insert(got.end(), tok_.template_suffix().begin(), tok_.template_suffix().end());
    EXPECT_EQ(got, line["ids_template"].get<Ids>()) << text;
  }
}

// save() writes the file as it was (tide's own writer knows GPT-2's pipeline only), so the
// tokenizer.json `tide prepare` leaves next to the shards is HF's.
TEST_P(PipelineFile, SavesTheFileAsItWas) {
  test::TempDir dir;
  tok_.save(dir / "tokenizer.json");
  const std::string file = kPipelinesDir + ref_["file"].get<std::string>();
  EXPECT_EQ(read_whole_file(dir / "tokenizer.json"), read_whole_file(file));
  const Tokenizer back = Tokenizer::load(dir / "tokenizer.json");
  const std::string text = ref_["lines"][0]["text"];
  EXPECT_EQ(back.encode(text), tok_.encode(text));
}

INSTANTIATE_TEST_SUITE_P(TokenizerPipelines, PipelineFile,
                         ::testing::Values("llama3_style", "qwen2_style"));

// Documents: Llama 3's BOS from its template, then <|end_of_text|> after the document; Qwen2 (no
// template) <|endoftext|> before it, as GPT-2.
TEST(TokenizerPipelines, DocumentBoundaries) {
  const Tokenizer llama = Tokenizer::load(kPipelinesDir + "llama3_style.json");
  const Tokenizer qwen = Tokenizer::load(kPipelinesDir + "qwen2_style.json");
  const Ids bos = llama.encode("<|begin_of_text|>", SpecialTokens::kMatch);
  ASSERT_EQ(bos.size(), 1u);
  EXPECT_EQ(llama.template_prefix(), bos);
  EXPECT_EQ(llama.document_prefix(), bos);
  EXPECT_EQ(llama.document_suffix(), Ids{llama.eot_id()});
  EXPECT_EQ(llama.token_bytes(llama.eot_id()), "<|end_of_text|>");
  EXPECT_EQ(qwen.document_prefix(), Ids{qwen.eot_id()});
  EXPECT_TRUE(qwen.document_suffix().empty());
  EXPECT_EQ(qwen.token_bytes(qwen.eot_id()), "<|endoftext|>");
}

// HF's AddedVocabulary: leftmost, then longest; an unmatched special token is still found and
// skipped as text, so no added token matches inside it.
TEST(TokenizerPipelines, AddedTokensLeftmostLongest) {
  const AddedTokens added({{"<a>", 1, true, false},
                           {"<a><b>", 2, true, false},
                           {"<b>", 3, false, false},
                           {"b><", 4, false, false}});
  auto parts = [&](std::string_view text, bool match_special) {
    std::vector<std::string> out;
    added.split(
        text, match_special, [&](std::string_view t) { out.push_back("'" + std::string(t) + "'"); },
        [&](int32_t id) { out.push_back(std::to_string(id)); });
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(parts("x<a><b>y<a>", true), (V{"'x'", "2", "'y'", "1"}));
  EXPECT_EQ(parts("x<a><b>y<b>", false), (V{"'x<a><b>y'", "3"}));
  EXPECT_EQ(parts("<b><b>", false), (V{"3", "3"}));
  EXPECT_EQ(parts("", true), V{});
  EXPECT_EQ(parts("plain", true), V{"'plain'"});
}

TEST(TokenizerPipelines, NfcComposesAndKeepsInvalidBytes) {
  EXPECT_EQ(nfc("cafe\xcc\x81"), "caf\xc3\xa9");   // e + U+0301 -> é
  EXPECT_EQ(nfc("\xe2\x84\xab"), "\xc3\x85");      // Angstrom sign -> Å
  EXPECT_EQ(nfc("\xef\xac\x81"), "\xef\xac\x81");  // ﬁ: NFKC only
  EXPECT_EQ(nfc("a\xff"
                "e\xcc\x81\xc3"),
            "a\xff\xc3\xa9\xc3");  // invalid bytes stay
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
}

}  // namespace
}  // namespace tide
