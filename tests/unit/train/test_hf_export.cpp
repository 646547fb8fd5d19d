// `tide export`: a checkpoint (file or sharded directory) becomes a Hugging Face GPT-2 folder.
// The output is parsed here independently of tide's reader (it is plain safetensors with
// {"format": "pt"}): HF names, HF shapes (Conv1D weights transposed), f32 values equal to the
// checkpoint's master weights (or converted parameters), the same bytes whatever the source's
// sharding, GPT2Config fields; input checked before the output folder is touched; no silent
// overwrite; memory bounded by the largest transposed tensor plus the fixed buffers.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "error_of.h"
#include "test_files.h"
#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/hf_export.h"
#include "tide/checkpoint/hf_tokenizer_files.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/core/rng.h"
#include "tide/data/tokenizer.h"
#include "tide/model/layout.h"

using namespace tide;
using tide::test::error_of;
using tide::test::slurp;
using tide::test::temp_dir;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

GPTConfig small() {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;  // c_fc (128, 32): larger than the 1024-element minimum buffer
  c.vocab_size = 37;
  c.max_seq_len = 8;
  return c;
}

std::unique_ptr<ChunkStore> store_of(const GPTConfig& c, DType compute, bool with_optimizer,
                                     int group = 1) {
  ChunkLayout lay = make_layout(c);
  lay.pack(256, group);
  StoreOptions o;
  o.compute_dtype = compute;
  o.with_optimizer = with_optimizer;
  auto s = std::make_unique<ChunkStore>(std::move(lay), o);
  for (ChunkKind k : {ChunkKind::PARAM, ChunkKind::MASTER, ChunkKind::ADAM_M, ChunkKind::ADAM_V}) {
    if (!s->has(k) || (k == ChunkKind::MASTER && compute == DType::F32)) continue;
    const PhiloxStream rng{17, static_cast<uint64_t>(k)};
    uint64_t i = 0;
    for (int id = 0; id < s->layout().num_tensors(); ++id) {
      const Tensor t = s->tensor(k, id);
      for (int64_t e = 0; e < t.numel(); ++e) {
        const float v = rng.normal(i++);
        if (t.dtype == DType::F32)
          t.f32()[e] = v;
        else
          t.u16()[e] = f32_to_bf16(v * 3);  // unlike master: the export must pick master
      }
    }
  }
  return s;
}

CheckpointInfo info_of(const GPTConfig& c) {
  CheckpointInfo info;
  info.config = c;
  info.step = 10;
  return info;
}

// An exported model.safetensors, parsed.
struct HfFile {
  json header;
  std::string data;
  std::vector<float> tensor(const std::string& name) const {
    const json& e = header.at(name);
    const uint64_t b = e["data_offsets"][0], end = e["data_offsets"][1];
    if (e["dtype"] == "BF16") {  // widened
      std::vector<uint16_t> h((end - b) / 2);
      std::memcpy(h.data(), data.data() + b, end - b);
      std::vector<float> v(h.size());
      for (size_t i = 0; i < h.size(); ++i) v[i] = bf16_to_f32(h[i]);
      return v;
    }
    std::vector<float> v((end - b) / 4);
    std::memcpy(v.data(), data.data() + b, end - b);
    return v;
  }
};

