#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "tide/data/pretokenize.h"
#include "tide/data/tokenizer.h"

namespace tide {
namespace {

using test::expected_error;
using test::TempDir;
using Ids = std::vector<int32_t>;

const std::string kFixture = std::string(TIDE_SOURCE_DIR) + "/tests/unit/data/fixtures/gpt2_tiny/";

// A few KB of English for training tests.
std::string english_text() {
  const std::string para =
      "The quick brown fox jumps over the lazy dog. It's the fox's third jump today, and the dog "
      "doesn't care: dogs rarely do. In 1999 the fox jumped 123 times; in 2000, 456 times!\n"
      "Then the rain came, and the fox and the dog went in. They'll try again tomorrow.\n\n";
  std::string text;
  for (int i = 0; i < 12; ++i) text += para;
  return text;
}

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : Pretokenizer::gpt2().split(text)) out.emplace_back(p);
  return out;
}

// Expected pieces come from GPT-2's regex run by Python's `regex` module on the same strings.
TEST(Pretokenize, SplitsLikeGpt2Regex) {
  EXPECT_EQ(
      pieces("Hello world's  end\n\nfoo 123abc  ?!don't  \t x'LL"),
      (std::vector<std::string>{"Hello", " world", "'s", " ", " end", "\n", "\n", "foo", " 123",
                                "abc", " ", " ?!", "don", "'t", "  \t", " x", "'", "LL"}));
  EXPECT_EQ(pieces("  lead and trail  "),
            (std::vector<std::string>{" ", " lead", " and", " trail", "  "}));
  EXPECT_EQ(pieces("it's they're we've I'm you'll he'd"),
            (std::vector<std::string>{"it", "'s", " they", "'re", " we", "'ve", " I", "'m", " you",
                                      "'ll", " he", "'d"}));
}

// Unicode classes (Python's `regex` gives the same; the full reference is
// test_tokenizer_reference.cpp): a curly apostrophe is punctuation, not a contraction; ² is a
// number; NBSP is whitespace; CJK and emoji are letters and symbols.
TEST(Pretokenize, UnicodeClasses) {
  EXPECT_EQ(pieces("I don\xe2\x80\x99t know"),
            (std::vector<std::string>{"I", " don", "\xe2\x80\x99", "t", " know"}));
  EXPECT_EQ(pieces("x\xc2\xb2 \xc2\xaboui\xc2\xbb"),
            (std::vector<std::string>{"x", "\xc2\xb2", " \xc2\xab", "oui", "\xc2\xbb"}));
  EXPECT_EQ(pieces("emoji \xf0\x9f\x98\x80!"),
            (std::vector<std::string>{"emoji", " \xf0\x9f\x98\x80!"}));
  EXPECT_EQ(pieces("\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e text"),
            (std::vector<std::string>{"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", " text"}));
  EXPECT_EQ(pieces("a\xc2\xa0 b"), (std::vector<std::string>{"a", "\xc2\xa0", " b"}));
  EXPECT_EQ(pieces("na\xc3\xafve caf\xc3\xa9"),
            (std::vector<std::string>{"na\xc3\xafve", " caf\xc3\xa9"}));
}

// A run of invalid UTF-8 is one piece, and the valid text on each side splits as if the run were
// the end / start of the text: "  " keeps both spaces (nothing non-space follows it).
TEST(Pretokenize, InvalidUtf8IsABarrier) {
  EXPECT_EQ(pieces("ab\xff\xfe cd  \x80 x\xc3"),
            (std::vector<std::string>{"ab", "\xff\xfe", " cd", "  ", "\x80", " x", "\xc3"}));
  EXPECT_EQ(pieces("\xff"), (std::vector<std::string>{"\xff"}));
  EXPECT_EQ(pieces(std::string("a\0b", 3)),
            (std::vector<std::string>{"a", std::string("\0", 1), "b"}));
}

TEST(Pretokenize, EmptyText) {
  EXPECT_TRUE(pieces("").empty());
}

