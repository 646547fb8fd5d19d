// The Llama family's decoder layer (llama_blocks.h): pre-RMSNorm, fused qkv with RoPE and
// grouped-query attention, SwiGLU MLP. Mirrors transformer_block.cpp's structure (activation
// policies, the B -> W stash, per-op parameter groups) for one rank without dropout.

#include "tide/kernels/mover.h"
#include "tide/model/group_access.h"
#include "tide/model/llama_blocks.h"

namespace tide {

namespace {

// Parameter slots (index into param_ids_; QKV_B only with a qkv bias, the later slots then
// shift by one: see LlamaBlock::param).
enum LlamaParam { NORM1_W, QKV_W, QKV_B, O_W, NORM2_W, GATE_UP_W, DOWN_W };

// The groups the ops acquire their parameters in (param_groups.h).
enum LlamaGroup { NORM1_QKV = 0, O_PROJ = 1, NORM2_GATE_UP = 2, DOWN = 3 };

// Forward intermediates (index into block_saved), then the B->W gradients.
enum LlamaSaved {
  L_NORM1,    // rmsnorm_1(x) (B,T,C)
  L_RSTD1,    // (B,T) f32
  L_QKV,      // qkv_proj output after RoPE (B,T,W)
  L_PREATT,   // attention probabilities (B,NH,T,T), before dropout (none: equal to L_ATT)
  L_ATT,      // (B,NH,T,T)
  L_ATTY,     // attention output before o_proj (B,T,C)
  L_RES2,     // x + attention branch (B,T,C)
  L_NORM2,    // rmsnorm_2(x2) (B,T,C)
  L_RSTD2,    // (B,T) f32
  L_GATE_UP,  // gate_up_proj output (B,T,2I)
  L_ACT,      // silu(gate) * up (B,T,I)
  kLlamaForward,
  L_DDOWN = kLlamaForward,  // gradient of the down_proj output (B,T,C)
  L_DGATE_UP,               // (B,T,2I)
  L_DNORM2,                 // gradient of rmsnorm_2's output (B,T,C)
  L_DO,                     // gradient of the o_proj output (B,T,C)
  L_DQKV,                   // gradient of the qkv_proj output, before RoPE (B,T,W)
  L_DNORM1,                 // gradient of rmsnorm_1's output (B,T,C)
  L_XIN,                    // the block input (B,T,C)
  kLlamaSaved
};

}  // namespace

LlamaBlock::LlamaBlock(const BlockEnv& env, int layer, std::vector<int> params)
    : env_(env), layer_(layer), bias_(env.config->qkv_bias) {
  TIDE_ASSERT(params.size() == (bias_ ? 7u : 6u));
  param_ids_ = std::move(params);
}

Tensor LlamaBlock::param(int slot) const {
  if (slot == QKV_B && !bias_) return Tensor();
  return env_.param(param_ids_[slot > QKV_B && !bias_ ? slot - 1 : slot]);
}

Tensor LlamaBlock::grad(int slot) const {
  if (slot == QKV_B && !bias_) return Tensor();
  return env_.grad(param_ids_[slot > QKV_B && !bias_ ? slot - 1 : slot]);
}

std::vector<Tensor> LlamaBlock::compute_forward(MicroBatch& mb, Tensor x, bool recompute) {
  const GPTConfig& cfg = *env_.config;
  const int64_t B = mb.B, T = mb.T, C = cfg.n_embd, NH = cfg.n_head, KV = cfg.kv_heads();
  const int64_t W = cfg.qkv_width(), I = cfg.ffn_size();
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const OpContext& op = env_.op;
  const DType act = env_.act;
  auto use = [&](LlamaGroup g) { mb.params->use(g); };
  // As in the GPT-2 block: kept in mb.saved, or temporary; recomputed ones go to the stash.
  const bool keep_any = mb.training && !recompute && env_.policy != ActivationPolicy::FULL;
  const bool keep_att = keep_any && env_.policy == ActivationPolicy::SAVE_ALL;
  Arena& main = keep_any ? mb.saved : (recompute ? *mb.stash_arena : mb.workspace);
  Arena& attn = keep_att ? mb.saved : mb.workspace;

  std::vector<Tensor> s(kLlamaSaved);
  s[L_NORM1] = main.alloc_tensor({B, T, C}, act);
  s[L_RSTD1] = main.alloc_tensor({B, T}, DType::F32);
  use(NORM1_QKV);
  rmsnorm_forward(op, s[L_NORM1], s[L_RSTD1], x, param(NORM1_W), eps);
  s[L_QKV] = main.alloc_tensor({B, T, W}, act);
  matmul_forward(op, s[L_QKV], s[L_NORM1], param(QKV_W), param(QKV_B));
  rope_forward(op, s[L_QKV], s[L_QKV], env_.rope_inv_freq, static_cast<int>(NH),
               static_cast<int>(KV));  // in place: backward needs only the rotated q, k
  s[L_PREATT] = attn.alloc_tensor({B, NH, T, T}, act);
  s[L_ATT] = attn.alloc_tensor({B, NH, T, T}, act);
  s[L_ATTY] = main.alloc_tensor({B, T, C}, act);
  attention_forward(op, s[L_ATTY], s[L_PREATT], s[L_ATT], s[L_QKV], static_cast<int>(NH),
                    static_cast<int>(KV), env_.dropout(mb, layer_, 0, NH));
  use(O_PROJ);
  Tensor o = mb.workspace.alloc_tensor({B, T, C}, act);
  matmul_forward(op, o, s[L_ATTY], param(O_W), Tensor());
  s[L_RES2] = main.alloc_tensor({B, T, C}, act);
  residual_forward(op, s[L_RES2], x, o);
  s[L_NORM2] = main.alloc_tensor({B, T, C}, act);
  s[L_RSTD2] = main.alloc_tensor({B, T}, DType::F32);
  use(NORM2_GATE_UP);
  rmsnorm_forward(op, s[L_NORM2], s[L_RSTD2], s[L_RES2], param(NORM2_W), eps);
  s[L_GATE_UP] = main.alloc_tensor({B, T, 2 * I}, act);
  matmul_forward(op, s[L_GATE_UP], s[L_NORM2], param(GATE_UP_W), Tensor());
  s[L_ACT] = main.alloc_tensor({B, T, I}, act);
  swiglu_forward(op, s[L_ACT], s[L_GATE_UP]);
  if (!recompute) {  // a recomputation must not touch the block output (already consumed)
    use(DOWN);
    Tensor down = mb.workspace.alloc_tensor({B, T, C}, act);
    matmul_forward(op, down, s[L_ACT], param(DOWN_W), Tensor());
    residual_forward(op, mb.residual[layer_ + 1], s[L_RES2], down);
  }
  return s;
}

void LlamaBlock::forward(MicroBatch& mb) {
  std::vector<Tensor> s = compute_forward(mb, mb.residual[layer_], /*recompute=*/false);
  if (mb.training) mb.block_saved[layer_ + 1] = std::move(s);
}

void LlamaBlock::backward_input(MicroBatch& mb) {
  const GPTConfig& cfg = *env_.config;
  const int64_t B = mb.B, T = mb.T, C = cfg.n_embd, NH = cfg.n_head, KV = cfg.kv_heads();
  const int64_t W = cfg.qkv_width(), I = cfg.ffn_size();
  const OpContext& op = env_.op;
  auto use = [&](LlamaGroup g) { mb.params->use(g); };
  std::vector<Tensor>& s = mb.block_saved[layer_ + 1];
  Arena& w = *mb.stash_arena;
  Arena& tmp = mb.workspace;
  const DType act = env_.act;
  const DropoutSpec no_dropout = env_.dropout(mb, layer_, 0, NH);
  const Tensor x = mb.residual[layer_];

  // 1. Bring back what the activation policy did not keep.
  if (env_.policy == ActivationPolicy::FULL) {
    s = compute_forward(mb, x, /*recompute=*/true);
  } else if (env_.policy == ActivationPolicy::SELECTIVE) {
    s[L_PREATT] = tmp.alloc_tensor({B, NH, T, T}, act);
    s[L_ATT] = tmp.alloc_tensor({B, NH, T, T}, act);
    Tensor atty = tmp.alloc_tensor({B, T, C}, act);  // equals s[L_ATTY]; discarded
    attention_forward(op, atty, s[L_PREATT], s[L_ATT], s[L_QKV], static_cast<int>(NH),
                      static_cast<int>(KV), no_dropout);
  }
  s[L_XIN] = x;

  // 2. Walk the block backwards: mb.dresidual holds dL/d(block output) on entry and
  //    dL/d(block input) on exit. The residual adds pass it through, so the branches' output
  //    gradients are copies of it (W reads them after dresidual has moved on).
  Tensor dy = mb.dresidual;  // (B,T,C)
  s[L_DDOWN] = w.alloc_tensor({B, T, C}, act);
  copy(op, s[L_DDOWN], dy);
  Tensor dact = env_.zeros(tmp, {B, T, I});
  use(DOWN);
  matmul_backward_input(op, dact, s[L_DDOWN], param(DOWN_W));
  s[L_DGATE_UP] = env_.zeros(w, {B, T, 2 * I});
  swiglu_backward(op, s[L_DGATE_UP], dact, s[L_GATE_UP]);
  s[L_DNORM2] = env_.zeros(w, {B, T, C});
  use(NORM2_GATE_UP);
  matmul_backward_input(op, s[L_DNORM2], s[L_DGATE_UP], param(GATE_UP_W));
  rmsnorm_backward_input(op, dy, s[L_DNORM2], s[L_RES2], param(NORM2_W), s[L_RSTD2]);
  // dy now holds dL/dx2.
  s[L_DO] = w.alloc_tensor({B, T, C}, act);
  copy(op, s[L_DO], dy);
  Tensor datty = env_.zeros(tmp, {B, T, C});
  use(O_PROJ);
  matmul_backward_input(op, datty, s[L_DO], param(O_W));
  Tensor dqkv_rotated = env_.zeros(tmp, {B, T, W});
  attention_backward(op, dqkv_rotated, datty, s[L_QKV], s[L_PREATT], s[L_ATT], static_cast<int>(NH),
                     static_cast<int>(KV), no_dropout);
  s[L_DQKV] = env_.zeros(w, {B, T, W});
  rope_backward(op, s[L_DQKV], dqkv_rotated, env_.rope_inv_freq, static_cast<int>(NH),
                static_cast<int>(KV));
  s[L_DNORM1] = env_.zeros(w, {B, T, C});
  use(NORM1_QKV);
  matmul_backward_input(op, s[L_DNORM1], s[L_DQKV], param(QKV_W));
  rmsnorm_backward_input(op, dy, s[L_DNORM1], s[L_XIN], param(NORM1_W), s[L_RSTD1]);
}

void LlamaBlock::backward_weight(MicroBatch& mb) {
  const OpContext& op = env_.op;
  auto use = [&](LlamaGroup g) { mb.params->use(g); };
  const std::vector<Tensor>& s = mb.block_saved[layer_ + 1];
  use(DOWN);
  matmul_backward_weight(op, grad(DOWN_W), Tensor(), s[L_DDOWN], s[L_ACT]);
  use(NORM2_GATE_UP);
  matmul_backward_weight(op, grad(GATE_UP_W), Tensor(), s[L_DGATE_UP], s[L_NORM2]);
  rmsnorm_backward_weight(op, grad(NORM2_W), s[L_DNORM2], s[L_RES2], s[L_RSTD2]);
  use(O_PROJ);
  matmul_backward_weight(op, grad(O_W), Tensor(), s[L_DO], s[L_ATTY]);
  use(NORM1_QKV);
  matmul_backward_weight(op, grad(QKV_W), grad(QKV_B), s[L_DQKV], s[L_NORM1]);
  rmsnorm_backward_weight(op, grad(NORM1_W), s[L_DNORM1], s[L_XIN], s[L_RSTD1]);
}

size_t LlamaBlock::saved_bytes(int B, int T) const {
  return llama_layer_saved_bytes(arena_shape(env_), B, T);
}

size_t LlamaBlock::workspace_bytes(int B, int T) const {
  return llama_layer_workspace_bytes(arena_shape(env_), B, T);
}

size_t LlamaBlock::stash_bytes(int B, int T) const {
  return llama_layer_stash_bytes(arena_shape(env_), B, T);
}

}  // namespace tide