HfFile parse(const std::string& path) {
  const std::string bytes = slurp(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  HfFile f{json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
  EXPECT_EQ((8 + n) % 8, 0u);
  return f;
}

// tide's values of tensor `name` of kind k as f32, in HF's layout.
std::vector<float> expected(const ChunkStore& s, ChunkKind k, const std::string& name) {
  const Tensor t = s.tensor(k, s.layout().find(name));
  std::vector<float> v(t.numel());
  for (int64_t e = 0; e < t.numel(); ++e)
    v[e] = t.dtype == DType::F32 ? t.f32()[e] : bf16_to_f32(t.u16()[e]);
  if (!hf_gpt2_transposed(name)) return v;
  const int64_t R = t.shape[0], K = t.shape[1];
  std::vector<float> tr(v.size());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < K; ++c) tr[c * R + r] = v[r * K + c];
  return tr;
}

// Every tensor of the export equals `s`'s kind k (f32, HF layout), under its HF name and shape.
void expect_export_of(const std::string& dir, const ChunkStore& s, ChunkKind k) {
  const HfFile f = parse(dir + "/model.safetensors");
  EXPECT_EQ(f.header["__metadata__"]["format"], "pt");
  EXPECT_EQ(f.header.size(), s.layout().slots().size() + 1);
  EXPECT_FALSE(f.header.contains("lm_head.weight"));
  for (const TensorSlot& slot : s.layout().slots()) {
    const std::string hf = hf_gpt2_name(slot.name);
    ASSERT_TRUE(f.header.contains(hf)) << hf;
    EXPECT_EQ(f.header[hf]["dtype"], "F32");
    std::vector<int64_t> shape = {slot.shape[0]};
    if (slot.shape.ndim == 2) shape.push_back(slot.shape[1]);
    if (hf_gpt2_transposed(slot.name)) std::swap(shape[0], shape[1]);
    EXPECT_EQ(f.header[hf]["shape"].get<std::vector<int64_t>>(), shape) << hf;
    EXPECT_EQ(f.tensor(hf), expected(s, k, slot.name)) << hf;
  }
}

}  // namespace

TEST(HfExport, NamesFollowHuggingFaceGpt2) {
  EXPECT_EQ(hf_gpt2_name("wte"), "transformer.wte.weight");
  EXPECT_EQ(hf_gpt2_name("wpe"), "transformer.wpe.weight");
  EXPECT_EQ(hf_gpt2_name("h.3.attn.c_attn.bias"), "transformer.h.3.attn.c_attn.bias");
  EXPECT_EQ(hf_gpt2_name("ln_f.weight"), "transformer.ln_f.weight");
  EXPECT_TRUE(hf_gpt2_transposed("h.0.attn.c_attn.weight"));
  EXPECT_TRUE(hf_gpt2_transposed("h.11.mlp.c_proj.weight"));
  EXPECT_FALSE(hf_gpt2_transposed("h.0.attn.c_attn.bias"));
  EXPECT_FALSE(hf_gpt2_transposed("wte"));
  const json cfg = hf_gpt2_config(GPTConfig::preset("gpt2-124m"));
  EXPECT_EQ(cfg["model_type"], "gpt2");
  EXPECT_EQ(cfg["activation_function"], "gelu_new");
  EXPECT_EQ(cfg["n_positions"], 1024);
  EXPECT_EQ(cfg["vocab_size"], 50257);
  EXPECT_EQ(cfg["tie_word_embeddings"], true);
  EXPECT_EQ(cfg["eos_token_id"], 50256);
}

TEST(HfExport, SingleFileAndShardedGiveTheSameFileOfTheMasterWeights) {
  const GPTConfig c = small();
  const std::string d = temp_dir("same");
  const auto whole = store_of(c, DType::BF16, true, 3);
  save_checkpoint(d + "/one.ckpt", *whole, info_of(c), true);
  for (int r = 0; r < 3; ++r) save_checkpoint_shard(d + "/sharded", *whole, info_of(c), true, r, 3);
  commit_sharded_checkpoint(d + "/sharded", 3);

  HfExportOptions o;
  o.buffer_bytes = 64;  // the 1024-element minimum: transposes go in several row batches
  int lines = 0;
  o.progress = [&](const std::string&) { ++lines; };
  const HfExportResult r1 = export_hf(d + "/one.ckpt", d + "/hf1", o);
  const HfExportResult r2 = export_hf(d + "/sharded", d + "/hf2", o);
  expect_export_of(d + "/hf1", *whole, ChunkKind::MASTER);
  EXPECT_EQ(slurp(d + "/hf1/model.safetensors"), slurp(d + "/hf2/model.safetensors"));
  EXPECT_EQ(r1.source, "master weights (f32)");
  EXPECT_EQ(r2.tensors, make_layout(c).num_tensors());
  EXPECT_EQ(r2.file_bytes, fs::file_size(d + "/hf2/model.safetensors"));
  // Memory: the largest transposed tensor (c_fc, 4C x C) in f32 and two 1024-element buffers.
  EXPECT_EQ(r2.buffer_bytes, uint64_t(4 * 32 * 32) * 4 + 2 * 1024 * 4);
  EXPECT_GE(lines, 5);
  const json cfg = json::parse(slurp(d + "/hf2/config.json"));
  EXPECT_EQ(cfg["n_layer"], 2);
  EXPECT_EQ(cfg["n_embd"], 32);
  EXPECT_EQ(cfg["n_ctx"], 8);
  EXPECT_EQ(cfg["architectures"][0], "GPT2LMHeadModel");
}

