// Inputs the fuzzers (tests/fuzz) found that escaped as something other than a tide::Error or
// hit undefined behaviour; each must now be one clear tide::Error. The same inputs sit in
// tests/fuzz/corpus/<target>/crash_* and are replayed under the sanitizers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "error_of.h"
#include "tide/checkpoint/hf_import.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/config/config.h"
#include "tide/data/tokenizer.h"
#include "tide/model/config.h"

using namespace tide;
using tide::test::error_of;
namespace fs = std::filesystem;

namespace {

std::string file_with(const std::string& name, const std::string& text) {
  const fs::path dir = fs::path(TIDE_BINARY_DIR) / "test_tmp" / "fuzz_regressions";
  const fs::path p = dir / name;
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

// tests/fuzz/corpus/<target>/<name>.
std::string corpus_input(const std::string& target, const std::string& name) {
  std::ifstream f(fs::path(TIDE_SOURCE_DIR) / "tests/fuzz/corpus" / target / name,
                  std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A Hugging Face folder from an hf_import input (u32 length, config.json, model.safetensors).
std::string hf_folder_of(const std::string& name, const std::string& input) {
  uint32_t n = 0;
  for (int i = 3; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(input[i]);
  file_with(name + "/config.json", input.substr(4, n));
  file_with(name + "/model.safetensors", input.substr(4 + n));
  return (fs::path(TIDE_BINARY_DIR) / "test_tmp" / "fuzz_regressions" / name).string();
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

TEST(FuzzRegressions, HfConfigWhoseMlpWidthOverflowsAnInt) {
  // 4 * n_embd was computed in int (UB) to compare n_inner with it.
  const std::string dir =
      hf_folder_of("hf_n_inner", corpus_input("hf_import", "crash_n_inner_overflow"));
  EXPECT_NE(error_of([&] { import_hf_gpt2(dir, dir + "/out.ckpt"); })
                .find("'n_inner' is 5; tide cannot represent it (its MLP is 4 * n_embd = "
                      "4294967296 wide)"),
            std::string::npos);
}

TEST(FuzzRegressions, HfConfigOfMoreLayersThanTheFileHolds) {
  // n_layer 10^8 built the model's layout (1.2e9 tensors) before any tensor was compared.
  const std::string dir =
      hf_folder_of("hf_n_layer", corpus_input("hf_import", "crash_n_layer_beyond_the_file"));
  EXPECT_NE(
      error_of([&] { import_hf_gpt2(dir, dir + "/out.ckpt"); }).find("'n_layer' is 100000000 but"),
      std::string::npos);
}

TEST(FuzzRegressions, ShardedIndexOfMoreLayersThanItsWeightMapLists) {
  // The same in a sharded checkpoint's index.json: the layout was built before the map was read.
  file_with("sharded/index.json",
            corpus_input("sharded_index", "crash_n_layer_beyond_the_map.json"));
  const std::string dir =
      (fs::path(TIDE_BINARY_DIR) / "test_tmp" / "fuzz_regressions" / "sharded").string();
  EXPECT_NE(error_of([&] {
              read_sharded_checkpoint_info(dir);
            }).find("'model.n_layer' is 100000000 but 'weight_map' lists only 0 tensors"),
            std::string::npos);
}
