#pragma once
// The tide metadata of a checkpoint as JSON: the model shape, step, tokenizer, extra and
// optimizer_state, written in one place and read back field by field (present, right type, in
// range). Shared by single-file checkpoints (checkpoint.h) and sharded ones
// (sharded_checkpoint.h), so both refuse a damaged field with the same messages.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tide/checkpoint/checkpoint.h"

namespace tide {

// A kind of chunk a checkpoint holds, and the prefix of its tensors' names there.
struct CheckpointKind {
  ChunkKind kind;
  const char* prefix;
};
// The kinds every checkpoint (single-file, sharded, tensor-parallel) holds: the parameters in
// the compute dtype; with the optimizer state also the f32 master weights when they are not
// the parameters (16-bit compute), and Adam's m and v.
inline std::vector<CheckpointKind> checkpoint_kinds(DType compute, bool with_optimizer_state) {
  std::vector<CheckpointKind> k = {{ChunkKind::PARAM, ""}};
  if (!with_optimizer_state) return k;
  if (compute != DType::F32) k.push_back({ChunkKind::MASTER, "master."});
  k.push_back({ChunkKind::ADAM_M, "adam_m."});
  k.push_back({ChunkKind::ADAM_V, "adam_v."});
  return k;
}

// {n_layer, n_head, n_embd, vocab_size, max_seq_len, dropout}
nlohmann::json checkpoint_model_json(const GPTConfig& c);
// {"model", "step", "tokenizer", "extra", "optimizer_state"}
nlohmann::json checkpoint_meta_json(const CheckpointInfo& info, bool with_optimizer_state);
// One model.* config key whose value differs between two models, both values as text.
struct ModelKeyDifference {
  const char* key;  // "model.n_embd"
  std::string a, b;
};
// The shape keys (every model.* key but model.dropout and model.preset) in which `a` and `b`
// differ, in the schema's words: the one list of what makes a model's shape, for the checks
// below and init_from's (config.cpp).
std::vector<ModelKeyDifference> model_key_differences(const GPTConfig& a, const GPTConfig& b);
// Same shape (dropout aside): what a checkpoint and the model it loads into must share.
bool same_model_shape(const GPTConfig& a, const GPTConfig& b);
// The model.* keys in which `checkpoint` and `config` differ, as "model.rms_norm_eps 1e-06 (the
// config: 1e-05), ..." for an error message ("" when same_model_shape).
std::string model_shape_differences(const GPTConfig& checkpoint, const GPTConfig& config);

// Field readers for JSON read from a file. `who` is the subject of every message
// ("checkpoint 'x'"), `label` the field's full name ("model.n_layer").
const nlohmann::json& meta_member(const nlohmann::json& obj, const char* key,
                                  const std::string& label, const std::string& who);
int64_t meta_integer(const nlohmann::json& obj, const char* key, const std::string& label,
                     int64_t lo, int64_t hi, const std::string& who);
const std::string& meta_string(const nlohmann::json& obj, const char* key, const std::string& label,
                               const std::string& who);
bool meta_bool(const nlohmann::json& obj, const char* key, const std::string& label,
               const std::string& who);
GPTConfig meta_model(const nlohmann::json& obj, const char* key, const std::string& who);

// The whole CheckpointInfo from metadata written by checkpoint_meta_json.
CheckpointInfo checkpoint_info_from_meta(const nlohmann::json& meta, const std::string& who);

}  // namespace tide
