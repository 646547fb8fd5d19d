// `tide sample --checkpoint runs/default/model.ckpt`: generate text from a trained model.

#include <fmt/core.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include "commands.h"
#include "tide/checkpoint/checkpoint.h"
#include "tide/checkpoint/sharded_checkpoint.h"
#include "tide/data/tokenizer.h"
#include "tide/data/utf8_stream.h"
#include "tide/model/kv_decoder.h"

namespace tide::app {

namespace {

struct SampleArgs {
  std::string checkpoint = "runs/default/model.ckpt";
  std::string prompt;
  int tokens = 200;
  int samples = 1;
  float temperature = 0.8f;
  int top_k = 40;
  uint64_t seed = 42;
  bool ignore_eot = false;
};

// Draws a token from softmax(logits / temperature) restricted to the top_k largest.
int sample_token(const float* logits, int V, float temperature, int top_k, float u) {
  std::vector<std::pair<float, int>> order(V);
  for (int i = 0; i < V; ++i) order[i] = {logits[i], i};
  const int k = top_k > 0 ? std::min(top_k, V) : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [](auto& a, auto& b) { return a.first > b.first; });
  std::vector<double> p(k);
  double sum = 0;
  for (int i = 0; i < k; ++i)
    sum += p[i] = std::exp((order[i].first - order[0].first) / temperature);
  double acc = 0;
  for (int i = 0; i < k; ++i)
    if ((acc += p[i] / sum) >= u) return order[i].second;
  return order[k - 1].second;
}

void run_sample(const SampleArgs& a) {
  TIDE_CHECK(a.temperature > 0, "--temperature must be positive (got {})", a.temperature);
  TIDE_CHECK(a.tokens >= 1, "--tokens must be at least 1 (got {})", a.tokens);
  TIDE_CHECK(a.samples >= 1, "--samples must be at least 1 (got {})", a.samples);
  TIDE_CHECK(a.top_k >= 0, "--top-k must be >= 0 (got {}); 0 samples from all tokens", a.top_k);
  // A single file, or the sharded directory a ZeRO run writes (loaded whole into one store).
  const bool sharded = is_sharded_checkpoint(a.checkpoint);
  const CheckpointInfo info = sharded ? read_sharded_checkpoint_info(a.checkpoint).info
                                      : read_checkpoint_info(a.checkpoint);
  TIDE_CHECK(!info.tokenizer.empty(),
             "checkpoint '{}' names no tokenizer; it was trained on raw token shards",
             a.checkpoint);
  std::filesystem::path ckpt(a.checkpoint);
  if (!ckpt.has_filename()) ckpt = ckpt.parent_path();  // "dir/model.ckpt/"
  const auto tok_path = ckpt.parent_path() / info.tokenizer;
  const Tokenizer tok = Tokenizer::load(tok_path.string());
  GPT model(info.config, ActivationPolicy::SAVE_ALL, 0, /*with_optimizer=*/false);
  if (sharded)
    load_checkpoint_shard(a.checkpoint, model.store(), info.config);
  else
    load_checkpoint(a.checkpoint, model);
  const int T = info.config.max_seq_len, V = info.config.vocab_size;
  KvDecoder dec(model);
  const PhiloxStream rng{a.seed, 0x5a3d1e};
  uint64_t draw = 0;
  for (int s = 0; s < a.samples; ++s) {
    // What `tide prepare` puts before every document: <|endoftext|> (GPT-2, Qwen2) or the
    // template's <|begin_of_text|> (Llama 3).
    std::vector<int32_t> ids = tok.document_prefix();
    if (ids.empty()) ids = {tok.eot_id()};  // a template with a suffix only: the previous end
    const std::vector<int32_t> prompt = tok.encode(a.prompt);
    ids.insert(ids.end(), prompt.begin(), prompt.end());
    // Tokens go to stdout as they are generated. A byte-level BPE token is any run of bytes: a
    // character may be split over tokens, and a model may emit bytes that start no character.
    // `text` holds an incomplete character back until it completes and writes U+FFFD for bytes
    // that cannot be one, so stdout is always valid UTF-8 (what Hugging Face's decode with
    // errors="replace" gives for the whole sample). The prompt goes through it too: its last
    // character may be completed by the first token.
    Utf8Stream text;
    if (a.samples > 1) fmt::print("--- sample {} ---\n", s + 1);
    fmt::print("{}", text.push(a.prompt));
    std::fflush(stdout);
    // The KV cache holds the context; each new token costs one position. When it is full
    // (model.max_seq_len positions) it restarts from the last half of the tokens.
    auto feed = [&](size_t from) {
      dec.reset();
      const float* logits = nullptr;
      for (size_t i = from; i < ids.size(); ++i) logits = dec.push(ids[i]);
      return logits;
    };
    const float* logits = feed(ids.size() > static_cast<size_t>(T) ? ids.size() - T / 2 : 0);
    std::vector<float> no_eot;  // the logits with end-of-text masked out
    for (int n = 0; n < a.tokens; ++n) {
      // A sample without a prompt would be empty if its first token ended the document.
      if (n == 0 && a.prompt.empty() && tok.eot_id() < V) {
        no_eot.assign(logits, logits + V);
        no_eot[tok.eot_id()] = -std::numeric_limits<float>::infinity();
        logits = no_eot.data();
      }
      const int next = sample_token(logits, V, a.temperature, a.top_k, rng.uniform(draw++));
      if (next == tok.eot_id() && !a.ignore_eot) break;
      ids.push_back(next);
      // --ignore-eot: a blank line between documents; a character left incomplete ends with
      // its document.
      if (next == tok.eot_id())
        fmt::print("{}\n\n", text.finish());
      else
        fmt::print("{}", text.push(tok.decode(std::span<const int32_t>(&ids.back(), 1))));
      std::fflush(stdout);
      logits = dec.position() < T ? dec.push(next) : feed(ids.size() - T / 2);
    }
    fmt::print("{}\n", text.finish());  // U+FFFD for a character the sample left incomplete
  }
}

}  // namespace

void add_sample_command(CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  auto* cmd = app.add_subcommand("sample", "Generate text from a trained checkpoint");
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint written by `tide train`")
      ->capture_default_str();
  cmd->add_option("--prompt", a->prompt, "text to continue (default: start of a document)");
  cmd->add_option("--tokens", a->tokens, "maximum tokens to generate")->capture_default_str();
  cmd->add_option("--samples", a->samples, "number of samples")->capture_default_str();
  cmd->add_option("--temperature", a->temperature, "softmax temperature")->capture_default_str();
  cmd->add_option("--top-k", a->top_k, "sample among the k most likely tokens (0: all)")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "random seed")->capture_default_str();
  cmd->add_flag("--ignore-eot", a->ignore_eot,
                "go on past the end of a document (a blank line between documents) until "
                "--tokens tokens");
  cmd->callback([a] { run_sample(*a); });
}

}  // namespace tide::app
