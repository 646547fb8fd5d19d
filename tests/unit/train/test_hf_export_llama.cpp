// `tide export` of the Llama family against transformers' own files: transformers'
// LlamaForCausalLM (GQA, untied head, llama3 RoPE, sharded) and Qwen2ForCausalLM (q/k/v bias,
// tied head) folders (tests/fixtures/hf_{llama,qwen2}_tiny, tools/gen_hf_llama_fixture.py) are
// imported and exported again: every exported tensor equals transformers' tensor of that name
// bit for bit (the q/k/v and gate/up splits, the names, the left-out tied head), config.json
// gives the same tide model, and import(export(x)) == x bitwise. (cli.export_llama runs the
// exported folders of trained models in transformers.)
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/hf_export.h"
#include "tide/checkpoint/hf_import.h"
#include "tide/checkpoint/hf_tokenizer_files.h"
#include "tide/checkpoint/safetensors.h"
#include "tide/core/dtype.h"
#include "tide/data/tokenizer.h"
#include "tide/model/gpt.h"

using namespace tide;
namespace fs = std::filesystem;

namespace {

// Every tensor of every .safetensors file in `dir`, widened to f32, by name.
std::map<std::string, std::vector<float>> read_folder(const fs::path& dir) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& f : fs::directory_iterator(dir)) {
    if (f.path().extension() != ".safetensors") continue;
    const SafetensorsReader r(f.path().string(), "safetensors file", ForeignSafetensors{});
    for (const SafetensorsEntry& e : r.entries()) out[e.name] = r.read_as_f32(e);
  }
  return out;
}

