#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tide/data/prepare.h"
#include "tide/data/shard.h"
#include "tide/data/tokenizer.h"

namespace tide {
namespace {

using test::expected_error;
using test::TempDir;
using test::write_file;

// Fortune-style files: documents separated by "%" lines.
void write_corpus(const TempDir& dir) {
  std::filesystem::create_directories(dir / "in");
  std::string a, b;
  for (int i = 0; i < 30; ++i) {
    a += fmt::format("Fortune number {} says: the early bird gets the worm.\n%\n", i);
    b += fmt::format("Quote {}: to be, or not to be, that is the question.\n  -- Hamlet\n%\n", i);
  }
  write_file(dir / "in/a", a);
  write_file(dir / "in/b", b);
}

PrepareOptions quiet_options(const TempDir& dir) {
  PrepareOptions o;
  o.inputs = {dir / "in"};
  o.out_dir = dir / "out";
  o.vocab_size = 300;
  o.val_fraction = 0.1;
  o.doc_separator = "%";
  o.log = [](const std::string&) {};
  return o;
}

int count(const std::vector<int32_t>& tokens, int id) {
  return static_cast<int>(std::count(tokens.begin(), tokens.end(), id));
}

TEST(Prepare, WritesTokenizerShardsAndMeta) {
  TempDir dir;
  write_corpus(dir);
  const PrepareResult r = prepare_corpus(quiet_options(dir));
  EXPECT_EQ(r.vocab_size, 300);
  EXPECT_EQ(r.eot_id, 299);
  EXPECT_EQ(r.train_documents + r.val_documents, 60);
  EXPECT_EQ(r.val_documents, 6);  // every 10th document

  const Tokenizer tok = Tokenizer::load(r.tokenizer_path);
  const TokenShard train(r.train_path), val(r.val_path);
  EXPECT_EQ(static_cast<int64_t>(train.size()), r.train_tokens);
  EXPECT_EQ(static_cast<int64_t>(val.size()), r.val_tokens);
  // One <|endoftext|> in front of every document.
  EXPECT_EQ(count(train.token_ids(), tok.eot_id()), r.train_documents);
  EXPECT_EQ(count(val.token_ids(), tok.eot_id()), r.val_documents);
  EXPECT_EQ(val[0], tok.eot_id());
  const std::vector<int32_t> ids = val.token_ids();
  const std::string text = tok.decode(ids);
  // Val holds documents 9, 19, 29, ... (every 10th): the first is a's fortune number 9.
  const std::string first_val = "<|endoftext|>Fortune number 9 says: ";
  EXPECT_EQ(text.substr(0, first_val.size()), first_val);

  std::ifstream in(r.meta_path);
  const nlohmann::json meta = nlohmann::json::parse(in);
  EXPECT_EQ(meta["vocab_size"], 300);
  EXPECT_EQ(meta["eot_id"], 299);
  EXPECT_EQ(meta["train_tokens"], r.train_tokens);
  EXPECT_EQ(meta["val_tokens"], r.val_tokens);
  EXPECT_EQ(meta["tokenizer"], "bpe");
  EXPECT_EQ(meta["sources"].size(), 2u);
  EXPECT_NEAR(meta["val_unigram_entropy"].get<double>(), r.val_unigram_entropy, 1e-12);
  EXPECT_GT(r.val_unigram_entropy, 0.5);
  EXPECT_LT(r.val_unigram_entropy, std::log(300.0));
}

TEST(Prepare, ReadsItsMetaBack) {
  TempDir dir;
  write_corpus(dir);
  EXPECT_FALSE(prepared_corpus_exists(dir / "out"));
  const std::string missing = expected_error([&] { read_prepared_corpus(dir / "out"); });
  EXPECT_NE(missing.find("prepare the data first with `tide prepare --out-dir"), std::string::npos)
      << missing;
  const PrepareResult r = prepare_corpus(quiet_options(dir));
  EXPECT_TRUE(prepared_corpus_exists(dir / "out"));
  const PrepareResult back = read_prepared_corpus(dir / "out");
  EXPECT_EQ(back.train_path, r.train_path);
  EXPECT_EQ(back.val_path, r.val_path);
  EXPECT_EQ(back.tokenizer_path, r.tokenizer_path);
  EXPECT_EQ(back.vocab_size, r.vocab_size);
  EXPECT_EQ(back.eot_id, r.eot_id);
  EXPECT_EQ(back.train_tokens, r.train_tokens);
  EXPECT_EQ(back.val_tokens, r.val_tokens);
  EXPECT_DOUBLE_EQ(back.val_unigram_entropy, r.val_unigram_entropy);
  write_file(dir / "out/meta.json", "{\"vocab_size\": 3}");
  const std::string broken = expected_error([&] { read_prepared_corpus(dir / "out"); });
  EXPECT_NE(broken.find("unreadable"), std::string::npos) << broken;
  // Each broken meta.json gives one clear line naming the file (and the field) and the fix,
  // never a raw nlohmann message.
  for (const char* text : {"[1, 2]", "{\"vocab_size\": 3}", "{\"tokenizer_file\": 7}", "{ nope"}) {
    write_file(dir / "out/meta.json", text);
    const std::string msg = expected_error([&] { read_prepared_corpus(dir / "out"); });
    EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
    EXPECT_NE(msg.find("meta.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("re-create it with `tide prepare"), std::string::npos) << msg;
  }
  write_file(dir / "out/meta.json", "{\"tokenizer_file\": 7}");
  EXPECT_NE(expected_error([&] {
              read_prepared_corpus(dir / "out");
            }).find("field \"tokenizer_file\" is missing or of the wrong type (got 7)"),
            std::string::npos);
}

TEST(Prepare, UsesGpt2TokenizerFiles) {
  TempDir dir;
  write_corpus(dir);
  PrepareOptions o = quiet_options(dir);
  const std::string fixture = std::string(TIDE_SOURCE_DIR) + "/tests/unit/data/fixtures/gpt2_tiny/";
  o.gpt2_encoder = fixture + "encoder.json";
  o.gpt2_vocab = fixture + "vocab.bpe";
  const PrepareResult r = prepare_corpus(o);
  EXPECT_EQ(r.vocab_size, 264);
  EXPECT_EQ(r.eot_id, 263);
  const TokenShard train(r.train_path);
  EXPECT_EQ(train[0], 263);
  EXPECT_LT(train.max_token(), 264);
}

// An HF tokenizers file (<|endoftext|> is id 0 there) instead of training one.
TEST(Prepare, UsesATokenizerFile) {
  TempDir dir;
  write_corpus(dir);
  PrepareOptions o = quiet_options(dir);
  o.tokenizer_file = std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/tokenizer/hf_bpe.json";
  const PrepareResult r = prepare_corpus(o);
  EXPECT_EQ(r.vocab_size, 1200);
  EXPECT_EQ(r.eot_id, 0);
  const TokenShard train(r.train_path);
  EXPECT_EQ(train[0], 0);
  const Tokenizer hf = Tokenizer::load(o.tokenizer_file);
  const Tokenizer written = Tokenizer::load(r.tokenizer_path);
  const std::string text = "The fox\xe2\x80\x99s d\xc3\xa9j\xc3\xa0 vu \xf0\x9f\x98\x80\n";
  EXPECT_EQ(written.encode(text), hf.encode(text));
  std::ifstream in(r.meta_path);
  EXPECT_EQ(nlohmann::json::parse(in)["tokenizer"], "file");
  o.gpt2_encoder = "encoder.json";
  o.gpt2_vocab = "vocab.bpe";
  EXPECT_NE(expected_error([&] { prepare_corpus(o); }).find("pass one of them"), std::string::npos);
}

// Llama-3-style and Qwen2-style tokenizer.json files (tests/fixtures/tokenizer): each document is
// HF's tokenizer(doc) ids, Llama 3's <|begin_of_text|> first and <|end_of_text|> last, Qwen2's
// <|endoftext|> first; tokenizer.json next to the shards is the file as it was.
TEST(Prepare, UsesLlama3AndQwen2StyleFiles) {
  TempDir dir;
  std::filesystem::create_directories(dir / "in");
  std::string text;
  for (int i = 0; i < 20; ++i)
    text += fmt::format(
        "\xe2\x80\x9c"
        "Doc {}\xe2\x80\x9d: 12345 caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac "
        "\xf0\x9f\x98\x80 <|endoftext|>\n%\n",
        i);
  write_file(dir / "in/docs.txt", text);
  for (const std::string name : {"llama3_style", "qwen2_style"}) {
    PrepareOptions o = quiet_options(dir);
    o.tokenizer_file = std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + name + ".json";
    o.out_dir = dir / name;
    const PrepareResult r = prepare_corpus(o);
    const Tokenizer tok = Tokenizer::load(o.tokenizer_file);
    EXPECT_EQ(r.vocab_size, tok.vocab_size());
    EXPECT_EQ(r.eot_id, tok.eot_id());
    const std::vector<int32_t> prefix = tok.document_prefix(), suffix = tok.document_suffix();
    std::vector<int32_t> want;
    for (const std::string& doc : split_documents(text, "%")) {
      want.insert(want.end(), prefix.begin(), prefix.end());
      tok.encode_append(doc, want);
      want.insert(want.end(), suffix.begin(), suffix.end());
    }
    const TokenShard train(r.train_path), val(r.val_path);
    std::vector<int32_t> all = train.token_ids();
    const std::vector<int32_t> val_ids = val.token_ids();
    all.insert(all.end(), val_ids.begin(), val_ids.end());
    std::vector<int32_t> sorted_all = all, sorted_want = want;  // val is dealt from the documents
    std::sort(sorted_all.begin(), sorted_all.end());
    std::sort(sorted_want.begin(), sorted_want.end());
    EXPECT_EQ(sorted_all, sorted_want) << name;
    if (name == "llama3_style") {
      EXPECT_EQ(train[0], tok.template_prefix().at(0)) << "<|begin_of_text|> first";
      EXPECT_EQ(train[train.size() - 1], tok.eot_id()) << "<|end_of_text|> last";
    } else {
      EXPECT_EQ(train[0], tok.eot_id()) << "<|endoftext|> first";
    }
    // "<|endoftext|>" written in a document stays text.
    EXPECT_EQ(std::count(all.begin(), all.end(), tok.eot_id()), 20) << name;
    std::ifstream a(o.tokenizer_file), b(r.tokenizer_path);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(a), {}),
              std::string(std::istreambuf_iterator<char>(b), {}));
  }
}

// --format jsonl: text records train whole; prompt/completion pairs end with end-of-text and
// leave the prompt (and the document's opening tokens) out of the loss.
TEST(Prepare, JsonlPromptCompletionIsMaskedInTheShards) {
  TempDir dir;
  std::filesystem::create_directories(dir / "in");
  std::string jsonl;
  for (int i = 0; i < 20; ++i) {
    jsonl +=
        i % 2
            ? fmt::format(
                  R"({{"prompt": "Question {}: the capital?", "completion": " Paris {}."}})", i, i)
            : fmt::format(R"({{"text": "Plain document {} <|im_start|>.", "id": {}}})", i, i);
    jsonl += i == 7 ? "\n\n" : "\n";  // a blank line is skipped
  }
  write_file(dir / "in/sft.jsonl", jsonl);
  PrepareOptions o = quiet_options(dir);
  o.inputs = {dir / "in/sft.jsonl"};
  o.doc_separator = "";
  o.format = "jsonl";
  o.val_fraction = 0.25;
  o.special_tokens = "match";
  o.tokenizer_file = std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/tokenizer/qwen2_style.json";
  const PrepareResult r = prepare_corpus(o);
  EXPECT_EQ(r.train_documents + r.val_documents, 20);
  EXPECT_TRUE(r.loss_mask);
  const Tokenizer tok = Tokenizer::load(o.tokenizer_file);
  const int eot = tok.eot_id();
  const int im_start = tok.encode("<|im_start|>", SpecialTokens::kMatch).at(0);
  // Rebuild what train.bin must hold from the records that went to train (0, 1, 2, 4, 5, 6, 8,
  // ...: with F = 0.25 every 4th, 3, 7, 11, ..., goes to val).
  std::vector<int32_t> want_tokens;
  std::vector<uint8_t> want_mask;
  for (int i = 0; i < 20; ++i) {
    if (std::floor((i + 1) * 0.25) > std::floor(i * 0.25)) continue;
    std::vector<int32_t> ids = {eot};
    size_t loss_from = 0;
    if (i % 2) {
      tok.encode_append(fmt::format("Question {}: the capital?", i), ids);
      loss_from = ids.size();
      tok.encode_append(fmt::format(" Paris {}.", i), ids);
      ids.push_back(eot);  // a pair ends with end-of-text
    } else {
      tok.encode_append(fmt::format("Plain document {} <|im_start|>.", i), ids,
                        SpecialTokens::kMatch);
    }
    want_tokens.insert(want_tokens.end(), ids.begin(), ids.end());
    want_mask.insert(want_mask.end(), loss_from, 0);
    want_mask.insert(want_mask.end(), ids.size() - loss_from, 1);
  }
  const TokenShard train(r.train_path);
  ASSERT_TRUE(train.has_loss_mask());
  EXPECT_EQ(train.token_ids(), want_tokens);
  EXPECT_EQ(std::vector<uint8_t>(train.loss_mask().begin(), train.loss_mask().end()), want_mask);
  EXPECT_EQ(r.train_loss_tokens, std::count(want_mask.begin(), want_mask.end(), 1));
  EXPECT_NE(std::find(want_tokens.begin(), want_tokens.end(), im_start), want_tokens.end());
  std::ifstream meta(r.meta_path);
  EXPECT_EQ(nlohmann::json::parse(meta)["loss_mask"], true);
  EXPECT_TRUE(TokenShard(r.val_path).has_loss_mask());

  // Only text records: no mask, shards exactly as before.
  write_file(dir / "in/sft.jsonl", R"({"text": "one"})"
                                   "\n"
                                   R"({"text": "two"})"
                                   "\n");
  o.val_fraction = 0.5;
  const PrepareResult plain = prepare_corpus(o);
  EXPECT_FALSE(plain.loss_mask);
  EXPECT_FALSE(TokenShard(plain.train_path).has_loss_mask());
}

TEST(Prepare, JsonlBadRecordsNameTheLine) {
  TempDir dir;
  std::filesystem::create_directories(dir / "in");
  PrepareOptions o = quiet_options(dir);
  o.inputs = {dir / "in/x.jsonl"};
  o.doc_separator = "";
  o.format = "jsonl";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"text\": \"a\"}\n{\"text\": 3}\n", "x.jsonl line 2: \"text\" is 3, not a string"},
      {"{\"prompt\": \"q\"}\n",
       "x.jsonl line 1: a record holds \"text\" (trained on whole) or "
       "both \"prompt\" and \"completion\" (the prompt left out of the "
       "loss), not a prompt without a completion"},
      {"{\"text\": \"a\", \"prompt\": \"q\", \"completion\": \"c\"}\n", "not both kinds"},
      {"{\"title\": \"a\"}\n", "not neither"},
      {"[1]\n", "line 1: a JSONL record must be an object"},
      {"{\"text\": \"a\"\n", "line 1: not valid JSON"},
      {"{\"prompt\": \"q\", \"completion\": \"\"}\n", "line 1: the completion is empty"},
  };
  for (const auto& [text, want] : cases) {
    write_file(dir / "in/x.jsonl", text);
    const std::string msg = expected_error([&] { prepare_corpus(o); });
    EXPECT_NE(msg.find(want), std::string::npos) << "want: " << want << "\ngot: " << msg;
  }
  write_file(dir / "in/x.jsonl", "{\"text\": \"only one\"}\n");
  EXPECT_NE(expected_error([&] {
              prepare_corpus(o);
            }).find("too small to split into train and val (1 documents); give more records"),
            std::string::npos);
  o.doc_separator = "%";
  EXPECT_NE(expected_error([&] { prepare_corpus(o); }).find("drop --doc-separator"),
            std::string::npos);
  o.doc_separator = "";
  o.special_tokens = "yes";
  EXPECT_NE(expected_error([&] { prepare_corpus(o); }).find("--special-tokens yes: use text"),
            std::string::npos);
}

// A vocabulary beyond uint16 (Llama 3's 128256) cannot go into llm.c's GPT-2 shards.
// Just past uint16: the shards switch to uint32 ids (test_prepare_wide.cpp: Llama 3's sizes).
TEST(Prepare, ATokenizerTooLargeForUint16WritesUint32Shards) {
  TempDir dir;
  write_corpus(dir);
  std::ifstream in(std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/tokenizer/hf_bpe.json");
  nlohmann::json j = nlohmann::json::parse(in);
  for (int id = 1200; id < 65537; ++id) j["model"]["vocab"][fmt::format("zz{}", id)] = id;
  write_file(dir / "big.json", j.dump());
  PrepareOptions o = quiet_options(dir);
  o.tokenizer_file = dir / "big.json";
  const PrepareResult r = prepare_corpus(o);
  EXPECT_EQ(r.vocab_size, 65537);
  EXPECT_EQ(TokenShard(r.train_path).token_bytes(), 4);
  EXPECT_EQ(TokenShard(r.val_path).token_bytes(), 4);
}

TEST(Prepare, FewDocumentsSplitInsideEachDocument) {
  TempDir dir;
  std::filesystem::create_directories(dir / "in");
  std::string text;
  for (int i = 0; i < 100; ++i) text += fmt::format("line {} of the only document\n", i);
  write_file(dir / "in/one.txt", text);
  PrepareOptions o = quiet_options(dir);
  o.inputs = {dir / "in/one.txt"};
  o.doc_separator = "";
  const PrepareResult r = prepare_corpus(o);
  EXPECT_EQ(r.train_documents, 1);
  EXPECT_EQ(r.val_documents, 1);
  const Tokenizer tok = Tokenizer::load(r.tokenizer_path);
  const TokenShard train(r.train_path), val(r.val_path);
  auto text_of = [&](const TokenShard& shard) {  // without the leading <|endoftext|>
    EXPECT_EQ(shard[0], tok.eot_id());
    return tok.decode([&] {
      std::vector<int32_t> ids = shard.token_ids();
      ids.erase(ids.begin());
      return ids;
    }());
  };
  const std::string head = text_of(train), tail = text_of(val);
  EXPECT_EQ(head + tail, text);
  // Val is the last 10% of the bytes, from the next line start: lines 0-9 are shorter, so 91-99.
  EXPECT_EQ(tail.substr(0, 8), "line 91 ");
}

TEST(Prepare, MaxMbCutsTheInput) {
  TempDir dir;
  write_corpus(dir);
  PrepareOptions o = quiet_options(dir);
  o.max_mb = 1000.0 / (1024 * 1024);  // 1000 bytes, cut back to a line end
  const PrepareResult r = prepare_corpus(o);
  EXPECT_LE(r.input_bytes, 1000);
  EXPECT_GT(r.input_bytes, 900);
}

TEST(Prepare, GlobInputs) {
  TempDir dir;
  write_corpus(dir);
  PrepareOptions o = quiet_options(dir);
  o.inputs = {dir / "in/*"};
  EXPECT_EQ(prepare_corpus(o).train_documents + prepare_corpus(o).val_documents, 60);
}

TEST(Prepare, BadInputs) {
  TempDir dir;
  write_corpus(dir);
  PrepareOptions o = quiet_options(dir);
  o.inputs = {dir / "missing.txt"};
  EXPECT_NE(
      expected_error([&] { prepare_corpus(o); }).find("missing.txt: no such file or directory"),
      std::string::npos);
  o.inputs = {dir / "in/*.txt"};
  EXPECT_NE(expected_error([&] { prepare_corpus(o); }).find("no files match this pattern"),
            std::string::npos);
  o = quiet_options(dir);
  o.val_fraction = 0;
  EXPECT_NE(
      expected_error([&] { prepare_corpus(o); }).find("--val-fraction 0 must be between 0 and 1"),
      std::string::npos);
  o = quiet_options(dir);
  o.vocab_size = 100;
  EXPECT_NE(expected_error([&] { prepare_corpus(o); }).find("--vocab-size 100 is out of range"),
            std::string::npos);
  o = quiet_options(dir);
  o.gpt2_encoder = "encoder.json";
  EXPECT_NE(expected_error([&] { prepare_corpus(o); }).find("needs both files"), std::string::npos);
  o = quiet_options(dir);
  write_file(dir / "empty.txt", "  \n\n");
  o.inputs = {dir / "empty.txt"};
  EXPECT_NE(expected_error([&] { prepare_corpus(o); }).find("holds no text"), std::string::npos);
}

TEST(Prepare, SplitDocuments) {
  EXPECT_EQ(split_documents("a\n%\nb\nc\n%\n", "%"), (std::vector<std::string>{"a\n", "b\nc\n"}));
  EXPECT_EQ(split_documents("a\r\n%\r\n\n%\nb", "%"), (std::vector<std::string>{"a\r\n", "b\n"}));
  EXPECT_EQ(split_documents("a\n%\nb", ""), (std::vector<std::string>{"a\n%\nb"}));
  EXPECT_TRUE(split_documents(" \n", "").empty());
}

TEST(Prepare, UnigramEntropy) {
  EXPECT_NEAR(unigram_entropy({0, 0, 1, 1}, 4), std::log(2.0), 1e-12);
  EXPECT_NEAR(unigram_entropy({3, 3, 3}, 4), 0.0, 1e-12);
  EXPECT_NEAR(unigram_entropy({0, 1, 2, 3}, 4), std::log(4.0), 1e-12);
}

TEST(Prepare, DefaultCorpusFilesSkipIndexesLinksAndOff) {
  TempDir dir;
  write_file(dir / "zippy", "a\n%\nb\n");
  write_file(dir / "art", "c\n%\n");
  write_file(dir / "art.dat", std::string(24, '\0'));
  std::filesystem::create_symlink(dir / "art", dir / "art.u8");
  std::filesystem::create_directories(dir / "off");
  write_file(dir / "off/rude", "x\n");
  EXPECT_EQ(default_corpus_files(dir.str()),
            (std::vector<std::string>{dir / "art", dir / "zippy"}));
}

TEST(Prepare, DefaultCorpusMissing) {
  TempDir dir;
  const std::string msg = expected_error([&] { default_corpus_files(dir / "fortunes"); });
  EXPECT_NE(msg.find("install it with apt-get install fortunes"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tide
