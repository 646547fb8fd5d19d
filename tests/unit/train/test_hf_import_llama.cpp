// `tide import` of the Llama family: transformers' own LlamaForCausalLM (sharded, untied head,
// llama3 RoPE) and Qwen2ForCausalLM (q/k/v bias, tied head) folders
// (tests/fixtures/hf_{llama,qwen2}_tiny, tools/gen_hf_llama_fixture.py) become checkpoints
// whose model computes transformers' loss; config fields tide cannot represent are refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/hf_import.h"
#include "tide/model/gpt.h"

using namespace tide;
namespace fs = std::filesystem;

namespace {

std::string hf_llama_fixture(const std::string& name) {
  return std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/" + name;
}

nlohmann::json hf_llama_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

std::string hf_llama_error(const nlohmann::json& hf) {
  try {
    llama_config_from_hf(hf, "config 'x'");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(HfImportLlama, ImportedModelsComputeTransformersLoss) {
  const nlohmann::json want = hf_llama_json(hf_llama_fixture("hf_llama_tiny_loss.json"));
  const fs::path dir = fs::temp_directory_path() / fmt::format("tide_hf_llama_{}", ::getpid());
  fs::create_directories(dir);
  for (const char* kind : {"llama", "qwen2"}) {
    const std::string out = (dir / fmt::format("{}.ckpt", kind)).string();
    const HfImportResult r = import_hf_gpt2(hf_llama_fixture(fmt::format("hf_{}_tiny", kind)), out);
    const GPTConfig& c = r.config;
    EXPECT_TRUE(c.is_llama()) << kind;
    EXPECT_EQ(c.n_kv_head, 2) << kind;
    EXPECT_EQ(c.qkv_bias, std::string(kind) == "qwen2");
    EXPECT_EQ(c.tie_word_embeddings, std::string(kind) == "qwen2");
    EXPECT_EQ(c.rope_scaling == RopeScaling::llama3, std::string(kind) == "llama");
    GPT model(c, ActivationPolicy::SAVE_ALL, 0, /*with_optimizer=*/false);
    load_checkpoint(out, model, /*with_optimizer_state=*/false);
    const auto& tokens = want[kind]["tokens"];
    const int B = static_cast<int>(tokens.size()), T = static_cast<int>(tokens[0].size()) - 1;
    auto mb = model.make_micro_batch(B, T, nullptr, /*training=*/false);
    mb->training = false;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        mb->tokens.i32()[b * T + t] = tokens[b][t];
        mb->targets.i32()[b * T + t] = tokens[b][t + 1];
      }
    const double loss = model.forward(*mb), ref = want[kind]["loss"];
    EXPECT_NEAR(loss, ref, 1e-6 * ref) << kind;
    std::printf("%s: imported %d tensors (%s), loss %.9f, transformers f64 %.9f\n", kind, r.tensors,
                r.source_dtype.c_str(), loss, ref);
  }
  fs::remove_all(dir);
}

TEST(HfImportLlama, RefusesWhatTideCannotRepresent) {
  const nlohmann::json base = hf_llama_json(hf_llama_fixture("hf_llama_tiny/config.json"));
  EXPECT_EQ(hf_llama_error(base), "no error");
  auto with = [&](const char* key, const nlohmann::json& v) {
    nlohmann::json j = base;
    j[key] = v;
    return hf_llama_error(j);
  };
  EXPECT_NE(with("hidden_act", "gelu").find("'hidden_act'"), std::string::npos);
  EXPECT_NE(with("attention_bias", true).find("'attention_bias'"), std::string::npos);
  EXPECT_NE(with("head_dim", 16).find("'head_dim'"), std::string::npos);
  EXPECT_NE(with("num_key_value_heads", 3).find("n_kv_head"), std::string::npos);
  nlohmann::json yarn = base;
  yarn["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_NE(hf_llama_error(yarn).find("yarn"), std::string::npos);
  // Mistral's sliding window caps the positions (attention is the same inside it).
  nlohmann::json mistral = base;
  mistral["model_type"] = "mistral";
  mistral["sliding_window"] = 32;
  EXPECT_EQ(llama_config_from_hf(mistral, "x").max_seq_len, 32);
}
