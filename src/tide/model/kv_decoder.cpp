#include "tide/model/kv_decoder.h"

#include <cblas.h>
#include <algorithm>
#include <cmath>

#include <cstring>

#include "tide/kernels/rope_freq.h"

namespace tide {

namespace {
Tensor view(std::vector<float>& v, Shape shape) {
  return Tensor(v.data(), shape);
}

// y = W x + b for one position: W (out,in) as nn.Linear stores it, x (in), b (out) or none.
// One token is a matrix-vector product: sgemv reads each weight once, where sgemm (the
// training matmul) first packs the whole weight matrix for a single row — 78% of the time of
// sampling the default model went to that packing (perf).
void linear_row(std::vector<float>& y, const std::vector<float>& x, const Tensor& w,
                const Tensor& b) {
  const int out = static_cast<int>(w.shape[0]), in = static_cast<int>(w.shape[1]);
  TIDE_ASSERT(static_cast<int64_t>(y.size()) >= out && static_cast<int64_t>(x.size()) >= in);
  if (b.data)
    std::memcpy(y.data(), b.data, static_cast<size_t>(out) * sizeof(float));
  else
    std::memset(y.data(), 0, static_cast<size_t>(out) * sizeof(float));
  cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, w.f32(), in, x.data(), 1, 1.0f, y.data(),
              1);
}

// Turns the first `heads` heads (q, then k) of one qkv row (W) by position `pos`, as the rope op
// does for sequence position t (kernels/cpu/rope.cpp: HF's rotate_half pairs (i, i + HS/2), the
// angle pos * inv_freq[i] in f32, then f32 cos and sin): the same angles, so the cached keys are
// the training forward's.
void rope_row(float* qkv, const std::vector<float>& inv_freq, int pos, int heads, int hs) {
  const int H = hs / 2;
  for (int i = 0; i < H; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];
    const float c = std::cos(angle), s = std::sin(angle);
    for (int h = 0; h < heads; ++h) {
      float* x = qkv + static_cast<int64_t>(h) * hs;
      const float x1 = x[i], x2 = x[H + i];
      x[i] = x1 * c - x2 * s;
      x[H + i] = x2 * c + x1 * s;
    }
  }
}
}  // namespace

KvDecoder::KvDecoder(GPT& model) : model_(model) {
  TIDE_CHECK(model.tp() == 1,
             "the key/value-cache decoder needs the whole model on one rank (this one holds a "
             "tensor-parallel shard); sample from a single-rank model");
  const GPTConfig& c = model.config();
  L_ = c.n_layer;
  T_ = c.max_seq_len;
  C_ = c.n_embd;
  NH_ = c.n_head;
  KV_ = c.kv_heads();
  V_ = c.vocab_size;
  kv_width_ = int64_t{KV_} * c.head_size();
  for (int id = 0; id < model.store().layout().num_tensors(); ++id)
    TIDE_CHECK(model.store().whole(ChunkKind::PARAM, model.store().layout().slot(id).chunk),
               "the KV-cache decoder needs every parameter resident whole; '{}' is not",
               model.store().layout().slot(id).name);
  const size_t cache = static_cast<size_t>(L_) * T_ * kv_width_;
  k_.assign(cache, 0.0f);
  v_.assign(cache, 0.0f);
  x_.assign(C_, 0.0f);
  ln_.assign(C_, 0.0f);
  qkv_.assign(static_cast<size_t>(c.is_llama() ? c.qkv_width() : 3 * int64_t{C_}), 0.0f);
  att_.assign(C_, 0.0f);
  tmp_.assign(C_, 0.0f);
  // The MLP's hidden activations: GPT-2's 4C, or the Llama family's [gate | up] (2I) and I.
  const int64_t hidden = c.is_llama() ? c.ffn_size() : 4 * int64_t{C_};
  fc_.assign(static_cast<size_t>(c.is_llama() ? 2 * hidden : hidden), 0.0f);
  gelu_.assign(static_cast<size_t>(hidden), 0.0f);
  logits_.assign(V_, 0.0f);
  stats_.assign(2, 0.0f);
  probs_.assign(T_, 0.0f);
  if (c.is_llama()) inv_freq_ = rope_inv_freq(c.rope_spec());
}

Tensor KvDecoder::param(const std::string& name) const {
  const ChunkStore& store = model_.store();
  return store.tensor(ChunkKind::PARAM, store.layout().find(name));
}

const float* KvDecoder::push(int32_t token) {
  TIDE_CHECK(pos_ < T_, "the KV cache is full ({} positions = model.max_seq_len); reset() it", T_);
  TIDE_CHECK(token >= 0 && token < V_, "token {} is outside the vocabulary [0, {})", token, V_);
  if (model_.config().is_llama())
    push_llama(token);
  else
    push_gpt2(token);
  ++pos_;
  return logits_.data();
}