// --dtype bf16: every tensor is the f32 export's rounded to nearest-even (the conversion in
// buffer-sized pieces, transposes included), BF16 in the header, torch_dtype bfloat16, and the
// tensor data half the f32 file's.
TEST(HfExport, Bf16FileIsTheF32ExportRounded) {
  const GPTConfig c = small();
  const std::string d = temp_dir("bf16_out");
  const auto whole = store_of(c, DType::BF16, true);
  save_checkpoint(d + "/m.ckpt", *whole, info_of(c), true);
  HfExportOptions o;
  o.buffer_bytes = 64;  // 1024-element buffers: the 4096-element transposes in 4 pieces
  const HfExportResult f32 = export_hf(d + "/m.ckpt", d + "/f32", o);
  o.dtype = DType::BF16;
  const HfExportResult bf16 = export_hf(d + "/m.ckpt", d + "/bf16", o);
  const HfFile a = parse(d + "/f32/model.safetensors"), b = parse(d + "/bf16/model.safetensors");
  for (const TensorSlot& slot : whole->layout().slots()) {
    const std::string hf = hf_gpt2_name(slot.name);
    EXPECT_EQ(b.header[hf]["dtype"], "BF16") << hf;
    EXPECT_EQ(b.header[hf]["shape"], a.header[hf]["shape"]) << hf;
    const std::vector<float> want = a.tensor(hf), got = b.tensor(hf);
    ASSERT_EQ(got.size(), want.size()) << hf;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(f32_to_bf16(got[i]), f32_to_bf16(want[i])) << hf << " [" << i << "]";
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(got[i], bf16_to_f32(f32_to_bf16(want[i]))) << hf << " [" << i << "]";
  }
  EXPECT_EQ(2 * b.data.size(), a.data.size());
  EXPECT_EQ(bf16.file_bytes, fs::file_size(d + "/bf16/model.safetensors"));
  EXPECT_EQ(json::parse(slurp(d + "/bf16/config.json"))["torch_dtype"], "bfloat16");
  EXPECT_EQ(json::parse(slurp(d + "/f32/config.json"))["torch_dtype"], "float32");
  EXPECT_EQ(f32.source, bf16.source);
  o.dtype = DType::F16;
  EXPECT_NE(error_of([&] { export_hf(d + "/m.ckpt", d + "/f16", o); }).find("use f32 or bf16"),
            std::string::npos);
}

TEST(HfExport, F32ParametersAndBf16ParametersWithoutMaster) {
  const GPTConfig c = small();
  const std::string d = temp_dir("params");
  const auto f32 = store_of(c, DType::F32, true);
  save_checkpoint(d + "/f32.ckpt", *f32, info_of(c), true);
  EXPECT_EQ(export_hf(d + "/f32.ckpt", d + "/a").source, "parameters (f32)");
  expect_export_of(d + "/a", *f32, ChunkKind::PARAM);

  const auto bf16 = store_of(c, DType::BF16, false);
  for (int r = 0; r < 2; ++r) {
    ChunkLayout lay = make_layout(c);
    lay.pack(100, 2);
    StoreOptions o;
    o.compute_dtype = DType::BF16;
    o.with_optimizer = false;
    ChunkStore s(std::move(lay), o);
    for (int id = 0; id < s.layout().num_tensors(); ++id) {
      const Tensor t = s.tensor(ChunkKind::PARAM, id);
      std::memcpy(t.data, bf16->tensor(ChunkKind::PARAM, id).data, t.nbytes());
    }
    save_checkpoint_shard(d + "/bf16", s, info_of(c), false, r, 2);
  }
  commit_sharded_checkpoint(d + "/bf16", 2);
  EXPECT_EQ(export_hf(d + "/bf16", d + "/b").source, "parameters (bf16)");
  expect_export_of(d + "/b", *bf16, ChunkKind::PARAM);
}

