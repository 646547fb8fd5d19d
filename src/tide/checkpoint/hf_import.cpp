// `tide import` (see hf_import.h): Hugging Face GPT-2 folder -> tide checkpoint. The HF file is
// read with SafetensorsReader's foreign mode (structure checked as strictly as tide's own
// files; HF files carry no checksum), every tensor is matched to the model before any is
// copied, and the checkpoint is written by save_checkpoint, so it is an ordinary tide file.
#include "tide/checkpoint/hf_import.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/hf_export.h"
#include "tide/checkpoint/hf_import_tokenizer.h"
#include "tide/checkpoint/safetensors.h"
#include "tide/core/dtype.h"
#include "tide/core/read_file.h"
#include "tide/data/tokenizer.h"
#include "tide/model/gpt.h"
#include "tide/model/layout.h"

namespace tide {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A positive integer field of config.json.
int int_field(const json& hf, const char* key, const std::string& where, bool required,
              int fallback = 0) {
  const auto it = hf.find(key);
  if (it == hf.end() || it->is_null()) {
    TIDE_CHECK(!required, "{} has no '{}'; it is not a GPT-2 config", where, key);
    return fallback;
  }
  TIDE_CHECK(it->is_number_integer() && it->get<int64_t>() >= 1 &&
                 it->get<int64_t>() <= (int64_t{1} << 30),
             "{}: '{}' is {}, not a positive integer", where, key, it->dump());
  return static_cast<int>(it->get<int64_t>());
}

// Refuses a field whose value (default when absent) is not what tide computes.
void require_field(const json& hf, const char* key, const json& fallback,
                   const std::vector<json>& accepted, const std::string& where, const char* why) {
  const json v = hf.contains(key) ? hf[key] : fallback;
  for (const json& a : accepted)
    if (v == a) return;
  TIDE_FAIL("{}: '{}' is {}; tide cannot represent it ({})", where, key, v.dump(), why);
}

// config.json of `hf_dir`, checked to be a folder's JSON (`what`: "import" or "read").
json read_hf_config(const std::string& hf_dir, const char* what) {
  std::error_code ec;
  TIDE_CHECK(fs::is_directory(hf_dir, ec),
             "cannot {} '{}': it is not a directory; pass the folder holding the Hugging "
             "Face model's config.json and model.safetensors",
             what, hf_dir);
  const std::string cfg_path = (fs::path(hf_dir) / "config.json").string();
  TIDE_CHECK(fs::is_regular_file(cfg_path, ec),
             "cannot {} '{}': it has no config.json; pass a folder written by "
             "save_pretrained (config.json + model.safetensors)",
             what, hf_dir);
  try {
    return json::parse(read_file(cfg_path, "Hugging Face config.json"));
  } catch (const json::exception&) {
    TIDE_FAIL("config '{}' is not valid JSON; it is damaged", cfg_path);
  }
}

// A LlamaForCausalLM, Qwen2ForCausalLM or MistralForCausalLM config (else GPT-2's rules apply).
bool is_llama_family(const json& hf) {
  return hf.is_object() && hf.contains("model_type") &&
         (hf["model_type"] == "llama" || hf["model_type"] == "qwen2" ||
          hf["model_type"] == "mistral");
}

}  // namespace

GPTConfig hf_folder_model(const std::string& hf_dir) {
  const json hf = read_hf_config(hf_dir, "read");
  const std::string who = fmt::format("config '{}'", (fs::path(hf_dir) / "config.json").string());
  return is_llama_family(hf) ? llama_config_from_hf(hf, who) : gpt_config_from_hf(hf, who);
}

std::string source_dtype_summary(const std::map<DType, int>& dtypes) {
  std::string s;
  for (const auto& [t, n] : dtypes)
    s += fmt::format("{}{}", s.empty() ? "" : "+", safetensors_dtype_name(t));
  if (dtypes.size() != 1 || dtypes.begin()->first != DType::F32) s += " (widened to f32)";
  return s;
}