TEST(ByteUnicode, MatchesGpt2Table) {
  EXPECT_EQ(bytes_to_unicode()[' '], 0x120u);   // 'Ġ'
  EXPECT_EQ(bytes_to_unicode()['\n'], 0x10Au);  // 'Ċ'
  EXPECT_EQ(bytes_to_unicode()['a'], static_cast<uint32_t>('a'));
  EXPECT_EQ(bytes_to_unicode()[0xAD],
            0x143u);  // the last non-printable byte gets the last code point
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(from_byte_unicode(to_byte_unicode(all)), all);
  EXPECT_EQ(to_byte_unicode(" the"), "\xc4\xa0the");
}

// ---- GPT-2 files: the fixture has GPT-2's byte ids and its first seven merges (make_fixture.py).

TEST(Gpt2Tokenizer, EncodesHandComputedIds) {
  const Tokenizer tok = Tokenizer::load_gpt2(kFixture + "encoder.json", kFixture + "vocab.bpe");
  EXPECT_EQ(tok.vocab_size(), 264);
  EXPECT_EQ(tok.eot_id(), 263);
  EXPECT_EQ(tok.num_merges(), 7);
  // "the": t h e -> (h e) is merge 2 -> [t, he]
  EXPECT_EQ(tok.encode("the cat"), (Ids{83, 258, 220, 66, 64, 83}));
  // " the": (Ġ t) rank 0, then (h e) rank 2, then (Ġt he) rank 6 -> Ġthe = 262
  EXPECT_EQ(tok.encode(" the"), (Ids{262}));
  EXPECT_EQ(tok.encode("in the rain\n"), (Ids{259, 262, 220, 81, 64, 259, 198}));
  EXPECT_EQ(tok.encode("there"), (Ids{83, 258, 260}));  // (h e) before (r e)
  EXPECT_EQ(tok.encode(" at"), (Ids{257, 83}));
  EXPECT_EQ(tok.encode("Hello"), (Ids{39, 68, 75, 75, 78}));
  EXPECT_EQ(tok.encode("\xc3\xa9"), (Ids{127, 102}));  // é: bytes C3 A9 in GPT-2's byte order
  // The literal text of the special token is ordinary text: "<|" "endoftext" "|>", no merges.
  EXPECT_EQ(tok.encode("<|endoftext|>").size(), 13u);
}

TEST(Gpt2Tokenizer, Decodes) {
  const Tokenizer tok = Tokenizer::load_gpt2(kFixture + "encoder.json", kFixture + "vocab.bpe");
  EXPECT_EQ(tok.decode(Ids{259, 262, 220, 81, 64, 259, 198}), "in the rain\n");
  EXPECT_EQ(tok.decode(Ids{262, 263, 83}), " the<|endoftext|>t");
  const std::string msg = expected_error([&] { tok.decode(Ids{264}); });
  EXPECT_NE(msg.find("token id 264 is outside the vocabulary of 264 tokens"), std::string::npos)
      << msg;
}

TEST(Gpt2Tokenizer, MergeWithUnknownTokenIsRejected) {
  TempDir dir;
  test::write_file(dir / "vocab.bpe", "#version: 0.2\nĠ t\nq zz\n");
  const std::string msg =
      expected_error([&] { Tokenizer::load_gpt2(kFixture + "encoder.json", dir / "vocab.bpe"); });
  EXPECT_NE(msg.find("merge 2 (\"q zz\") uses \"zz\", which is not in the vocabulary"),
            std::string::npos)
      << msg;
}

TEST(Gpt2Tokenizer, MalformedMergeLine) {
  TempDir dir;
  test::write_file(dir / "vocab.bpe", "#version: 0.2\nĠt\n");
  const std::string msg =
      expected_error([&] { Tokenizer::load_gpt2(kFixture + "encoder.json", dir / "vocab.bpe"); });
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is not a merge"), std::string::npos) << msg;
}

