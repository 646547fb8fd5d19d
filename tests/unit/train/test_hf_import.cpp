// `tide import`: the committed Hugging Face fixture (tests/fixtures/hf_gpt2_tiny, written by
// transformers via tools/gen_hf_fixture.py) becomes a tide checkpoint, and `tide export` of it
// gives back the fixture's tensors bit for bit (names, dtypes, shapes, bytes). Files are parsed
// here independently of tide's reader. Refusals (missing config, unsupported config fields,
// shape mismatch, damaged file, untied head) are one error and create nothing. init_from loads
// exactly the checkpoint's parameters, whole or as a ZeRO-3 rank's slice.
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
#include "tide/checkpoint/hf_import.h"
#include "tide/checkpoint/init_from.h"
#include "tide/model/gpt.h"
#include "tide/model/layout.h"
#include "tide/parallel/zero.h"

using namespace tide;
using tide::test::error_of;
using tide::test::slurp;
using tide::test::temp_dir;
namespace fs = std::filesystem;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

const std::string kFixture = std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/hf_gpt2_tiny";

void put(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A safetensors file, parsed: name -> (dtype, shape, bytes).
struct Tensors {
  std::map<std::string, std::tuple<std::string, json, std::string>> t;
};

Tensors parse(const std::string& path) {
  const std::string bytes = slurp(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  const json h = json::parse(bytes.substr(8, n));
  Tensors out;
  for (const auto& [name, e] : h.items()) {
    if (name == "__metadata__") continue;
    const uint64_t b = e["data_offsets"][0], end = e["data_offsets"][1];
    out.t[name] = {e["dtype"], e["shape"], bytes.substr(8 + n + b, end - b)};
  }
  return out;
}

// Writes `t` as a plain safetensors file (HF style, {"format": "pt"}).
void write_plain(const std::string& path, const Tensors& t) {
  ojson h = ojson::object();
  h["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const auto& [name, v] : t.t) {
    const auto& [dtype, shape, bytes] = v;
    h[name] = {{"dtype", dtype},
               {"shape", shape},
               {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data += bytes;
  }
  std::string text = h.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(text.size() >> (8 * i));
  put(path, out + text + data);
}

// A copy of the fixture folder to damage.
std::string copy_fixture(const std::string& name) {
  const std::string d = temp_dir(name) + "/hf";
  fs::create_directories(d);
  fs::copy_file(kFixture + "/config.json", d + "/config.json");
  fs::copy_file(kFixture + "/model.safetensors", d + "/model.safetensors");
  return d;
}

void edit_config(const std::string& dir, const std::function<void(json&)>& f) {
  json c = json::parse(slurp(dir + "/config.json"));
  f(c);
  put(dir + "/config.json", c.dump(2));
}

// The error importing `dir` gives; checks that nothing was created.
std::string import_error(const std::string& dir) {
  const std::string out = fs::path(dir).parent_path().string() + "/out/model.ckpt";
  const std::string e = error_of([&] { import_hf_gpt2(dir, out); });
  EXPECT_FALSE(fs::exists(fs::path(out).parent_path())) << "a refused import created " << out;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  return e;
}

}  // namespace

TEST(HfImport, RoundTripThroughTideIsBitwise) {
  const std::string d = temp_dir("round_trip");
  const HfImportResult r = import_hf_gpt2(kFixture, d + "/model.ckpt");
  EXPECT_EQ(r.config.n_layer, 2);
  EXPECT_EQ(r.config.n_embd, 24);
  EXPECT_EQ(r.config.vocab_size, 64);
  EXPECT_EQ(r.config.max_seq_len, 32);
  EXPECT_EQ(r.tensors, make_layout(r.config).num_tensors());
  EXPECT_EQ(r.source_dtype, "F32");
  const CheckpointInfo info = read_checkpoint_info(d + "/model.ckpt");
  EXPECT_FALSE(info.optimizer_state);
  EXPECT_EQ(info.step, 0);

  export_hf(d + "/model.ckpt", d + "/hf");
  const Tensors a = parse(kFixture + "/model.safetensors"), b = parse(d + "/hf/model.safetensors");
  ASSERT_EQ(a.t.size(), b.t.size());
  for (const auto& [name, v] : a.t) {
    ASSERT_TRUE(b.t.contains(name)) << name;
    EXPECT_EQ(std::get<0>(v), std::get<0>(b.t.at(name))) << name;
    EXPECT_EQ(std::get<1>(v), std::get<1>(b.t.at(name))) << name;
    EXPECT_TRUE(std::get<2>(v) == std::get<2>(b.t.at(name))) << name << ": bytes differ";
  }
  // The exported config is the fixture's model.
  const json hf = json::parse(slurp(d + "/hf/config.json"));
  const json fx = json::parse(slurp(kFixture + "/config.json"));
  for (const char* k : {"n_layer", "n_head", "n_embd", "vocab_size", "n_positions",
                        "activation_function", "layer_norm_epsilon", "tie_word_embeddings"})
    EXPECT_EQ(hf[k], fx[k]) << k;
}

TEST(HfImport, TransposesConv1DWeights) {
  const std::string d = temp_dir("transpose");
  const HfImportResult r = import_hf_gpt2(kFixture, d + "/model.ckpt");
  GPT model(r.config, ActivationPolicy::SAVE_ALL, 0, false);
  load_checkpoint(d + "/model.ckpt", model);
  const Tensors hf = parse(kFixture + "/model.safetensors");
  const std::string& raw = std::get<2>(hf.t.at("transformer.h.1.mlp.c_fc.weight"));  // (C, 4C)
  const int C = r.config.n_embd;
  const Tensor t =
      model.store().tensor(ChunkKind::PARAM, model.store().layout().find("h.1.mlp.c_fc.weight"));
  ASSERT_EQ(t.shape, (Shape{4 * C, C}));
  for (int o = 0; o < 4 * C; ++o)
    for (int i = 0; i < C; ++i) {
      float v;
      std::memcpy(&v, raw.data() + (static_cast<size_t>(i) * 4 * C + o) * 4, 4);
      ASSERT_EQ(t.f32()[o * C + i], v) << o << "," << i;
    }
}

TEST(HfImport, AcceptsUnprefixedNamesBuffersAndAnEqualLmHead) {
  const std::string d = copy_fixture("unprefixed");
  Tensors t = parse(d + "/model.safetensors"), u;
  for (const auto& [name, v] : t.t) u.t[name.substr(std::string("transformer.").size())] = v;
  u.t["h.0.attn.bias"] = {"F32", json::array({1, 1, 2, 2}), std::string(16, '\0')};
  u.t["lm_head.weight"] = u.t.at("wte.weight");
  write_plain(d + "/model.safetensors", u);
  const std::string out = fs::path(d).parent_path().string() + "/model.ckpt";
  const HfImportResult r = import_hf_gpt2(d, out);
  EXPECT_EQ(r.ignored.size(), 2u);
  export_hf(out, fs::path(d).parent_path().string() + "/back");
  const Tensors back = parse(fs::path(d).parent_path().string() + "/back/model.safetensors");
  for (const auto& [name, v] : t.t) EXPECT_TRUE(std::get<2>(v) == std::get<2>(back.t.at(name)));
}

TEST(HfImport, WidensBf16) {
  const std::string d = copy_fixture("bf16");
  Tensors t = parse(d + "/model.safetensors");
  for (auto& [name, v] : t.t) {  // truncate each f32 to its top 16 bits
    std::string& bytes = std::get<2>(v);
    std::string half(bytes.size() / 2, '\0');
    for (size_t i = 0; i < half.size() / 2; ++i) std::memcpy(&half[2 * i], &bytes[4 * i + 2], 2);
    std::get<0>(v) = "BF16";
    bytes = half;
  }
  write_plain(d + "/model.safetensors", t);
  const std::string out = fs::path(d).parent_path().string() + "/model.ckpt";
  const HfImportResult r = import_hf_gpt2(d, out);
  EXPECT_EQ(r.source_dtype, "BF16 (widened to f32)");
  GPT model(r.config, ActivationPolicy::SAVE_ALL, 0, false);
  load_checkpoint(out, model);
  const Tensor wte = model.store().tensor(ChunkKind::PARAM, model.store().layout().find("wte"));
  const std::string& b = std::get<2>(t.t.at("transformer.wte.weight"));
  for (int i = 0; i < 10; ++i) {
    uint32_t bits = 0;
    std::memcpy(reinterpret_cast<char*>(&bits) + 2, &b[2 * i], 2);
    float v;
    std::memcpy(&v, &bits, 4);
    EXPECT_EQ(wte.f32()[i], v);
  }
}

TEST(HfImport, RefusesWhatTideCannotRepresent) {
  const std::string fx = kFixture;
  {
    const std::string d = copy_fixture("no_config");
    fs::remove(d + "/config.json");
    EXPECT_NE(import_error(d).find("has no config.json"), std::string::npos);
  }
  {
    const std::string d = copy_fixture("no_model");
    fs::remove(d + "/model.safetensors");
    EXPECT_NE(import_error(d).find("has no model.safetensors"), std::string::npos);
  }
  {
    const std::string d = copy_fixture("relu");
    edit_config(d, [](json& c) { c["activation_function"] = "relu"; });
    const std::string e = import_error(d);
    EXPECT_NE(e.find("'activation_function' is \"relu\"; tide cannot represent it"),
              std::string::npos)
        << e;
  }
  {
    const std::string d = copy_fixture("eps");
    edit_config(d, [](json& c) { c["layer_norm_epsilon"] = 1e-6; });
    EXPECT_NE(import_error(d).find("'layer_norm_epsilon'"), std::string::npos);
  }
  {
    const std::string d = copy_fixture("inner");
    edit_config(d, [](json& c) { c["n_inner"] = 50; });
    EXPECT_NE(import_error(d).find("'n_inner' is 50"), std::string::npos);
  }
  {
    const std::string d = copy_fixture("shape");
    edit_config(d, [](json& c) { c["n_embd"] = 32; });
    const std::string e = import_error(d);
    EXPECT_NE(e.find("has shape (64, 24) but config.json's model"), std::string::npos) << e;
  }
  {
    const std::string d = copy_fixture("untied");
    edit_config(d, [](json& c) { c["tie_word_embeddings"] = false; });
    EXPECT_NE(import_error(d).find("tie_word_embeddings is false"), std::string::npos);
    Tensors t = parse(d + "/model.safetensors");
    std::string head = std::get<2>(t.t.at("transformer.wte.weight"));
    head[5] ^= 1;
    t.t["lm_head.weight"] = {"F32", std::get<1>(t.t.at("transformer.wte.weight")), head};
    write_plain(d + "/model.safetensors", t);
    EXPECT_NE(import_error(d).find("differs from the token embedding"), std::string::npos);
  }
  {
    const std::string d = copy_fixture("truncated");
    const std::string bytes = slurp(d + "/model.safetensors");
    put(d + "/model.safetensors", bytes.substr(0, bytes.size() - 100));
    const std::string e = import_error(d);
    EXPECT_NE(e.find("is truncated"), std::string::npos) << e;
  }
  {
    const std::string d = copy_fixture("header");
    std::string bytes = slurp(d + "/model.safetensors");
    bytes[8] = 'x';  // the JSON header's first byte
    put(d + "/model.safetensors", bytes);
    EXPECT_NE(import_error(d).find("not valid JSON"), std::string::npos);
  }
  {
    const std::string d = copy_fixture("missing_tensor");
    Tensors t = parse(d + "/model.safetensors");
    t.t.erase("transformer.h.1.ln_2.bias");
    write_plain(d + "/model.safetensors", t);
    EXPECT_NE(import_error(d).find("has no tensor 'transformer.h.1.ln_2.bias'"), std::string::npos);
  }
  {
    const std::string d = copy_fixture("extra_tensor");
    Tensors t = parse(d + "/model.safetensors");
    t.t["transformer.h.9.attn.c_attn.weight"] = t.t.at("transformer.h.1.attn.c_attn.weight");
    write_plain(d + "/model.safetensors", t);
    EXPECT_NE(import_error(d).find("which a"), std::string::npos);
  }
  // An existing checkpoint is not replaced without overwrite.
  const std::string d = temp_dir("exists");
  put(d + "/model.ckpt", "earlier");
  EXPECT_NE(error_of([&] { import_hf_gpt2(fx, d + "/model.ckpt"); }).find("--overwrite"),
            std::string::npos);
  EXPECT_EQ(slurp(d + "/model.ckpt"), "earlier");
  import_hf_gpt2(fx, d + "/model.ckpt", {.overwrite = true});
}

TEST(InitFrom, LoadsTheCheckpointsParametersWholeOrSliced) {
  const std::string d = temp_dir("init_from");
  const HfImportResult r = import_hf_gpt2(kFixture, d + "/model.ckpt");
  GPT want(r.config, ActivationPolicy::SAVE_ALL, 0, false);
  load_checkpoint(d + "/model.ckpt", want);
  GPT whole(r.config, ActivationPolicy::SAVE_ALL);
  whole.init_weights(5);
  init_weights_from(d + "/model.ckpt", whole);
  for (int id = 0; id < whole.store().layout().num_tensors(); ++id) {
    const Tensor a = whole.store().tensor(ChunkKind::PARAM, id);
    const Tensor b = want.store().tensor(ChunkKind::PARAM, id);
    ASSERT_EQ(std::memcmp(a.data, b.data, a.numel() * 4), 0)
        << whole.store().layout().slot(id).name;
  }
  // ZeRO-3: each of 2 ranks holds its slice of every PARAM chunk; together they are the model.
  for (int rank = 0; rank < 2; ++rank) {
    ModelOptions mo;
    mo.chunk_elems = 4096;
    mo.group_size = 2;
    mo.store.group_rank = rank;
    mo.store.sliced_kinds = zero_sliced_kinds(3);
    GPT sliced(r.config, ActivationPolicy::SAVE_ALL, mo);
    sliced.init_weights(5);
    init_weights_from(d + "/model.ckpt", sliced);
    const ChunkStore& s = sliced.store();
    int64_t checked = 0;
    for (int c = 0; c < s.layout().num_chunks(); ++c) {
      const Chunk& ch = s.chunk_info(ChunkKind::PARAM, c);
      for (int id : s.layout().tensors_in_chunk(c)) {
        const TensorSlot& slot = s.layout().slot(id);
        const float* ref = want.store().tensor(ChunkKind::PARAM, id).f32();
        for (int64_t e = std::max<int64_t>(0, ch.begin - slot.offset);
             e < std::min<int64_t>(slot.numel, ch.begin + ch.elems - slot.offset); ++e, ++checked)
          ASSERT_EQ(static_cast<const float*>(ch.data)[slot.offset + e - ch.begin], ref[e])
              << slot.name << " rank " << rank;
      }
    }
    EXPECT_GT(checked, 0);
  }
  // bf16 (ZeRO-1: the master sliced over 2 ranks): the master weights are the checkpoint's
  // f32 values and the parameters them rounded, whole.
  for (int rank = 0; rank < 2; ++rank) {
    ModelOptions mo;
    mo.chunk_elems = 4096;
    mo.group_size = 2;
    mo.store.group_rank = rank;
    mo.store.sliced_kinds = zero_sliced_kinds(1);
    mo.store.compute_dtype = DType::BF16;
    GPT bf16(r.config, ActivationPolicy::SAVE_ALL, mo);
    bf16.init_weights(5);
    init_weights_from(d + "/model.ckpt", bf16);
    const ChunkStore& s = bf16.store();
    int64_t masters = 0;
    for (int id = 0; id < s.layout().num_tensors(); ++id) {
      const TensorSlot& slot = s.layout().slot(id);
      const float* ref = want.store().tensor(ChunkKind::PARAM, id).f32();
      const auto* p = static_cast<const uint16_t*>(s.tensor(ChunkKind::PARAM, id).data);
      for (int64_t e = 0; e < slot.numel; ++e)
        ASSERT_EQ(p[e], f32_to_bf16(ref[e])) << slot.name << " [" << e << "] rank " << rank;
      const Chunk& m = s.chunk_info(ChunkKind::MASTER, slot.chunk);
      for (int64_t e = std::max<int64_t>(0, m.begin - slot.offset);
           e < std::min<int64_t>(slot.numel, m.begin + m.elems - slot.offset); ++e, ++masters)
        ASSERT_EQ(static_cast<const float*>(m.data)[slot.offset + e - m.begin], ref[e])
            << "master of " << slot.name << " rank " << rank;
    }
    EXPECT_GT(masters, 0);
  }
  // Another shape: one clear error.
  GPTConfig other = r.config;
  other.n_embd = 32;
  GPT wrong(other, ActivationPolicy::SAVE_ALL);
  const std::string e = error_of([&] { init_weights_from(d + "/model.ckpt", wrong); });
  EXPECT_NE(e.find("holds a model"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { check_init_from(d + "/model.ckpt", other); }).find("set model.*"),
            std::string::npos);
}

TEST(HfImport, LogitsEqualTransformers) {
  // tests/fixtures/hf_gpt2_tiny_logits.json: GPT2LMHeadModel's logits (eval mode) on fixed
  // tokens, written by tools/gen_hf_fixture.py with the fixture. tide's forward on the imported
  // weights must compute the same function.
  const json ref =
      json::parse(slurp(std::string(TIDE_SOURCE_DIR) + "/tests/fixtures/hf_gpt2_tiny_logits.json"));
  const std::string d = temp_dir("logits");
  const HfImportResult r = import_hf_gpt2(kFixture, d + "/model.ckpt");
  GPT model(r.config, ActivationPolicy::SAVE_ALL, 0, false);
  load_checkpoint(d + "/model.ckpt", model);
  const int T = static_cast<int>(ref["tokens"].size()), V = r.config.vocab_size;
  auto mb = model.make_micro_batch(1, T);
  mb->training = false;
  mb->keep_logits = true;
  for (int t = 0; t < T; ++t) {
    mb->tokens.i32()[t] = ref["tokens"][t].get<int32_t>();
    mb->targets.i32()[t] = -1;
  }
  model.forward(*mb);
  const auto* logits = static_cast<const float*>(mb->logits.data);
  double worst = 0;
  for (int t = 0; t < T; ++t)
    for (int v = 0; v < V; ++v)
      worst = std::max(worst, std::abs(logits[t * V + v] - ref["logits"][t][v].get<double>()));
  EXPECT_LT(worst, 1e-4) << "largest |tide - transformers| logit difference";
  std::printf("largest |tide - transformers| logit difference: %.3g\n", worst);
}
