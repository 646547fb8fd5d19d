#include "tide/checkpoint/hf_tokenizer_files.h"

#include <nlohmann/json.hpp>

#include "tide/core/error.h"

namespace tide {

using ojson = nlohmann::ordered_json;

const std::vector<std::string>& hf_tokenizer_file_names() {
  static const std::vector<std::string> names = {"tokenizer.json", "tokenizer_config.json",
                                                 "special_tokens_map.json",
                                                 "generation_config.json"};
  return names;
}

namespace {

// A Llama 3 or Qwen2 style tokenizer.json (another pre-tokenizer, added tokens, a template):
// the file as it was read, for transformers' PreTrainedTokenizerFast, whose tokenizer(text)
// runs the file's own post-processor (Llama 3's <|begin_of_text|> first). bos: what `tide
// prepare` puts before a document (that token, or end-of-text); eos: end-of-text, where
// `tide sample` stops.
HfTokenizerFiles hf_fast_tokenizer_files(const Tokenizer& tok, const GPTConfig& config) {
  const int eos_id = tok.eot_id();
  const std::vector<int32_t> prefix = tok.document_prefix();
  const int bos_id = prefix.empty() ? eos_id : prefix.front();
  const std::string bos = tok.decode(std::vector<int32_t>{bos_id});
  const std::string eos = tok.decode(std::vector<int32_t>{eos_id});
  HfTokenizerFiles f;
  f.tokenizer_json = tok.to_hf_json();
  f.tokenizer_config = ojson{{"tokenizer_class", "PreTrainedTokenizerFast"},
                             {"model_max_length", config.max_seq_len},
                             {"bos_token", bos},
                             {"eos_token", eos},
                             // tide's decode gives the bytes back as they are.
                             {"clean_up_tokenization_spaces", false}}
                           .dump(2) +
                       "\n";
  f.special_tokens_map = ojson{{"bos_token", bos}, {"eos_token", eos}}.dump(2) + "\n";
  f.generation_config =
      ojson{{"bos_token_id", bos_id}, {"eos_token_id", eos_id}, {"pad_token_id", eos_id}}.dump(2) +
      "\n";
  return f;
}

}  // namespace

HfTokenizerFiles hf_tokenizer_files(const Tokenizer& tok, const GPTConfig& config,
                                    const std::string& tokenizer_path) {
  TIDE_CHECK(tok.vocab_size() <= config.vocab_size,
             "tokenizer '{}' has {} tokens but the model's vocab_size is {}: it is not this "
             "model's tokenizer; pass the one it was trained with (--tokenizer)",
             tokenizer_path, tok.vocab_size(), config.vocab_size);
  if (!tok.is_gpt2_pipeline()) return hf_fast_tokenizer_files(tok, config);
  const std::string eot(Tokenizer::kEndOfText);
  const int eot_id = tok.eot_id();
  HfTokenizerFiles f;
  ojson j = ojson::parse(tok.to_hf_json());
  // <|endoftext|> before every text (see the header): HF's processor for a BOS token.
  const ojson bos = {{"SpecialToken", {{"id", eot}, {"type_id", 0}}}};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", ojson::array({bos, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"pair", ojson::array({bos,
                             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                             bos,
                             {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
      {"special_tokens", {{eot, {{"id", eot}, {"ids", {eot_id}}, {"tokens", {eot}}}}}}};
  f.tokenizer_json = j.dump(1) + "\n";
  const ojson special = {{"content", eot},  {"single_word", false}, {"lstrip", false},
                         {"rstrip", false}, {"normalized", true},   {"special", true}};
  f.tokenizer_config = ojson{{"tokenizer_class", "GPT2Tokenizer"},
                             {"model_max_length", config.max_seq_len},
                             {"add_prefix_space", false},
                             {"bos_token", eot},
                             {"eos_token", eot},
                             {"unk_token", eot},
                             {"errors", "replace"},
                             // tide's decode gives the bytes back as they are; HF's clean-up
                             // would drop the space before punctuation.
                             {"clean_up_tokenization_spaces", false},
                             {"added_tokens_decoder", {{std::to_string(eot_id), special}}}}
                           .dump(2) +
                       "\n";
  f.special_tokens_map =
      ojson{{"bos_token", special}, {"eos_token", special}, {"unk_token", special}}.dump(2) + "\n";
  f.generation_config =
      ojson{{"bos_token_id", eot_id}, {"eos_token_id", eot_id}, {"pad_token_id", eot_id}}.dump(2) +
      "\n";
  return f;
}

}  // namespace tide