TEST(Gpt2Tokenizer, EncoderWithoutAllBytesIsRejected) {
  TempDir dir;
  std::ifstream in(kFixture + "encoder.json");
  nlohmann::json enc = nlohmann::json::parse(in);
  enc.erase("Ċ");  // newline's byte token
  for (auto& [text, id] : enc.items()) {
    if (id.get<int>() > 198) id = id.get<int>() - 1;  // keep ids dense
  }
  test::write_file(dir / "encoder.json", enc.dump());
  test::write_file(dir / "vocab.bpe", "#version: 0.2\n");
  const std::string msg =
      expected_error([&] { Tokenizer::load_gpt2(dir / "encoder.json", dir / "vocab.bpe"); });
  EXPECT_NE(msg.find("no token for byte 0x0a"), std::string::npos) << msg;
}

TEST(Gpt2Tokenizer, MissingOrBrokenFiles) {
  TempDir dir;
  EXPECT_NE(expected_error([&] {
              Tokenizer::load_gpt2(dir / "encoder.json", kFixture + "vocab.bpe");
            }).find("cannot open GPT-2 encoder.json"),
            std::string::npos);
  test::write_file(dir / "encoder.json", "{\"a\": 1,");
  EXPECT_NE(expected_error([&] {
              Tokenizer::load_gpt2(dir / "encoder.json", kFixture + "vocab.bpe");
            }).find("not valid JSON"),
            std::string::npos);
}

// ---- Training

TEST(BpeTraining, LearnsHandComputedMerges) {
  // Pieces: "ab", " ab" x2, " abc". Pair counts: (a b) 4, (' ' a) 3, (b c) 1.
  // Merge 1: a+b -> 256. Then (' ' 256) 3 -> 257 " ab". Then (257 c) 1 -> 258 " abc".
  const Tokenizer tok = Tokenizer::train("ab ab ab abc", 260);
  EXPECT_EQ(tok.vocab_size(), 260);
  EXPECT_EQ(tok.eot_id(), 259);
  EXPECT_EQ(tok.token_bytes(256), "ab");
  EXPECT_EQ(tok.token_bytes(257), " ab");
  EXPECT_EQ(tok.token_bytes(258), " abc");
  EXPECT_EQ(tok.encode("ab abc"), (Ids{256, 258}));
  EXPECT_EQ(tok.encode("abab"), (Ids{256, 256}));
}

TEST(BpeTraining, TiesGoToTheSmallerPair) {
  // (a b), (' ' c), (c d) all occur once; (' ' c) = (32, 99) has the smallest ids.
  const Tokenizer tok = Tokenizer::train("ab cd", 258);
  EXPECT_EQ(tok.token_bytes(256), " c");
}

TEST(BpeTraining, StopsWhenNothingIsLeftToMerge) {
  const Tokenizer tok = Tokenizer::train("ab", 1000);
  EXPECT_EQ(tok.num_merges(), 1);
  EXPECT_EQ(tok.vocab_size(), 258);  // 256 bytes + "ab" + <|endoftext|>
}

TEST(BpeTraining, TrainsOnEnglishAndCompresses) {
  const std::string text = english_text();
  const Tokenizer tok = Tokenizer::train(text, 350);
  EXPECT_EQ(tok.vocab_size(), 350);
  EXPECT_EQ(tok.eot_id(), 349);
  const Ids ids = tok.encode(text);
  EXPECT_EQ(tok.decode(ids), text);
  // Most words of the repeated paragraph become single tokens.
  EXPECT_LT(ids.size(), text.size() / 3);
  EXPECT_EQ(tok.encode(" the").size(), 1u);
}