GPTConfig gpt_config_from_hf(const json& hf, const std::string& where) {
  TIDE_CHECK(hf.is_object(), "{} is a JSON {}, not an object", where, hf.type_name());
  require_field(hf, "model_type", "gpt2", {"gpt2"}, where, "tide imports GPT-2 models only");
  GPTConfig c;
  c.n_layer = int_field(hf, "n_layer", where, true);
  c.n_head = int_field(hf, "n_head", where, true);
  c.n_embd = int_field(hf, "n_embd", where, true);
  c.vocab_size = int_field(hf, "vocab_size", where, true);
  c.max_seq_len = int_field(hf, "n_positions", where, true);
  TIDE_CHECK(c.n_embd % c.n_head == 0, "{}: n_embd {} is not a multiple of n_head {}", where,
             c.n_embd, c.n_head);
  require_field(hf, "activation_function", "gelu_new", {"gelu_new", "gelu_pytorch_tanh"}, where,
                "tide's GELU is GPT-2's tanh form, gelu_new");
  const json eps = hf.contains("layer_norm_epsilon") ? hf["layer_norm_epsilon"] : json(1e-5);
  TIDE_CHECK(eps.is_number() && std::abs(eps.get<double>() - 1e-5) <= 1e-12,
             "{}: 'layer_norm_epsilon' is {}; tide cannot represent it (its LayerNorm uses 1e-05)",
             where, eps.dump());
  const json inner = hf.contains("n_inner") ? hf["n_inner"] : json(nullptr);
  const int64_t mlp = 4 * int64_t{c.n_embd};  // n_embd may be up to 2^30: not in an int
  TIDE_CHECK(inner.is_null() || inner == json(mlp),
             "{}: 'n_inner' is {}; tide cannot represent it (its MLP is 4 * n_embd = {} wide)",
             where, inner.dump(), mlp);
  require_field(hf, "scale_attn_weights", true, {true}, where,
                "tide scales attention scores by 1/sqrt(head size)");
  require_field(hf, "scale_attn_by_inverse_layer_idx", false, {false}, where,
                "tide does not scale attention by layer index");
  require_field(hf, "add_cross_attention", false, {false}, where,
                "tide's blocks have no cross-attention");
  // (tie_word_embeddings false is accepted when lm_head.weight equals wte: checked with the
  // tensors.) Dropout is a training setting: the three rates must agree to be one.
  const json rp = hf.contains("resid_pdrop") ? hf["resid_pdrop"] : json(0.1);
  TIDE_CHECK(rp.is_number() && rp.get<double>() >= 0 && rp.get<double>() < 1,
             "{}: 'resid_pdrop' is {}, not a rate in [0, 1)", where, rp.dump());
  c.dropout = rp.get<float>();
  return c;
}