void KvDecoder::attend(int l) {
  const int64_t hs = C_ / NH_, G = NH_ / KV_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const float* K = k_.data() + static_cast<size_t>(l) * T_ * kv_width_;
  const float* Vc = v_.data() + static_cast<size_t>(l) * T_ * kv_width_;
  float* p = probs_.data();
  for (int h = 0; h < NH_; ++h) {
    const float* q = qkv_.data() + h * hs;
    const int64_t kv = (h / G) * hs;  // the kv head this query head reads
    float max = -INFINITY;
    for (int j = 0; j <= pos_; ++j) {
      const float* k = K + j * kv_width_ + kv;
      float dot = 0.0f;
      for (int64_t d = 0; d < hs; ++d) dot += q[d] * k[d];
      p[j] = dot * scale;
      max = std::max(max, p[j]);
    }
    float sum = 0.0f;
    for (int j = 0; j <= pos_; ++j) sum += p[j] = std::exp(p[j] - max);
    float* out = att_.data() + h * hs;
    std::fill(out, out + hs, 0.0f);
    for (int j = 0; j <= pos_; ++j) {
      const float* v = Vc + j * kv_width_ + kv;
      const float a = p[j] / sum;
      for (int64_t d = 0; d < hs; ++d) out[d] += a * v[d];
    }
  }
}

void KvDecoder::push_gpt2(int32_t token) {
  const int64_t C = C_;
  const Tensor mean(stats_.data(), Shape{1}), rstd(stats_.data() + 1, Shape{1});
  const Tensor x = view(x_, {1, C}), ln = view(ln_, {1, C});
  // (1,C) embedding of the token at this position
  const float* wte = param("wte").f32() + int64_t{token} * C;
  const float* wpe = param("wpe").f32() + int64_t{pos_} * C;
  for (int64_t i = 0; i < C; ++i) x_[i] = wte[i] + wpe[i];
  for (int l = 0; l < L_; ++l) {
    auto w = [&](const char* name) { return param(fmt::format("h.{}.{}", l, name)); };
    layernorm_forward(op_, ln, mean, rstd, x, w("ln_1.weight"), w("ln_1.bias"));
    linear_row(qkv_, ln_, w("attn.c_attn.weight"), w("attn.c_attn.bias"));
    float* K = k_.data() + static_cast<size_t>(l) * T_ * C;
    float* Vc = v_.data() + static_cast<size_t>(l) * T_ * C;
    std::memcpy(K + pos_ * C, qkv_.data() + C, C * sizeof(float));
    std::memcpy(Vc + pos_ * C, qkv_.data() + 2 * C, C * sizeof(float));
    attend(l);
    linear_row(tmp_, att_, w("attn.c_proj.weight"), w("attn.c_proj.bias"));
    for (int64_t i = 0; i < C; ++i) x_[i] += tmp_[i];
    layernorm_forward(op_, ln, mean, rstd, x, w("ln_2.weight"), w("ln_2.bias"));
    linear_row(fc_, ln_, w("mlp.c_fc.weight"), w("mlp.c_fc.bias"));
    gelu_forward(op_, view(gelu_, {1, 4 * C}), view(fc_, {1, 4 * C}));
    linear_row(tmp_, gelu_, w("mlp.c_proj.weight"), w("mlp.c_proj.bias"));
    for (int64_t i = 0; i < C; ++i) x_[i] += tmp_[i];
  }
  layernorm_forward(op_, ln, mean, rstd, x, param("ln_f.weight"), param("ln_f.bias"));
  linear_row(logits_, ln_, param("wte"), Tensor());  // tied LM head
}

void KvDecoder::push_llama(int32_t token) {
  const GPTConfig& c = model_.config();
  const int64_t C = C_, hs = c.head_size(), I = c.ffn_size();
  const float eps = static_cast<float>(c.rms_norm_eps);
  const Tensor rstd(stats_.data(), Shape{1});
  const Tensor x = view(x_, {1, C}), ln = view(ln_, {1, C});
  const float* wte = param("wte").f32() + int64_t{token} * C;  // (C); no position embedding
  std::copy(wte, wte + C, x_.begin());
  for (int l = 0; l < L_; ++l) {
    auto w = [&](const char* name) { return param(fmt::format("h.{}.{}", l, name)); };
    rmsnorm_forward(op_, ln, rstd, x, w("input_layernorm.weight"), eps);
    linear_row(qkv_, ln_, w("self_attn.qkv_proj.weight"),
               c.qkv_bias ? w("self_attn.qkv_proj.bias") : Tensor());
    rope_row(qkv_.data(), inv_freq_, pos_, NH_ + KV_, static_cast<int>(hs));  // q and k heads
    const size_t at = (static_cast<size_t>(l) * T_ + pos_) * kv_width_;
    std::memcpy(k_.data() + at, qkv_.data() + NH_ * hs, kv_width_ * sizeof(float));
    std::memcpy(v_.data() + at, qkv_.data() + (NH_ + KV_) * hs, kv_width_ * sizeof(float));
    attend(l);
    linear_row(tmp_, att_, w("self_attn.o_proj.weight"), Tensor());
    for (int64_t i = 0; i < C; ++i) x_[i] += tmp_[i];
    rmsnorm_forward(op_, ln, rstd, x, w("post_attention_layernorm.weight"), eps);
    linear_row(fc_, ln_, w("mlp.gate_up_proj.weight"), Tensor());  // [gate | up] (2I)
    swiglu_forward(op_, view(gelu_, {1, I}), view(fc_, {1, 2 * I}));
    linear_row(tmp_, gelu_, w("mlp.down_proj.weight"), Tensor());
    for (int64_t i = 0; i < C; ++i) x_[i] += tmp_[i];
  }
  rmsnorm_forward(op_, ln, rstd, x, param("ln_f.weight"), eps);
  linear_row(logits_, ln_, param(c.tie_word_embeddings ? "wte" : "output.weight"), Tensor());
}

}  // namespace tide
