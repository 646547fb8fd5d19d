// Inputs the fuzzers (tests/fuzz) found that escaped as something other than a tide::Error or
// hit undefined behaviour; each must now be one clear tide::Error. The same inputs sit in
// tests/fuzz/corpus/<target>/crash_* and are replayed under the sanitizers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "error_of.h"
#include "tide/data/tokenizer.h"
#include "tide/model/config.h"
#include "tide/train/config.h"

using namespace tide;
using tide::test::error_of;
namespace fs = std::filesystem;

namespace {

std::string file_with(const std::string& name, const std::string& text) {
  const fs::path dir = fs::path(TIDE_BINARY_DIR) / "test_tmp" / "fuzz_regressions";
  fs::create_directories(dir);
  const fs::path p = dir / name;
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

}  // namespace

TEST(FuzzRegressions, OverrideIntoASectionThatIsNotAnObject) {
  const std::string path = file_with("section.json", R"({"optimizer": 1})");
  const std::string msg = error_of([&] { load_train_config(path, {"optimizer.params.lr=1"}); });
  EXPECT_NE(msg.find("'optimizer' is 1 in the config file"), std::string::npos) << msg;
}

TEST(FuzzRegressions, ConfigFileThatIsNotAnObject) {
  const std::string path = file_with("array.json", "[1]");
  const std::string msg = error_of([&] { load_train_config(path, {"seed=1"}); });
  EXPECT_NE(msg.find("holds a JSON array, not an object"), std::string::npos) << msg;
}

TEST(FuzzRegressions, OverrideValueThatIsNotUtf8) {
  const std::string msg = error_of([&] { load_train_config("", {"bf16.enabled=fals\x96"}); });
  EXPECT_NE(msg.find("not valid UTF-8"), std::string::npos) << msg;
}

TEST(FuzzRegressions, TokenizerFieldsOfAnotherType) {
  for (const char* text : {R"({"format": 1})", R"({"format": "tide-bpe", "version": "1"})"}) {
    const std::string path = file_with("tokenizer.json", text);
    EXPECT_NE(error_of([&] { Tokenizer::load(path); }), "") << text;
  }
}

TEST(FuzzRegressions, ModelTooLargeToCountIsRefused) {
  GPTConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 2147483646;
  c.vocab_size = 8;
  c.max_seq_len = 4;
  EXPECT_NE(error_of([&] { c.validate(); }).find("more than tide can count"), std::string::npos);
  EXPECT_NE(c.str().find("C=2147483646"), std::string::npos);  // no overflow in messages
}

TEST(FuzzRegressions, NumberTooLargeForADoubleIsInvalidJson) {
  // nlohmann::json throws out_of_range (not parse_error) for 1e999.
  const std::string config = file_with("big.json", R"({"seq_len": 8e22222})");
  EXPECT_NE(error_of([&] { load_train_config(config, {}); }).find("not valid JSON"),
            std::string::npos);
  const std::string tok = file_with("big_tokenizer.json", R"({"format": "tide-bpe", "v": 1e999})");
  EXPECT_NE(error_of([&] { Tokenizer::load(tok); }).find("not valid JSON"), std::string::npos);
}
