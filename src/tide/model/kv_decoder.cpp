#include "tide/model/kv_decoder.h"

#include <cblas.h>
#include <algorithm>
#include <cmath>

#include <cstring>

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
}  // namespace

KvDecoder::KvDecoder(GPT& model) : model_(model) {
  TIDE_CHECK(model.tp() == 1,
             "the key/value-cache decoder needs the whole model on one rank (this one holds a "
             "tensor-parallel shard); sample from a single-rank model");
  TIDE_CHECK(!model.config().is_llama(),
             "the key/value-cache decoder runs GPT-2 only; a model.family=llama checkpoint cannot "
             "be sampled by tide yet (its RoPE op has no position offset for one token at a "
             "time); train from it with init_from= instead");
  const GPTConfig& c = model.config();
  L_ = c.n_layer;
  T_ = c.max_seq_len;
  C_ = c.n_embd;
  NH_ = c.n_head;
  V_ = c.vocab_size;
  for (int id = 0; id < model.store().layout().num_tensors(); ++id)
    TIDE_CHECK(model.store().whole(ChunkKind::PARAM, model.store().layout().slot(id).chunk),
               "the KV-cache decoder needs every parameter resident whole; '{}' is not",
               model.store().layout().slot(id).name);
  const size_t cache = static_cast<size_t>(L_) * T_ * C_;
  k_.assign(cache, 0.0f);
  v_.assign(cache, 0.0f);
  x_.assign(C_, 0.0f);
  ln_.assign(C_, 0.0f);
  qkv_.assign(3 * static_cast<size_t>(C_), 0.0f);
  att_.assign(C_, 0.0f);
  tmp_.assign(C_, 0.0f);
  fc_.assign(4 * static_cast<size_t>(C_), 0.0f);
  gelu_.assign(4 * static_cast<size_t>(C_), 0.0f);
  logits_.assign(V_, 0.0f);
  stats_.assign(2, 0.0f);
}

Tensor KvDecoder::param(const std::string& name) const {
  const ChunkStore& store = model_.store();
  return store.tensor(ChunkKind::PARAM, store.layout().find(name));
}

const float* KvDecoder::push(int32_t token) {
  TIDE_CHECK(pos_ < T_, "the KV cache is full ({} positions = model.max_seq_len); reset() it", T_);
  TIDE_CHECK(token >= 0 && token < V_, "token {} is outside the vocabulary [0, {})", token, V_);
  const int64_t C = C_, hs = C_ / NH_;
  const Tensor mean(stats_.data(), Shape{1}), rstd(stats_.data() + 1, Shape{1});
  const Tensor x = view(x_, {1, C}), ln = view(ln_, {1, C});
  // (1,C) embedding of the token at this position
  const float* wte = param("wte").f32() + int64_t{token} * C;
  const float* wpe = param("wpe").f32() + int64_t{pos_} * C;
  for (int64_t i = 0; i < C; ++i) x_[i] = wte[i] + wpe[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  std::vector<float> p(static_cast<size_t>(pos_) + 1);
  for (int l = 0; l < L_; ++l) {
    auto w = [&](const char* name) { return param(fmt::format("h.{}.{}", l, name)); };
    layernorm_forward(op_, ln, mean, rstd, x, w("ln_1.weight"), w("ln_1.bias"));
    linear_row(qkv_, ln_, w("attn.c_attn.weight"), w("attn.c_attn.bias"));
    float* K = k_.data() + static_cast<size_t>(l) * T_ * C;
    float* Vc = v_.data() + static_cast<size_t>(l) * T_ * C;
    std::memcpy(K + pos_ * C, qkv_.data() + C, C * sizeof(float));
    std::memcpy(Vc + pos_ * C, qkv_.data() + 2 * C, C * sizeof(float));
    // Causal attention of this position's query over the cached keys and values, per head.
    for (int h = 0; h < NH_; ++h) {
      const float* q = qkv_.data() + h * hs;
      float max = -INFINITY;
      for (int j = 0; j <= pos_; ++j) {
        const float* k = K + j * C + h * hs;
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
        const float* v = Vc + j * C + h * hs;
        const float a = p[j] / sum;
        for (int64_t d = 0; d < hs; ++d) out[d] += a * v[d];
      }
    }
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
  ++pos_;
  return logits_.data();
}

}  // namespace tide