TEST(HfExport, ChecksInputFirstAndNeverOverwritesSilently) {
  const GPTConfig c = small();
  const std::string d = temp_dir("checks");
  const auto s = store_of(c, DType::F32, false);
  save_checkpoint(d + "/m.ckpt", *s, info_of(c));
  // A damaged checkpoint: refused, the output folder never created.
  std::string bytes = slurp(d + "/m.ckpt");
  bytes[bytes.size() - 3] ^= 1;
  std::ofstream(d + "/bad.ckpt", std::ios::binary) << bytes;
  EXPECT_NE(error_of([&] { export_hf(d + "/bad.ckpt", d + "/out"); }).find("checksum mismatch"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(d + "/out"));
  EXPECT_NE(error_of([&] { export_hf(d + "/nothing", d + "/out"); }).find("cannot open"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(d + "/out"));

  export_hf(d + "/m.ckpt", d + "/out");
  const std::string first = slurp(d + "/out/model.safetensors");
  EXPECT_NE(error_of([&] { export_hf(d + "/m.ckpt", d + "/out"); }).find("--overwrite"),
            std::string::npos);
  HfExportOptions o;
  o.overwrite = true;
  export_hf(d + "/m.ckpt", d + "/out", o);
  EXPECT_EQ(slurp(d + "/out/model.safetensors"), first);
  int files = 0;
  for (const auto& e : fs::directory_iterator(d + "/out")) files += e.is_regular_file();
  EXPECT_EQ(files, 2);  // no temporaries left
}

namespace {
std::string english(int repeats) {
  std::string s;
  for (int i = 0; i < repeats; ++i)
    s += "the quick brown fox jumps over the lazy dog, and the dog sleeps in the sun. ";
  return s;
}
}  // namespace

// The tokenizer files of an export (hf_tokenizer_files.h): tokenizer.json is the run's BPE with
// <|endoftext|> put before the text by its post-processor, which tide itself reads back with the
// same encoding; bos/eos/pad name <|endoftext|> everywhere; a tokenizer larger than the model's
// vocabulary is refused.
TEST(HfTokenizerFiles, BosFirstTemplateAndSpecialTokens) {
  const std::string dir = temp_dir("hf_tokenizer_files");
  const Tokenizer tok = Tokenizer::train(english(20), 300);
  GPTConfig c = small();
  c.vocab_size = tok.vocab_size();
  const HfTokenizerFiles f = hf_tokenizer_files(tok, c, "t.json");
  const json j = json::parse(f.tokenizer_json);
  const std::string eot(Tokenizer::kEndOfText);
  EXPECT_EQ(j["post_processor"]["type"], "TemplateProcessing");
  EXPECT_EQ(j["post_processor"]["single"][0]["SpecialToken"]["id"], eot);
  EXPECT_EQ(j["post_processor"]["single"][1]["Sequence"]["id"], "A");
  EXPECT_EQ(j["post_processor"]["special_tokens"][eot]["ids"], json::array({tok.eot_id()}));
  EXPECT_EQ(j["model"], json::parse(tok.to_hf_json())["model"]);  // the same BPE
  std::ofstream(dir + "/tokenizer.json") << f.tokenizer_json;
  EXPECT_EQ(Tokenizer::load(dir + "/tokenizer.json").encode(english(2)), tok.encode(english(2)));
  const json cfg = json::parse(f.tokenizer_config);
  EXPECT_EQ(cfg["tokenizer_class"], "GPT2Tokenizer");
  EXPECT_EQ(cfg["bos_token"], eot);
  EXPECT_EQ(cfg["eos_token"], eot);
  EXPECT_EQ(cfg["clean_up_tokenization_spaces"], false);
  EXPECT_EQ(json::parse(f.special_tokens_map)["eos_token"]["content"], eot);
  const json gen = json::parse(f.generation_config);
  EXPECT_EQ(gen["bos_token_id"], tok.eot_id());
  EXPECT_EQ(gen["eos_token_id"], tok.eot_id());
  EXPECT_EQ(hf_gpt2_config(c, tok.eot_id())["eos_token_id"], tok.eot_id());
  c.vocab_size = tok.vocab_size() - 1;
  const std::string want = "tokenizer 't.json' has " + std::to_string(tok.vocab_size()) +
                           " tokens but the model's vocab_size is " + std::to_string(c.vocab_size);
  EXPECT_NE(error_of([&] { hf_tokenizer_files(tok, c, "t.json"); }).find(want), std::string::npos);
}
