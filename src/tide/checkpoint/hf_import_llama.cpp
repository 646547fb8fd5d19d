// `tide import` of the Llama family (hf_import.h): a LlamaForCausalLM, Qwen2ForCausalLM or
// MistralForCausalLM folder (config.json + model.safetensors, or model.safetensors.index.json
// and its shards) as a tide checkpoint of model.family=llama. The q/k/v projections are fused
// into tide's qkv_proj (rows q, k, v) and gate/up into gate_up_proj (rows gate, up), the
// layout of model/layout.h. As for GPT-2, a config field that would make transformers compute
// something tide does not is refused with its name, and every tensor is matched before any is
// copied; the folder's tokenizer.json (Llama 3's, Qwen2's) goes beside the checkpoint when tide
// reads it (hf_import_tokenizer.h).
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/hf_import.h"
#include "tide/checkpoint/hf_import_tokenizer.h"
#include "tide/checkpoint/safetensors.h"
#include "tide/core/dtype.h"
#include "tide/core/read_file.h"
#include "tide/model/gpt.h"
#include "tide/model/layout.h"

namespace tide {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const json* llama_field(const json& hf, const char* key) {
  const auto it = hf.find(key);
  return it == hf.end() || it->is_null() ? nullptr : &*it;
}

int llama_int(const json& hf, const char* key, const std::string& where, int fallback = -1) {
  const json* v = llama_field(hf, key);
  if (!v) {
    TIDE_CHECK(fallback >= 0, "{} has no '{}'; it is not a Llama-family config", where, key);
    return fallback;
  }
  TIDE_CHECK(
      v->is_number_integer() && v->get<int64_t>() >= 1 && v->get<int64_t>() <= (int64_t{1} << 30),
      "{}: '{}' is {}, not a positive integer", where, key, v->dump());
  return static_cast<int>(v->get<int64_t>());
}

double llama_number(const json& hf, const char* key, const std::string& where, double fallback) {
  const json* v = llama_field(hf, key);
  if (!v) return fallback;
  TIDE_CHECK(v->is_number() && v->get<double>() > 0, "{}: '{}' is {}, not a positive number", where,
             key, v->dump());
  return v->get<double>();
}

bool llama_bool(const json& hf, const char* key, const std::string& where, bool fallback) {
  const json* v = llama_field(hf, key);
  if (!v) return fallback;
  TIDE_CHECK(v->is_boolean(), "{}: '{}' is {}, not true or false", where, key, v->dump());
  return v->get<bool>();
}

// One HF tensor: the reader of its file and its entry.
struct HfTensor {
  const SafetensorsReader* reader = nullptr;
  const SafetensorsEntry* entry = nullptr;
};

// The HF names whose rows make up tide tensor `name` (layout.h), in order.
std::vector<std::string> hf_parts(const std::string& name) {
  if (name == "wte") return {"model.embed_tokens.weight"};
  if (name == "ln_f.weight") return {"model.norm.weight"};
  if (name == "output.weight") return {"lm_head.weight"};
  // h.<l>.<rest>
  const size_t dot = name.find('.', 2);
  const std::string layer = "model.layers." + name.substr(2, dot - 2) + ".";
  const std::string rest = name.substr(dot + 1);
  if (rest == "self_attn.qkv_proj.weight" || rest == "self_attn.qkv_proj.bias") {
    const std::string kind = rest.substr(rest.rfind('.'));  // .weight or .bias
    return {layer + "self_attn.q_proj" + kind, layer + "self_attn.k_proj" + kind,
            layer + "self_attn.v_proj" + kind};
  }
  if (rest == "mlp.gate_up_proj.weight")
    return {layer + "mlp.gate_proj.weight", layer + "mlp.up_proj.weight"};
  return {layer + rest};  // the norms, o_proj, down_proj keep HF's names
}

}  // namespace

