// Checkpoint metadata <-> JSON (see checkpoint_meta.h). Everything read is checked before it
// is used: a missing field, a wrong type or an out-of-range value is one tide::Error line.
#include "tide/checkpoint/checkpoint_meta.h"

#include <climits>

namespace tide {

using json = nlohmann::json;

json checkpoint_model_json(const GPTConfig& c) {
  json m = {{"n_layer", c.n_layer},       {"n_head", c.n_head},           {"n_embd", c.n_embd},
            {"vocab_size", c.vocab_size}, {"max_seq_len", c.max_seq_len}, {"dropout", c.dropout}};
  if (c.is_llama()) {  // a GPT-2 checkpoint's metadata stays as it was
    m["family"] = model_family_name(c.family);
    m["n_kv_head"] = c.n_kv_head;
    m["intermediate_size"] = c.intermediate_size;
    m["rope_theta"] = c.rope_theta;
    m["rope_scaling"] = c.rope_scaling == RopeScaling::llama3 ? "llama3" : "none";
    m["rope_factor"] = c.rope_factor;
    m["rope_low_freq_factor"] = c.rope_low_freq_factor;
    m["rope_high_freq_factor"] = c.rope_high_freq_factor;
    m["rope_original_max_position_embeddings"] = c.rope_original_max_position_embeddings;
    m["rms_norm_eps"] = c.rms_norm_eps;
    m["tie_word_embeddings"] = c.tie_word_embeddings;
    m["qkv_bias"] = c.qkv_bias;
  }
  return m;
}

json checkpoint_meta_json(const CheckpointInfo& info, bool with_optimizer_state) {
  return {{"model", checkpoint_model_json(info.config)},
          {"step", info.step},
          {"tokenizer", info.tokenizer},
          {"extra", info.extra},
          {"optimizer_state", with_optimizer_state}};
}

std::vector<ModelKeyDifference> model_key_differences(const GPTConfig& a, const GPTConfig& b) {
  std::vector<ModelKeyDifference> out;
  auto differ = [&](const char* key, auto x, auto y) {
    if (x != y) out.push_back({key, fmt::format("{}", x), fmt::format("{}", y)});
  };
  const auto scaling = [](const GPTConfig& c) {
    return c.rope_scaling == RopeScaling::llama3 ? "llama3" : "none";
  };
  differ("model.family", std::string(model_family_name(a.family)),
         std::string(model_family_name(b.family)));
  differ("model.n_layer", a.n_layer, b.n_layer);
  differ("model.n_head", a.n_head, b.n_head);
  differ("model.n_kv_head", a.n_kv_head, b.n_kv_head);
  differ("model.n_embd", a.n_embd, b.n_embd);
  differ("model.intermediate_size", a.intermediate_size, b.intermediate_size);
  differ("model.vocab_size", a.vocab_size, b.vocab_size);
  differ("model.max_seq_len", a.max_seq_len, b.max_seq_len);
  differ("model.rope_theta", a.rope_theta, b.rope_theta);
  differ("model.rope_scaling.type", std::string(scaling(a)), std::string(scaling(b)));
  differ("model.rope_scaling.factor", a.rope_factor, b.rope_factor);
  differ("model.rope_scaling.low_freq_factor", a.rope_low_freq_factor, b.rope_low_freq_factor);
  differ("model.rope_scaling.high_freq_factor", a.rope_high_freq_factor, b.rope_high_freq_factor);
  differ("model.rope_scaling.original_max_position_embeddings",
         a.rope_original_max_position_embeddings, b.rope_original_max_position_embeddings);
  differ("model.rms_norm_eps", a.rms_norm_eps, b.rms_norm_eps);
  differ("model.tie_word_embeddings", a.tie_word_embeddings, b.tie_word_embeddings);
  differ("model.qkv_bias", a.qkv_bias, b.qkv_bias);
  return out;
}

bool same_model_shape(const GPTConfig& a, const GPTConfig& b) {
  return model_key_differences(a, b).empty();
}

std::string model_shape_differences(const GPTConfig& a, const GPTConfig& b) {
  std::string out;
  for (const ModelKeyDifference& d : model_key_differences(a, b))
    out += fmt::format("{}{} {} (the config: {})", out.empty() ? "" : ", ", d.key, d.a, d.b);
  return out;
}

const json& meta_member(const json& obj, const char* key, const std::string& label,
                        const std::string& who) {
  const auto it = obj.find(key);
  TIDE_CHECK(it != obj.end(),
             "{} has no '{}' in its metadata; the file is damaged or was not written by tide", who,
             label);
  return *it;
}

int64_t meta_integer(const json& obj, const char* key, const std::string& label, int64_t lo,
                     int64_t hi, const std::string& who) {
  const json& v = meta_member(obj, key, label, who);
  TIDE_CHECK(v.is_number_integer(), "{}: metadata '{}' is a JSON {}, not an integer", who, label,
             v.type_name());
  bool fits;
  if (v.is_number_unsigned()) {  // JSON's non-negative integers
    const uint64_t u = v.get<uint64_t>();
    fits = u <= static_cast<uint64_t>(hi) && static_cast<int64_t>(u) >= lo;
  } else {
    fits = v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  }
  TIDE_CHECK(fits, "{}: metadata '{}' is {}, outside [{}, {}]; the file is damaged", who, label,
             v.dump(), lo, hi);
  return v.get<int64_t>();
}

const std::string& meta_string(const json& obj, const char* key, const std::string& label,
                               const std::string& who) {
  const json& v = meta_member(obj, key, label, who);
  TIDE_CHECK(v.is_string(), "{}: metadata '{}' is a JSON {}, not a string", who, label,
             v.type_name());
  return v.get_ref<const std::string&>();
}

bool meta_bool(const json& obj, const char* key, const std::string& label, const std::string& who) {
  const json& v = meta_member(obj, key, label, who);
  TIDE_CHECK(v.is_boolean(), "{}: metadata '{}' is a JSON {}, not a boolean", who, label,
             v.type_name());
  return v.get<bool>();
}

GPTConfig meta_model(const json& obj, const char* key, const std::string& who) {
  const std::string k = key;
  const json& m = meta_member(obj, key, k, who);
  TIDE_CHECK(m.is_object(), "{}: metadata '{}' is a JSON {}, not an object", who, k, m.type_name());
  GPTConfig c;
  c.n_layer = static_cast<int>(meta_integer(m, "n_layer", k + ".n_layer", 1, INT_MAX, who));
  c.n_head = static_cast<int>(meta_integer(m, "n_head", k + ".n_head", 1, INT_MAX, who));
  c.n_embd = static_cast<int>(meta_integer(m, "n_embd", k + ".n_embd", 1, INT_MAX, who));
  c.vocab_size =
      static_cast<int>(meta_integer(m, "vocab_size", k + ".vocab_size", 1, INT_MAX, who));
  c.max_seq_len =
      static_cast<int>(meta_integer(m, "max_seq_len", k + ".max_seq_len", 1, INT_MAX, who));
  const json& dropout = meta_member(m, "dropout", k + ".dropout", who);
  TIDE_CHECK(dropout.is_number(), "{}: metadata '{}.dropout' is a JSON {}, not a number", who, k,
             dropout.type_name());
  c.dropout = dropout.get<float>();
  if (m.contains("family")) {  // the Llama family's fields (checkpoint_model_json)
    auto number = [&](const char* f) {
      const json& x = meta_member(m, f, k + "." + f, who);
      TIDE_CHECK(x.is_number(), "{}: metadata '{}.{}' is a JSON {}, not a number", who, k, f,
                 x.type_name());
      return x.get<double>();
    };
    const std::string& family = meta_string(m, "family", k + ".family", who);
    TIDE_CHECK(family == "llama", "{}: metadata '{}.family' is '{}', not a family tide knows", who,
               k, family);
    c.family = ModelFamily::llama;
    c.n_kv_head = static_cast<int>(meta_integer(m, "n_kv_head", k + ".n_kv_head", 0, INT_MAX, who));
    c.intermediate_size = static_cast<int>(
        meta_integer(m, "intermediate_size", k + ".intermediate_size", 0, INT_MAX, who));
    c.rope_theta = number("rope_theta");
    const std::string& scaling = meta_string(m, "rope_scaling", k + ".rope_scaling", who);
    TIDE_CHECK(scaling == "none" || scaling == "llama3",
               "{}: metadata '{}.rope_scaling' is '{}', not none or llama3", who, k, scaling);
    c.rope_scaling = scaling == "llama3" ? RopeScaling::llama3 : RopeScaling::none;
    c.rope_factor = number("rope_factor");
    c.rope_low_freq_factor = number("rope_low_freq_factor");
    c.rope_high_freq_factor = number("rope_high_freq_factor");
    c.rope_original_max_position_embeddings =
        meta_integer(m, "rope_original_max_position_embeddings",
                     k + ".rope_original_max_position_embeddings", 1, INT64_MAX, who);
    c.rms_norm_eps = number("rms_norm_eps");
    c.tie_word_embeddings = meta_bool(m, "tie_word_embeddings", k + ".tie_word_embeddings", who);
    c.qkv_bias = meta_bool(m, "qkv_bias", k + ".qkv_bias", who);
  }
  try {
    c.validate();
  } catch (const Error& e) {
    TIDE_FAIL("{} holds an impossible model shape: {}", who, e.what());
  }
  return c;
}

CheckpointInfo checkpoint_info_from_meta(const json& meta, const std::string& who) {
  TIDE_CHECK(meta.is_object(), "{}: its tide metadata is a JSON {}, not an object", who,
             meta.type_name());
  CheckpointInfo info;
  info.config = meta_model(meta, "model", who);
  info.step = meta_integer(meta, "step", "step", 0, INT64_MAX, who);
  info.tokenizer = meta_string(meta, "tokenizer", "tokenizer", who);
  info.extra = meta_member(meta, "extra", "extra", who);
  info.optimizer_state = meta_bool(meta, "optimizer_state", "optimizer_state", who);
  return info;
}

}  // namespace tide