HfImportResult import_hf_gpt2(const std::string& hf_dir, const std::string& out,
                              const HfImportOptions& options) {
  // 1. The config and the model file, checked whole before anything is written.
  std::error_code ec;
  const json hf = read_hf_config(hf_dir, "import");
  if (is_llama_family(hf)) return import_hf_llama(hf_dir, hf, out, options);
  const std::string cfg_path = (fs::path(hf_dir) / "config.json").string();
  const std::string model_path = (fs::path(hf_dir) / "model.safetensors").string();
  TIDE_CHECK(fs::is_regular_file(model_path, ec),
             "cannot import '{}': it has no model.safetensors (a sharded HF model or a "
             "pytorch_model.bin is not read); save it with save_pretrained(safe_serialization="
             "True) and a max_shard_size above the model's size",
             hf_dir);
  const std::string cfg_who = fmt::format("config '{}'", cfg_path);
  HfImportResult result;
  result.config = gpt_config_from_hf(hf, cfg_who);
  const GPTConfig& c = result.config;
  const bool tied = !hf.contains("tie_word_embeddings") || hf["tie_word_embeddings"] == true;

  const SafetensorsReader r(model_path, "Hugging Face model file", ForeignSafetensors{});
  const std::string who = fmt::format("Hugging Face model file '{}'", model_path);
  // tide name -> the HF entry; lm_head and the ignored buffers aside.
  std::map<std::string, const SafetensorsEntry*> found;
  const SafetensorsEntry* lm_head = nullptr;
  std::map<DType, int> dtypes;
  for (const SafetensorsEntry& e : r.entries()) {
    std::string n = e.name;
    if (n.starts_with("transformer.")) n = n.substr(12);
    if (n == "lm_head.weight") {
      lm_head = &e;
      continue;
    }
    if (n.starts_with("h.") &&
        (n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias"))) {  // mask buffers
      result.ignored.push_back(e.name);
      continue;
    }
    if (n == "wte.weight" || n == "wpe.weight") n = n.substr(0, 3);
    TIDE_CHECK(found.emplace(n, &e).second,
               "{} holds tensor '{}' twice (with and without the 'transformer.' prefix)", who,
               printable_name(n));
  }
  // A config of more layers than the file has tensors for cannot be its model; refused before
  // the model's layout is built (a damaged n_layer of 10^8 took minutes and gigabytes). One
  // missing layer or tensor is named by the checks below.
  TIDE_CHECK(12 * (int64_t{c.n_layer} - 1) <= static_cast<int64_t>(found.size()),
             "{}: 'n_layer' is {} but {} holds only {} tensors (a layer has 12); the config and "
             "the model file do not belong together",
             cfg_who, c.n_layer, model_path, found.size());
  const ChunkLayout lay = make_layout(c);
  std::set<std::string> names;
  for (const TensorSlot& s : lay.slots()) names.insert(s.name);
  for (const auto& [name, e] : found)
    TIDE_CHECK(names.contains(name), "{} holds tensor '{}', which a {} GPT-2 does not have", who,
               printable_name(e->name), c.str());
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const TensorSlot& s = lay.slot(id);
    const auto it = found.find(s.name);
    TIDE_CHECK(it != found.end(), "{} has no tensor '{}' (nor '{}'); a {} GPT-2 needs it", who,
               hf_gpt2_name(s.name), hf_gpt2_name(s.name).substr(12), c.str());
    const SafetensorsEntry& e = *it->second;
    const bool t = hf_gpt2_transposed(s.name);
    const Shape want = t ? Shape{s.shape[1], s.shape[0]} : s.shape;
    TIDE_CHECK(e.shape == want,
               "{}: tensor '{}' has shape {} but config.json's model ({}) needs {}{}", who, e.name,
               e.shape.str(), c.str(), want.str(), t ? " (Conv1D: [in, out])" : "");
    TIDE_CHECK(e.dtype == DType::F32 || e.dtype == DType::BF16 || e.dtype == DType::F16,
               "{}: tensor '{}' is {}, not a float type (F32, BF16, F16)", who, e.name,
               safetensors_dtype_name(e.dtype));
    ++dtypes[e.dtype];
  }
  if (lm_head != nullptr) {
    const SafetensorsEntry& w = *found.at("wte");
    TIDE_CHECK(lm_head->shape == w.shape && lm_head->dtype == w.dtype &&
                   r.read_as_f32(*lm_head) == r.read_as_f32(w),
               "{}: '{}' differs from the token embedding; tide's LM head is tied to wte and "
               "cannot hold an untied one",
               who, lm_head->name);
    result.ignored.push_back(lm_head->name + " (= wte)");
  } else {
    TIDE_CHECK(tied,
               "{}: tie_word_embeddings is false but {} has no lm_head.weight; tide's LM head is "
               "tied to wte",
               cfg_who, model_path);
  }
  result.source_dtype = source_dtype_summary(dtypes);

  // 2. The output paths, checked before anything is written.
  TIDE_CHECK(!fs::is_directory(out, ec), "cannot write '{}': it is a directory; pass a file path",
             out);
  TIDE_CHECK(options.overwrite || !fs::exists(out, ec),
             "'{}' exists; pass --overwrite to replace it, or choose another path", out);
  const HfImportTokenizer tok = choose_import_tokenizer(hf_dir, out, options, c.vocab_size, result);

  // 3. The weights, into the model's store in tide's layout.
  GPT model(c, ActivationPolicy::SAVE_ALL, 0, /*with_optimizer=*/false);
  ChunkStore& store = model.store();
  for (int id = 0; id < store.layout().num_tensors(); ++id) {
    const TensorSlot& s = store.layout().slot(id);
    const SafetensorsEntry& e = *found.at(s.name);
    const std::vector<float> v = r.read_as_f32(e);
    const Tensor dst = store.tensor(ChunkKind::PARAM, id);
    float* d = dst.f32();
    if (!hf_gpt2_transposed(s.name)) {
      std::memcpy(d, v.data(), v.size() * 4);
    } else {  // HF (K, R) -> tide (R, K)
      const int64_t R = s.shape[0], K = s.shape[1];
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < R; ++j) d[j * K + k] = v[k * R + j];
    }
    ++result.tensors;
  }

  // 4. The checkpoint (and the tokenizer beside it).
  CheckpointInfo info;
  info.config = c;
  info.step = 0;
  info.extra = {{"imported_from", fs::absolute(hf_dir, ec).string()}};
  write_import_tokenizer(tok, info, result);
  save_checkpoint(out, model, info);
  return result;
}

}  // namespace tide