GPTConfig llama_config_from_hf(const json& hf, const std::string& where) {
  TIDE_CHECK(hf.is_object(), "{} is a JSON {}, not an object", where, hf.type_name());
  const std::string type = hf.value("model_type", std::string());
  TIDE_CHECK(type == "llama" || type == "qwen2" || type == "mistral",
             "{}: 'model_type' is '{}'; tide imports gpt2, llama, qwen2 and mistral", where, type);
  GPTConfig c;
  c.family = ModelFamily::llama;
  c.n_layer = llama_int(hf, "num_hidden_layers", where);
  c.n_head = llama_int(hf, "num_attention_heads", where);
  c.n_kv_head = llama_int(hf, "num_key_value_heads", where, c.n_head);
  c.n_embd = llama_int(hf, "hidden_size", where);
  c.intermediate_size = llama_int(hf, "intermediate_size", where);
  c.vocab_size = llama_int(hf, "vocab_size", where);
  c.max_seq_len = llama_int(hf, "max_position_embeddings", where);
  TIDE_CHECK(c.n_embd % c.n_head == 0,
             "{}: hidden_size {} is not a multiple of num_attention_heads {}", where, c.n_embd,
             c.n_head);
  const int head_dim = llama_int(hf, "head_dim", where, c.n_embd / c.n_head);
  TIDE_CHECK(head_dim == c.n_embd / c.n_head,
             "{}: 'head_dim' is {}; tide cannot represent it (its heads are hidden_size / "
             "num_attention_heads = {} wide)",
             where, head_dim, c.n_embd / c.n_head);
  const std::string act = hf.value("hidden_act", std::string("silu"));
  TIDE_CHECK(act == "silu",
             "{}: 'hidden_act' is '{}'; tide cannot represent it (its MLP is "
             "SwiGLU, silu)",
             where, act);
  c.rms_norm_eps = llama_number(hf, "rms_norm_eps", where, 1e-6);
  c.tie_word_embeddings = llama_bool(hf, "tie_word_embeddings", where, false);
  // Biases: Qwen2's q/k/v always have one; Llama's attention_bias would bias o_proj too.
  c.qkv_bias = type == "qwen2";
  TIDE_CHECK(!llama_bool(hf, "attention_bias", where, false),
             "{}: 'attention_bias' is true; tide cannot represent it (only q/k/v may have a bias, "
             "as Qwen2's; o_proj has none)",
             where);
  TIDE_CHECK(!llama_bool(hf, "mlp_bias", where, false),
             "{}: 'mlp_bias' is true; tide cannot represent it (its MLP has no biases)", where);
  // RoPE: rope_theta and rope_scaling (transformers 4), or rope_parameters (transformers 5).
  const json* params = llama_field(hf, "rope_parameters");
  const json* scaling = params ? params : llama_field(hf, "rope_scaling");
  c.rope_theta = llama_number(params ? *params : hf, "rope_theta", where, 10000.0);
  if (scaling) {
    TIDE_CHECK(scaling->is_object(), "{}: 'rope_scaling' is {}, not an object", where,
               scaling->dump());
    const std::string rope_type =
        scaling->value("rope_type", scaling->value("type", std::string("default")));
    if (rope_type == "llama3") {
      c.rope_scaling = RopeScaling::llama3;
      c.rope_factor = llama_number(*scaling, "factor", where, 8.0);
      c.rope_low_freq_factor = llama_number(*scaling, "low_freq_factor", where, 1.0);
      c.rope_high_freq_factor = llama_number(*scaling, "high_freq_factor", where, 4.0);
      c.rope_original_max_position_embeddings =
          llama_int(*scaling, "original_max_position_embeddings", where, 8192);
    } else {
      TIDE_CHECK(rope_type == "default",
                 "{}: rope scaling type '{}'; tide cannot represent it (it has default and "
                 "llama3 RoPE)",
                 where, rope_type);
    }
  }
  // A sliding window changes attention only past it: positions are capped there instead.
  const bool sliding = type == "mistral" || llama_bool(hf, "use_sliding_window", where, false);
  if (sliding && llama_field(hf, "sliding_window"))
    c.max_seq_len = std::min(c.max_seq_len, llama_int(hf, "sliding_window", where));
  try {
    c.validate();
  } catch (const Error& e) {
    TIDE_FAIL("{}: {}", where, e.what());
  }
  return c;
}