// The parameters of a checkpoint, by tide name.
std::map<std::string, std::vector<float>> read_params(const std::string& ckpt) {
  const CheckpointInfo info = read_checkpoint_info(ckpt);
  GPT model(info.config, ActivationPolicy::SAVE_ALL, 0, /*with_optimizer=*/false);
  load_checkpoint(ckpt, model);
  std::map<std::string, std::vector<float>> out;
  const ChunkStore& store = model.store();
  for (int id = 0; id < store.layout().num_tensors(); ++id) {
    const Tensor t = store.tensor(ChunkKind::PARAM, id);
    out[store.layout().slot(id).name].assign(t.f32(), t.f32() + t.numel());
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / fmt::format("tide_hf_export_llama_{}", ::getpid());
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST(HfExportLlama, TransformersFilesRoundTripBitwise) {
  TempDir tmp;
  for (const char* kind : {"llama", "qwen2"}) {
    const fs::path fixture =
        fs::path(TIDE_SOURCE_DIR) / "tests/fixtures" / fmt::format("hf_{}_tiny", kind);
    const fs::path d = tmp.path / kind;
    fs::create_directories(d);
    const std::string x = (d / "x.ckpt").string(), y = (d / "y.ckpt").string();
    const HfImportResult imported = import_hf_gpt2(fixture.string(), x);
    HfExportOptions o;
    const HfExportResult exported = export_hf(x, (d / "hf").string(), o);
    EXPECT_EQ(exported.architecture,
              std::string(kind) == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM");

    // 1. transformers' tensors, bit for bit, under their names (the tied head left out, as
    //    transformers leaves it out).
    const auto want = read_folder(fixture), got = read_folder(d / "hf");
    ASSERT_EQ(got.size(), want.size()) << kind;
    for (const auto& [name, values] : want) {
      ASSERT_TRUE(got.contains(name)) << kind << ": no " << name;
      EXPECT_TRUE(same_bits(got.at(name), values)) << kind << ": " << name;
    }

    // 2. config.json gives the same model.
    std::ifstream cfg(d / "hf/config.json");
    const GPTConfig back = llama_config_from_hf(nlohmann::json::parse(cfg), "exported config");
    const GPTConfig& c = imported.config;
    EXPECT_EQ(back.str(), c.str()) << kind;
    EXPECT_EQ(back.n_kv_head, c.n_kv_head);
    EXPECT_EQ(back.intermediate_size, c.intermediate_size);
    EXPECT_EQ(back.qkv_bias, c.qkv_bias);
    EXPECT_EQ(back.tie_word_embeddings, c.tie_word_embeddings);
    EXPECT_EQ(back.rope_theta, c.rope_theta);
    EXPECT_EQ(back.rms_norm_eps, c.rms_norm_eps);
    EXPECT_EQ(back.rope_scaling, c.rope_scaling);
    EXPECT_EQ(back.rope_factor, c.rope_factor);
    EXPECT_EQ(back.rope_low_freq_factor, c.rope_low_freq_factor);
    EXPECT_EQ(back.rope_high_freq_factor, c.rope_high_freq_factor);
    EXPECT_EQ(back.rope_original_max_position_embeddings, c.rope_original_max_position_embeddings);
    EXPECT_EQ(back.max_seq_len, c.max_seq_len);

    // 3. import(export(x)) == x.
    import_hf_gpt2((d / "hf").string(), y);
    const auto px = read_params(x), py = read_params(y);
    ASSERT_EQ(px.size(), py.size());
    for (const auto& [name, values] : px)
      EXPECT_TRUE(same_bits(py.at(name), values)) << kind << ": " << name;

    // 4. --dtype bf16: the same tensors rounded to nearest-even.
    o.dtype = DType::BF16;
    export_hf(x, (d / "bf16").string(), o);
    const auto half = read_folder(d / "bf16");
    for (const auto& [name, values] : want) {
      std::vector<float> rounded(values.size());
      for (size_t i = 0; i < values.size(); ++i) rounded[i] = bf16_to_f32(f32_to_bf16(values[i]));
      EXPECT_TRUE(same_bits(half.at(name), rounded)) << kind << " bf16: " << name;
    }
  }
}

TEST(HfExportLlama, NamesAndRowsOfTheFusedTensors) {
  GPTConfig c;
  c.family = ModelFamily::llama;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.intermediate_size = 48;
  c.vocab_size = 100;
  c.max_seq_len = 16;
  const auto qkv = hf_llama_tensors(c, "h.1.self_attn.qkv_proj.weight");
  ASSERT_EQ(qkv.size(), 3u);
  EXPECT_EQ(qkv[0].hf_name, "model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(qkv[1].hf_name, "model.layers.1.self_attn.k_proj.weight");
  EXPECT_EQ(qkv[2].hf_name, "model.layers.1.self_attn.v_proj.weight");
  EXPECT_EQ(qkv[0].row_end, 32);  // 4 heads of 8
  EXPECT_EQ(qkv[1].row_begin, 32);
  EXPECT_EQ(qkv[1].row_end, 48);  // 2 kv heads of 8
  EXPECT_EQ(qkv[2].row_end, 64);
  const auto gate_up = hf_llama_tensors(c, "h.0.mlp.gate_up_proj.weight");
  ASSERT_EQ(gate_up.size(), 2u);
  EXPECT_EQ(gate_up[0].hf_name, "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(gate_up[1].hf_name, "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(gate_up[1].row_begin, 48);
  EXPECT_EQ(hf_llama_tensors(c, "ln_f.weight")[0].hf_name, "model.norm.weight");
  EXPECT_EQ(hf_llama_tensors(c, "output.weight")[0].hf_name, "lm_head.weight");
  EXPECT_EQ(hf_llama_model_type(c, ""), "llama");
  EXPECT_EQ(hf_llama_model_type(c, "mistral"), "mistral");
  c.qkv_bias = true;
  EXPECT_EQ(hf_llama_model_type(c, ""), "qwen2");
  EXPECT_THROW(hf_llama_model_type(c, "llama"), Error);
  EXPECT_THROW(hf_llama_model_type(c, "gemma"), Error);
}

// A Llama-3-style tokenizer.json (tests/fixtures/tokenizer, made with HF tokenizers) is
// exported as it was, for PreTrainedTokenizerFast: bos <|begin_of_text|> (what tide puts before
// a document), eos <|end_of_text|> (where tide sample stops).
TEST(HfExportLlama, Llama3StyleTokenizerFilesForTheFastTokenizer) {
  const std::string path =
      std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/tokenizer/llama3_style.json";
  const Tokenizer tok = Tokenizer::load(path);
  GPTConfig c;
  c.family = ModelFamily::llama;
  c.vocab_size = tok.vocab_size();
  c.max_seq_len = 64;
  const HfTokenizerFiles f = hf_tokenizer_files(tok, c, path);
  std::ifstream in(path);
  const std::string original((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  EXPECT_EQ(f.tokenizer_json, original);
  const nlohmann::json cfg = nlohmann::json::parse(f.tokenizer_config);
  EXPECT_EQ(cfg["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(cfg["bos_token"], "<|begin_of_text|>");
  EXPECT_EQ(cfg["eos_token"], "<|end_of_text|>");
  EXPECT_EQ(cfg["model_max_length"], 64);
  const nlohmann::json gen = nlohmann::json::parse(f.generation_config);
  EXPECT_EQ(gen["bos_token_id"], 1203);
  EXPECT_EQ(gen["eos_token_id"], 1204);
  EXPECT_EQ(nlohmann::json::parse(f.special_tokens_map)["bos_token"], "<|begin_of_text|>");
}
