#pragma once
// The tokenizer side of a Hugging Face model folder (`tide export`): what transformers'
// AutoTokenizer and pipeline("text-generation") read beside config.json and the weights.
//
//   tokenizer.json           the run's byte-level BPE in HF tokenizers' format (Tokenizer::
//                            to_hf_json), with a TemplateProcessing post-processor that puts
//                            <|endoftext|> before the text: tide trains every document after
//                            one and `tide sample` feeds one before the prompt, so HF's
//                            tokenizer("Hello") gives the ids tide's model is conditioned on
//                            (add_special_tokens=False: tide's own encode()).
//   tokenizer_config.json    GPT2Tokenizer, <|endoftext|> as bos/eos/unk, no clean-up of spaces
//                            (tide's decode returns the bytes as they are)
//   special_tokens_map.json  the same special tokens
//   generation_config.json   bos/eos (and pad: the same token, as GPT-2's) for generate()
//
// A tokenizer without <|endoftext|> in the model's vocabulary has no bos/eos to name.
//
// A Llama 3 or Qwen2 style tokenizer.json (Tokenizer::is_gpt2_pipeline() false: its own
// pre-tokenizer regex, added tokens, template) is written as it was read, with a
// PreTrainedTokenizerFast tokenizer_config.json: bos is what `tide prepare` puts before each
// document (Llama 3's <|begin_of_text|>, else the end-of-text token), eos the end-of-text token
// (<|end_of_text|>, <|endoftext|>), and generation_config.json names them (pad = eos).

#include <string>
#include <vector>

#include "tide/data/tokenizer.h"
#include "tide/model/config.h"

namespace tide {

struct HfTokenizerFiles {
  std::string tokenizer_json, tokenizer_config, special_tokens_map, generation_config;
};

// The four files' texts for `tok` and a model of `config`. Throws a tide::Error when the
// tokenizer does not fit the model (more tokens than model.vocab_size).
HfTokenizerFiles hf_tokenizer_files(const Tokenizer& tok, const GPTConfig& config,
                                    const std::string& tokenizer_path);

// The names of the four files in a folder, in the order above.
const std::vector<std::string>& hf_tokenizer_file_names();

}  // namespace tide