std::string read_fixture(const std::string& name) {
  std::ifstream in(std::string(TIDE_SOURCE_DIR) + "/tests/unit/data/fixtures/bpe_reference/" + name,
                   std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// fixtures/bpe_reference was made by a naive Python trainer/encoder (make_reference.py) that
// recounts every pair after every merge: the incremental trainer must learn the same merges,
// and encode() must give the ids of GPT-2's bpe() procedure.
TEST(BpeTraining, MatchesNaiveReferenceImplementation) {
  TempDir dir;
  const Tokenizer tok = Tokenizer::train(read_fixture("corpus.txt"), 400);
  tok.save(dir / "tokenizer.json");
  std::ifstream in(dir / "tokenizer.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  std::string merges;
  for (const auto& m : j["model"]["merges"]) merges += m.get<std::string>() + "\n";
  EXPECT_EQ(merges, read_fixture("merges.txt"));
  Ids expected;
  std::istringstream ids(read_fixture("heldout_ids.txt"));
  for (int32_t id; ids >> id;) expected.push_back(id);
  ASSERT_GT(expected.size(), 100u);
  EXPECT_EQ(tok.encode(read_fixture("heldout.txt")), expected);
}

TEST(BpeTraining, VocabSizeOutOfRange) {
  EXPECT_NE(
      expected_error([] { Tokenizer::train("abc", 100); }).find("vocab_size 100 is out of range"),
      std::string::npos);
  EXPECT_NE(expected_error([] { Tokenizer::train("abc", 70000); }).find("at most 65536"),
            std::string::npos);
}

// ---- Round trips

TEST(Tokenizer, RoundTripsRandomBytesAndUtf8) {
  const Tokenizer trained = Tokenizer::train(english_text(), 400);
  const Tokenizer gpt2 = Tokenizer::load_gpt2(kFixture + "encoder.json", kFixture + "vocab.bpe");
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 20; ++trial) {
    std::string bytes(1 + rng() % 500, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xFF);  // NULs, invalid UTF-8, anything
    EXPECT_EQ(trained.decode(trained.encode(bytes)), bytes);
    EXPECT_EQ(gpt2.decode(gpt2.encode(bytes)), bytes);
  }
  const std::string utf8 =
      "na\xc3\xafve caf\xc3\xa9 \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82 "
      "\xce\xb1\xce\xb2\xce\xb3 1\xc2\xbd the end.\r\n\t";
  EXPECT_EQ(trained.decode(trained.encode(utf8)), utf8);
  EXPECT_EQ(gpt2.decode(gpt2.encode(utf8)), utf8);
}

TEST(Tokenizer, SaveLoadRoundTrip) {
  TempDir dir;
  // English, and random text over a tiny alphabet (long runs, many overlapping merges).
  std::mt19937 rng(7);
  std::string text;
  for (int i = 0; i < 4000; ++i) text.push_back("ab  \n"[rng() % 5]);
  for (const Tokenizer& tok :
       {Tokenizer::train(english_text(), 500), Tokenizer::train(text, 600)}) {
    tok.save(dir / "tokenizer.json");
    const Tokenizer back = Tokenizer::load(dir / "tokenizer.json");
    EXPECT_EQ(back.vocab_size(), tok.vocab_size());
    EXPECT_EQ(back.eot_id(), tok.eot_id());
    EXPECT_EQ(back.num_merges(), tok.num_merges());
    for (int id = 0; id < tok.vocab_size(); ++id)
      ASSERT_EQ(back.token_bytes(id), tok.token_bytes(id));
    EXPECT_EQ(back.encode(english_text()), tok.encode(english_text()));
    EXPECT_EQ(back.encode(text), tok.encode(text));
  }
}

TEST(Tokenizer, Gpt2FilesSurviveConversionToTokenizerJson) {
  TempDir dir;
  const Tokenizer gpt2 = Tokenizer::load_gpt2(kFixture + "encoder.json", kFixture + "vocab.bpe");
  gpt2.save(dir / "tokenizer.json");
  const Tokenizer back = Tokenizer::load(dir / "tokenizer.json");
  EXPECT_EQ(back.eot_id(), 263);
  EXPECT_EQ(back.encode("in the rain\n"), (Ids{259, 262, 220, 81, 64, 259, 198}));
}

// tide's first tokenizer.json format, as older runs and checkpoints hold it.
TEST(Tokenizer, ReadsTheOlderTideBpeFormat) {
  const std::string legacy =
      std::string(TIDE_SOURCE_DIR) + "/tests/unit/data/fixtures/tide_bpe_v1/tokenizer.json";
  const Tokenizer tok = Tokenizer::load(legacy);
  EXPECT_EQ(tok.vocab_size(), 264);
  EXPECT_EQ(tok.eot_id(), 263);
  EXPECT_EQ(tok.encode("in the rain\n"), (Ids{259, 262, 220, 81, 64, 259, 198}));
  // Saving it writes HF's format, with the same tokenizer inside.
  TempDir dir;
  tok.save(dir / "tokenizer.json");
  std::ifstream in(dir / "tokenizer.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_FALSE(j.contains("format"));
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["model"]["vocab"]["<|endoftext|>"], 263);
  EXPECT_EQ(j["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(j["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(Tokenizer::load(dir / "tokenizer.json").encode("in the rain\n"),
            (Ids{259, 262, 220, 81, 64, 259, 198}));
}

nlohmann::json split_pre_tokenizer(const nlohmann::json& pattern, const std::string& behavior) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
}

nlohmann::json hf_fixture() {
  std::ifstream in(std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/tokenizer/hf_bpe.json");
  return nlohmann::json::parse(in);
}

// HF settings that would make HF's ids differ from tide's are refused, naming the setting.
TEST(Tokenizer, HfSettingsTideCannotReproduceAreRefused) {
  TempDir dir;
  using Edit = std::function<void(nlohmann::json&)>;
  const std::vector<std::pair<Edit, std::string>> cases = {
      // NFC (Qwen2's) is run; other normalizers are not.
      {[](nlohmann::json& j) {
         j["normalizer"] = {{"type", "NFKC"}};
       },
       "\"normalizer\" is {\"type\":\"NFKC\"}; tide applies none (GPT-2, Llama 3) or NFC"},
      {[](nlohmann::json& j) { j["pre_tokenizer"]["add_prefix_space"] = true; },
       "\"pre_tokenizer\" is {"},
      {[](nlohmann::json& j) { j["pre_tokenizer"]["use_regex"] = false; },
       "or a Sequence of a Split with a regex (behavior Isolated)"},
      {[](nlohmann::json& j) { j["pre_tokenizer"] = nullptr; }, "\"pre_tokenizer\" is null"},
      {[](nlohmann::json& j) {
         j["pre_tokenizer"] = split_pre_tokenizer({{"String", " "}}, "Isolated");
       },
       "not a literal {\"String\": ...}"},
      {[](nlohmann::json& j) {
         j["pre_tokenizer"] = split_pre_tokenizer({{"Regex", "\\s+"}}, "Removed");
       },
       "behavior \"Removed\" and invert false; tide splits with behavior \"Isolated\""},
      {[](nlohmann::json& j) {
         j["pre_tokenizer"] = split_pre_tokenizer({{"Regex", "(?<x"}}, "Isolated");
       },
       "the Split pre-tokenizer: pre-tokenizer regex /(?<x/ does not compile"},
      {[](nlohmann::json& j) { j["model"]["ignore_merges"] = "yes"; },
       "model.ignore_merges is \"yes\", not true or false"},
      {[](nlohmann::json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout is 0.1"},
      {[](nlohmann::json& j) { j["model"]["type"] = "WordPiece"; },
       "\"model\" is of type WordPiece"},
      {[](nlohmann::json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       "model.continuing_subword_prefix is \"##\""},
      {[](nlohmann::json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"}};
       },
       "the TemplateProcessing post-processor's \"single\" is missing; tide supports special "
       "tokens around one sequence ($A)"},
      // Two sequences in "single" is not a template tide can apply to one text.
      {[](nlohmann::json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single",
                                 {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                  {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}}};
       },
       "tide supports special tokens around one sequence ($A)"},
      {[](nlohmann::json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single",
                                 {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                  {{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}}}}};
       },
       "uses \"<|endoftext|>\" but its \"special_tokens\" give no ids for it"},
      {[](nlohmann::json& j) {
         j["post_processor"] = {{"type", "RobertaProcessing"}};
       },
       "\"post_processor\" is {\"type\":\"RobertaProcessing\"}; tide runs ByteLevel"},
      {[](nlohmann::json& j) {
         j["decoder"] = {{"type", "Metaspace"}};
       },
       "\"decoder\" is Metaspace"},
      {[](nlohmann::json& j) { j["added_tokens"][0]["lstrip"] = true; },
       "added token \"<|endoftext|>\" has \"lstrip\": true, which tide does not implement"},
      {[](nlohmann::json& j) {
         j["added_tokens"] = nlohmann::json::array();
         j["model"]["vocab"].erase("<|endoftext|>");
         j["model"]["vocab"]["<|endoftext"] = 0;
       },
       "no end-of-text token; tide separates documents with <|endoftext|> (GPT-2, Qwen2"},
      {[](nlohmann::json& j) { j["added_tokens"][0]["id"] = 5; },
       "<|endoftext|> has id 5 in \"added_tokens\" but 0 in model.vocab"},
      {[](nlohmann::json& j) { j["model"]["merges"][3] = 7; }, "merge 4 is 7"},
      {[](nlohmann::json& j) { j["model"]["vocab"].erase("a"); },
       "ids run up to 1199, but there are only 1199 tokens; ids must be 0..1198"},
      {[](nlohmann::json& j) { j["model"]["vocab"]["\xe6\x97\xa5"] = 1200; },
       "outside GPT-2's byte-to-unicode table"},
  };
  test::write_file(dir / "t.json", hf_fixture().dump());
  EXPECT_EQ(Tokenizer::load(dir / "t.json").vocab_size(), 1200);  // unedited, it loads
  for (const auto& [edit, want] : cases) {
    nlohmann::json j = hf_fixture();
    edit(j);
    test::write_file(dir / "t.json", j.dump());
    const std::string msg = expected_error([&] { Tokenizer::load(dir / "t.json"); });
    EXPECT_NE(msg.find(want), std::string::npos) << "want: " << want << "\ngot: " << msg;
    EXPECT_NE(msg.find("t.json"), std::string::npos) << msg;
  }
}

// HF may list <|endoftext|> only in added_tokens (an id past the model's vocabulary).
TEST(Tokenizer, HfSpecialTokenOnlyInAddedTokens) {
  TempDir dir;
  const Tokenizer trained = Tokenizer::train(english_text(), 300);
  trained.save(dir / "tokenizer.json");
  std::ifstream in(dir / "tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["model"]["vocab"].erase("<|endoftext|>");
  test::write_file(dir / "t.json", j.dump());
  const Tokenizer back = Tokenizer::load(dir / "t.json");
  EXPECT_EQ(back.eot_id(), 299);
  EXPECT_EQ(back.encode(english_text()), trained.encode(english_text()));
}

TEST(Tokenizer, LoadRejectsOtherFiles) {
  TempDir dir;
  test::write_file(dir / "t.json", "{\"vocab\": {}}");
  const std::string msg = expected_error([&] { Tokenizer::load(dir / "t.json"); });
  EXPECT_NE(msg.find("not a tokenizer.json: neither HF tokenizers' format"), std::string::npos)
      << msg;
  test::write_file(dir / "t.json", "{\"model\": {}}");
  const std::string no_tables = expected_error([&] { Tokenizer::load(dir / "t.json"); });
  EXPECT_NE(no_tables.find("\"model\" lacks \"vocab\" or \"merges\""), std::string::npos)
      << no_tables;
  EXPECT_NE(expected_error([&] {
              Tokenizer::load(dir / "missing.json");
            }).find("cannot open tokenizer file"),
            std::string::npos);
  // Wrong JSON types and a directory: one clear line naming the file, no raw library message.
  for (const char* text :
       {"{\"format\": 5}", "{\"format\": \"tide-bpe\", \"version\": \"one\"}",
        "{\"format\": \"tide-bpe\", \"version\": 1, \"vocab\": {}, \"merges\": [], "
        "\"special_tokens\": [1]}",
        "[1, 2]", "{ nope"}) {
    test::write_file(dir / "t.json", text);
    const std::string m = expected_error([&] { Tokenizer::load(dir / "t.json"); });
    EXPECT_EQ(m.find("json.exception"), std::string::npos) << m;
    EXPECT_NE(m.find("t.json"), std::string::npos) << m;
  }
  const std::string d = expected_error([&] { Tokenizer::load(dir.str()); });
  EXPECT_NE(d.find("is a directory"), std::string::npos) << d;
  EXPECT_EQ(d.find("basic_filebuf"), std::string::npos) << d;
}

}  // namespace
}  // namespace tide