HfImportResult import_hf_llama(const std::string& hf_dir, const json& hf, const std::string& out,
                               const HfImportOptions& options) {
  std::error_code ec;
  const std::string cfg_who =
      fmt::format("config '{}'", (fs::path(hf_dir) / "config.json").string());
  HfImportResult result;
  result.config = llama_config_from_hf(hf, cfg_who);
  const GPTConfig& c = result.config;

  // 1. The files: one model.safetensors, or the shards an index names.
  const std::string single = (fs::path(hf_dir) / "model.safetensors").string();
  const std::string index = (fs::path(hf_dir) / "model.safetensors.index.json").string();
  std::vector<std::string> files;
  if (fs::is_regular_file(single, ec)) {
    files.push_back(single);
  } else {
    TIDE_CHECK(fs::is_regular_file(index, ec),
               "cannot import '{}': it has neither model.safetensors nor "
               "model.safetensors.index.json; save it with save_pretrained(safe_serialization="
               "True)",
               hf_dir);
    json idx;
    try {
      idx = json::parse(read_file(index, "safetensors index"));
    } catch (const json::exception&) {
      TIDE_FAIL("index '{}' is not valid JSON; it is damaged", index);
    }
    TIDE_CHECK(idx.contains("weight_map") && idx["weight_map"].is_object(),
               "index '{}' has no 'weight_map' object; it is not a safetensors index", index);
    std::set<std::string> shards;
    for (const auto& [name, file] : idx["weight_map"].items()) {
      TIDE_CHECK(file.is_string() && file.get<std::string>().find('/') == std::string::npos,
                 "index '{}': tensor '{}' maps to {}, not a file name in the folder", index, name,
                 file.dump());
      shards.insert(file.get<std::string>());
    }
    for (const std::string& s : shards) files.push_back((fs::path(hf_dir) / s).string());
  }
  std::vector<std::unique_ptr<SafetensorsReader>> readers;
  std::map<std::string, HfTensor> found;
  for (const std::string& f : files) {
    TIDE_CHECK(fs::is_regular_file(f, ec), "cannot import '{}': shard '{}' is missing", hf_dir, f);
    readers.push_back(
        std::make_unique<SafetensorsReader>(f, "Hugging Face model file", ForeignSafetensors{}));
    for (const SafetensorsEntry& e : readers.back()->entries()) {
      if (e.name.ends_with("rotary_emb.inv_freq")) {  // a buffer of older files
        result.ignored.push_back(e.name);
        continue;
      }
      TIDE_CHECK(found.emplace(e.name, HfTensor{readers.back().get(), &e}).second,
                 "'{}' holds tensor '{}' twice", hf_dir, e.name);
    }
  }
  // A tied head may still be saved (equal to the embedding).
  if (c.tie_word_embeddings && found.contains("lm_head.weight")) {
    const HfTensor& h = found.at("lm_head.weight");
    const HfTensor& w = found.at("model.embed_tokens.weight");
    TIDE_CHECK(h.reader->read_as_f32(*h.entry) == w.reader->read_as_f32(*w.entry),
               "'{}': lm_head.weight differs from the token embedding but config.json says "
               "tie_word_embeddings; fix the config",
               hf_dir);
    result.ignored.push_back("lm_head.weight (= embed_tokens)");
    found.erase("lm_head.weight");
  }
  TIDE_CHECK(int64_t{c.n_layer} * 7 <= static_cast<int64_t>(found.size()) + 7,
             "{}: 'num_hidden_layers' is {} but '{}' holds only {} tensors; the config and the "
             "model files do not belong together",
             cfg_who, c.n_layer, hf_dir, found.size());

  // 2. Every tide tensor from its HF parts, checked before anything is read.
  const ChunkLayout lay = make_layout(c);
  std::set<std::string> used;
  std::map<DType, int> dtypes;
  for (const TensorSlot& s : lay.slots()) {
    int64_t rows = 0;
    for (const std::string& part : hf_parts(s.name)) {
      const auto it = found.find(part);
      TIDE_CHECK(it != found.end(), "'{}' has no tensor '{}'; a {} needs it", hf_dir, part,
                 c.str());
      const SafetensorsEntry& e = *it->second.entry;
      const bool matrix = s.shape.ndim == 2;
      TIDE_CHECK(e.shape.ndim == s.shape.ndim && (!matrix || e.shape[1] == s.shape[1]),
                 "'{}': tensor '{}' has shape {}, which does not fit tide's {} {} of config.json's "
                 "model ({})",
                 hf_dir, part, e.shape.str(), s.name, s.shape.str(), c.str());
      TIDE_CHECK(e.dtype == DType::F32 || e.dtype == DType::BF16 || e.dtype == DType::F16,
                 "'{}': tensor '{}' is {}, not a float type (F32, BF16, F16)", hf_dir, part,
                 safetensors_dtype_name(e.dtype));
      rows += e.shape[0];
      used.insert(part);
      ++dtypes[e.dtype];
    }
    TIDE_CHECK(rows == s.shape[0],
               "'{}': the parts of tide's {} have {} rows but config.json's model ({}) needs {}",
               hf_dir, s.name, rows, c.str(), s.shape[0]);
  }
  for (const auto& [name, t] : found)
    TIDE_CHECK(used.contains(name), "'{}' holds tensor '{}', which a {} does not have", hf_dir,
               name, c.str());
  result.source_dtype = source_dtype_summary(dtypes);
  TIDE_CHECK(!fs::is_directory(out, ec), "cannot write '{}': it is a directory; pass a file path",
             out);
  TIDE_CHECK(options.overwrite || !fs::exists(out, ec),
             "'{}' exists; pass --overwrite to replace it, or choose another path", out);
  const HfImportTokenizer tok = choose_import_tokenizer(hf_dir, out, options, c.vocab_size, result);

  // 3. The weights, part after part, into the model's store.
  GPT model(c, ActivationPolicy::SAVE_ALL, 0, /*with_optimizer=*/false);
  ChunkStore& store = model.store();
  for (int id = 0; id < store.layout().num_tensors(); ++id) {
    float* d = store.tensor(ChunkKind::PARAM, id).f32();
    for (const std::string& part : hf_parts(store.layout().slot(id).name)) {
      const HfTensor& t = found.at(part);
      const std::vector<float> v = t.reader->read_as_f32(*t.entry);
      std::memcpy(d, v.data(), v.size() * 4);
      d += v.size();
    }
    ++result.tensors;
  }
  CheckpointInfo info;
  info.config = c;
  info.step = 0;
  info.extra = {{"imported_from", fs::absolute(hf_dir, ec).string()}};
  write_import_tokenizer(tok, info, result);
  save_checkpoint(out, model, info);
  return result;
}

}  // namespace tide
