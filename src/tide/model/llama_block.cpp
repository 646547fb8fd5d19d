// The Llama family's decoder layer (llama_blocks.h): pre-RMSNorm, fused qkv with RoPE and
// grouped-query attention, SwiGLU MLP. Mirrors transformer_block.cpp's structure (activation
// policies, the B -> W stash, per-op parameter groups, Megatron's tensor and sequence
// parallelism, ZeRO-R P_a) with dropout on the attention probabilities only (transformers'
// attention_dropout; no residual dropout).

#include "tide/kernels/mover.h"
#include "tide/model/group_access.h"
#include "tide/model/layout.h"
#include "tide/model/llama_blocks.h"

namespace tide {

namespace {

// Parameter slots (index into param_ids_; QKV_B only with a qkv bias, the later slots then
// shift by one: see LlamaBlock::param).
enum LlamaParam { NORM1_W, QKV_W, QKV_B, O_W, NORM2_W, GATE_UP_W, DOWN_W };

// The groups the ops acquire their parameters in (param_groups.h).
enum LlamaGroup { NORM1_QKV = 0, O_PROJ = 1, NORM2_GATE_UP = 2, DOWN = 3 };

// Forward intermediates (index into block_saved), then the B->W gradients. Under tensor
// parallelism over t ranks the rank holds NHl = NH/t query and KVl = KV/t key/value heads
// (1 when kv heads are replicated, KV < t: layout.h), Wl = (NHl + 2 KVl) HS qkv rows, Cl = C/t
// of the attention output and Il = I/t of the MLP; Ts = T/t positions of the residual stream
// under SP, else T.
enum LlamaSaved {
  L_NORM1,    // rmsnorm_1(x) (B,Ts,C)
  L_RSTD1,    // (B,Ts) f32
  L_NORM1F,   // rmsnorm_1(x) whole (B,T,C): all-gathered under SP, else L_NORM1 itself
  L_QKV,      // qkv_proj output after RoPE (B,T,Wl)
  L_LSE,      // the attention rows' log-sum-exp (B,NHl,T), f32
  L_ATTY,     // attention output before o_proj (B,T,Cl)
  L_RES2,     // x + attention branch (B,Ts,C)
  L_NORM2,    // rmsnorm_2(x2) (B,Ts,C)
  L_RSTD2,    // (B,Ts) f32
  L_NORM2F,   // rmsnorm_2(x2) whole (B,T,C)
  L_GATE_UP,  // gate_up_proj output (B,T,2Il)
  L_ACT,      // silu(gate) * up (B,T,Il)
  kLlamaForward,
  L_DDOWN = kLlamaForward,  // gradient of the down_proj output (B,Ts,C)
  L_DDOWNF,                 // L_DDOWN whole (B,T,C): all-gathered under SP, else L_DDOWN
  L_DGATE_UP,               // (B,T,2Il)
  L_DNORM2,                 // gradient of rmsnorm_2's output (B,Ts,C)
  L_DO,                     // gradient of the o_proj output (B,Ts,C)
  L_DOF,                    // L_DO whole (B,T,C)
  L_DQKV,                   // gradient of the qkv_proj output, before RoPE (B,T,Wl)
  L_DNORM1,                 // gradient of rmsnorm_1's output (B,Ts,C)
  L_XSLICE,                 // P_a: this rank's 1/t of the flattened block input (F to B)
  L_XIN,                    // the block input whole (B,Ts,C) in B and W: the residual entry,
                            // or under P_a its slices all-gathered into the stash
  kLlamaSaved
};

// Row-parallel linear (o_proj, down_proj) without bias: the rank's partial inp @ w^T (B,T,C)
// summed over the tp ranks (all-reduced, or under SP reduce-scattered to this rank's sequence
// shard (B,T/t,C)); the plain linear without tensor parallelism. In the workspace.
Tensor row_parallel_forward(const BlockEnv& env, MicroBatch& mb, Tensor inp, Tensor w) {
  Tensor out = mb.workspace.alloc_tensor({inp.dim(0), inp.dim(1), w.dim(0)}, env.act);
  matmul_forward(env.op, out, inp, w, Tensor());
  return env.to_shard(out, mb.workspace, mb.workspace);
}

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

DropoutSpec LlamaBlock::attn_dropout(const MicroBatch& mb) const {
  const int64_t NH = env_.config->n_head, NHl = NH / env_.tp_size();
  // transformers' attention_dropout (model.dropout): the family's only dropout, on the
  // attention probabilities (0 by default, as transformers' configs have it).
  return env_.dropout(mb, layer_, 0, NH, env_.tp_rank() * NHl);
}

std::vector<Tensor> LlamaBlock::compute_forward(MicroBatch& mb, Tensor x, bool recompute) {
  const GPTConfig& cfg = *env_.config;
  const int64_t t = env_.tp_size(), B = mb.B, T = mb.T, Ts = env_.seq_local(T), C = cfg.n_embd;
  const int64_t NHl = cfg.n_head / t, KVl = kv_heads_per_rank(cfg, static_cast<int>(t));
  const int64_t Wl = qkv_rows_per_rank(cfg, static_cast<int>(t)), Il = cfg.ffn_size() / t;
  const int64_t Cl = C / t;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const OpContext& op = env_.op;
  const DType act = env_.act;
  auto use = [&](LlamaGroup g) { mb.params->use(g); };
  // As in the GPT-2 block: kept in mb.saved, or temporary; recomputed ones go to the stash.
  const bool keep_any = mb.training && !recompute && env_.policy != ActivationPolicy::FULL;
  const bool keep_att = keep_any && env_.policy == ActivationPolicy::SAVE_ALL;
  Arena& main = keep_any ? mb.saved : (recompute ? *mb.stash_arena : mb.workspace);
  Arena& attn = keep_att ? mb.saved : mb.workspace;
  // Under SP the all-gathered norm outputs are not kept from F to B (Korthikanti et al. keep
  // only the shards): B gathers them again, into the stash for W.
  Arena& whole = (env_.sp && keep_any) ? mb.workspace : main;

  std::vector<Tensor> s(kLlamaSaved);  // x: the block input (B,Ts,C)
  s[L_NORM1] = main.alloc_tensor({B, Ts, C}, act);
  s[L_RSTD1] = main.alloc_tensor({B, Ts}, DType::F32);
  use(NORM1_QKV);
  rmsnorm_forward(op, s[L_NORM1], s[L_RSTD1], x, param(NORM1_W), eps);
  s[L_NORM1F] = env_.to_full(s[L_NORM1], whole, mb.workspace);  // (B,T,C)
  s[L_QKV] = main.alloc_tensor({B, T, Wl}, act);
  matmul_forward(op, s[L_QKV], s[L_NORM1F], param(QKV_W), param(QKV_B));
  rope_forward(op, s[L_QKV], s[L_QKV], env_.rope_inv_freq, static_cast<int>(NHl),
               static_cast<int>(KVl));  // in place: backward needs only the rotated q, k
  s[L_LSE] = attn.alloc_tensor({B, NHl, T}, DType::F32);
  s[L_ATTY] = main.alloc_tensor({B, T, Cl}, act);
  attention_forward(op, s[L_ATTY], s[L_LSE], s[L_QKV], static_cast<int>(NHl), static_cast<int>(KVl),
                    attn_dropout(mb));
  use(O_PROJ);
  const Tensor o = row_parallel_forward(env_, mb, s[L_ATTY], param(O_W));  // (B,Ts,C)
  s[L_RES2] = main.alloc_tensor({B, Ts, C}, act);
  residual_forward(op, s[L_RES2], x, o);
  s[L_NORM2] = main.alloc_tensor({B, Ts, C}, act);
  s[L_RSTD2] = main.alloc_tensor({B, Ts}, DType::F32);
  use(NORM2_GATE_UP);
  rmsnorm_forward(op, s[L_NORM2], s[L_RSTD2], s[L_RES2], param(NORM2_W), eps);
  s[L_NORM2F] = env_.to_full(s[L_NORM2], whole, mb.workspace);  // (B,T,C)
  s[L_GATE_UP] = main.alloc_tensor({B, T, 2 * Il}, act);
  matmul_forward(op, s[L_GATE_UP], s[L_NORM2F], param(GATE_UP_W), Tensor());
  s[L_ACT] = main.alloc_tensor({B, T, Il}, act);
  swiglu_forward(op, s[L_ACT], s[L_GATE_UP]);
  if (!recompute) {  // a recomputation must not touch the block output (already consumed)
    use(DOWN);
    const Tensor down = row_parallel_forward(env_, mb, s[L_ACT], param(DOWN_W));  // (B,Ts,C)
    env_.before_boundary_write(mb);
    residual_forward(op, mb.residual[layer_ + 1], s[L_RES2], down);
  }
  return s;
}

void LlamaBlock::forward(MicroBatch& mb) {
  std::vector<Tensor> s = compute_forward(mb, mb.residual[layer_], /*recompute=*/false);
  if (!mb.training) return;
  // ZeRO-R P_a: keep a slice; the input's buffer takes the next block's output (ping-pong).
  if (env_.partition_activations) s[L_XSLICE] = env_.keep_input_slice(mb, mb.residual[layer_]);
  mb.block_saved[layer_ + 1] = std::move(s);
}

void LlamaBlock::backward_input(MicroBatch& mb) {
  const GPTConfig& cfg = *env_.config;
  const int64_t t = env_.tp_size(), B = mb.B, T = mb.T, Ts = env_.seq_local(T), C = cfg.n_embd;
  const int64_t NHl = cfg.n_head / t, KVl = kv_heads_per_rank(cfg, static_cast<int>(t));
  const int64_t Wl = qkv_rows_per_rank(cfg, static_cast<int>(t)), Il = cfg.ffn_size() / t;
  const int64_t Cl = C / t;
  const OpContext& op = env_.op;
  auto use = [&](LlamaGroup g) { mb.params->use(g); };
  std::vector<Tensor>& s = mb.block_saved[layer_ + 1];
  Arena& w = *mb.stash_arena;
  Arena& tmp = mb.workspace;
  const DType act = env_.act;

  // 0. P_a: the block input whole again, all-gathered from the ranks' slices into the stash
  //    (W reads it too); bitwise the forward's input.
  Tensor x = mb.residual[layer_];
  if (env_.partition_activations) {
    x = w.alloc_tensor({B, Ts, C}, s[L_XSLICE].dtype);
    env_.tp_gather_slices(s[L_XSLICE], x);
  }
  // 1. Bring back what the activation policy did not keep.
  if (env_.policy == ActivationPolicy::FULL) {
    s = compute_forward(mb, x, /*recompute=*/true);
  } else if (env_.policy == ActivationPolicy::SELECTIVE) {
    s[L_LSE] = tmp.alloc_tensor({B, NHl, T}, DType::F32);
    Tensor atty = tmp.alloc_tensor({B, T, Cl}, act);  // equals s[L_ATTY]; discarded
    attention_forward(op, atty, s[L_LSE], s[L_QKV], static_cast<int>(NHl), static_cast<int>(KVl),
                      attn_dropout(mb));
  }
  s[L_XIN] = x;
  if (env_.sp && env_.policy != ActivationPolicy::FULL) {  // F kept only the shards
    s[L_NORM1F] = env_.to_full(s[L_NORM1], w, tmp);
    s[L_NORM2F] = env_.to_full(s[L_NORM2], w, tmp);
  }

  // 2. Walk the block backwards: mb.dresidual holds dL/d(block output) on entry and
  //    dL/d(block input) on exit. The residual adds pass it through, so the branches' output
  //    gradients are copies of it (W reads them after dresidual has moved on). Under SP the
  //    row-parallel outputs' gradients are all-gathered (the conjugate of the forward's
  //    reduce-scatter) and the column-parallel inputs' partial gradients reduce-scattered;
  //    under plain TP the former are whole already and the latter all-reduced.
  Tensor dy = mb.dresidual;  // (B,Ts,C)
  s[L_DDOWN] = w.alloc_tensor({B, Ts, C}, act);
  copy(op, s[L_DDOWN], dy);
  s[L_DDOWNF] = env_.to_full(s[L_DDOWN], w, tmp);  // (B,T,C)
  Tensor dact = env_.zeros(tmp, {B, T, Il});
  use(DOWN);
  matmul_backward_input(op, dact, s[L_DDOWNF], param(DOWN_W));
  s[L_DGATE_UP] = env_.zeros(w, {B, T, 2 * Il});
  swiglu_backward(op, s[L_DGATE_UP], dact, s[L_GATE_UP]);
  Tensor dnorm2 = env_.zeros(env_.sp ? tmp : w, {B, T, C});
  use(NORM2_GATE_UP);
  matmul_backward_input(op, dnorm2, s[L_DGATE_UP], param(GATE_UP_W));
  s[L_DNORM2] = env_.to_shard(dnorm2, w, tmp);  // the ranks' partial d(rmsnorm_2 output)
  rmsnorm_backward_input(op, dy, s[L_DNORM2], s[L_RES2], param(NORM2_W), s[L_RSTD2]);
  // dy now holds dL/dx2.
  s[L_DO] = w.alloc_tensor({B, Ts, C}, act);
  copy(op, s[L_DO], dy);
  s[L_DOF] = env_.to_full(s[L_DO], w, tmp);  // (B,T,C)
  Tensor datty = env_.zeros(tmp, {B, T, Cl});
  use(O_PROJ);
  matmul_backward_input(op, datty, s[L_DOF], param(O_W));
  Tensor dqkv_rotated = env_.zeros(tmp, {B, T, Wl});
  attention_backward(op, dqkv_rotated, datty, s[L_QKV], s[L_LSE], static_cast<int>(NHl),
                     static_cast<int>(KVl), attn_dropout(mb));
  s[L_DQKV] = env_.zeros(w, {B, T, Wl});
  rope_backward(op, s[L_DQKV], dqkv_rotated, env_.rope_inv_freq, static_cast<int>(NHl),
                static_cast<int>(KVl));
  Tensor dnorm1 = env_.zeros(env_.sp ? tmp : w, {B, T, C});
  use(NORM1_QKV);
  matmul_backward_input(op, dnorm1, s[L_DQKV], param(QKV_W));
  s[L_DNORM1] = env_.to_shard(dnorm1, w, tmp);  // the ranks' partial d(rmsnorm_1 output)
  rmsnorm_backward_input(op, dy, s[L_DNORM1], s[L_XIN], param(NORM1_W), s[L_RSTD1]);
}

void LlamaBlock::backward_weight(MicroBatch& mb) {
  const OpContext& op = env_.op;
  auto use = [&](LlamaGroup g) { mb.params->use(g); };
  const std::vector<Tensor>& s = mb.block_saved[layer_ + 1];
  // Under SP the RMSNorms see only this rank's positions: their weights' gradients are partial
  // sums, computed into `part` and all-reduced while their group is held (as GPT-2's
  // layernorms'); without SP every rank computes the whole gradient.
  const int64_t C = env_.config->n_embd;
  const Tensor part = env_.sp ? env_.zeros(mb.workspace, {2 * C}, DType::F32) : Tensor();
  auto norm_grad = [&](int slot, int k) {
    return env_.sp ? Tensor(part.f32() + k * C, {C}, DType::F32, part.device) : grad(slot);
  };
  auto sp_sum = [&](int slot, int k) {
    if (env_.sp)
      env_.add_sp_partial_grads(Tensor(part.f32() + k * C, {C}, DType::F32, part.device),
                                {grad(slot)});
  };
  use(DOWN);
  matmul_backward_weight(op, grad(DOWN_W), Tensor(), s[L_DDOWNF], s[L_ACT]);
  use(NORM2_GATE_UP);
  matmul_backward_weight(op, grad(GATE_UP_W), Tensor(), s[L_DGATE_UP], s[L_NORM2F]);
  rmsnorm_backward_weight(op, norm_grad(NORM2_W, 0), s[L_DNORM2], s[L_RES2], s[L_RSTD2]);
  sp_sum(NORM2_W, 0);
  use(O_PROJ);
  matmul_backward_weight(op, grad(O_W), Tensor(), s[L_DOF], s[L_ATTY]);
  use(NORM1_QKV);
  qkv_backward_weight(mb);
  rmsnorm_backward_weight(op, norm_grad(NORM1_W, 1), s[L_DNORM1], s[L_XIN], s[L_RSTD1]);
  sp_sum(NORM1_W, 1);
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

void LlamaBlock::qkv_backward_weight(MicroBatch& mb) {
  const std::vector<Tensor>& s = mb.block_saved[layer_ + 1];
  if (!env_.kv_group) {
    matmul_backward_weight(env_.op, grad(QKV_W), grad(QKV_B), s[L_DQKV], s[L_NORM1F]);
    return;
  }
  // Replicated kv heads: this rank's dK, dV (B,T,2HS) come from its own query heads only, so
  // the k and v rows of dW (and db) are partial sums over the ranks sharing the head. Computed
  // into an f32 scratch [dW (Wl,C) | db (Wl)], summed over them, then added to the gradient.
  const GPTConfig& cfg = *env_.config;
  const Tensor gw = grad(QKV_W), gb = grad(QKV_B);
  const int64_t Wl = gw.dim(0), C = gw.dim(1),
                q_rows = cfg.n_head / env_.tp_size() * cfg.head_size();
  const Tensor part = env_.zeros(mb.workspace, {Wl * (C + (bias_ ? 1 : 0))}, DType::F32);
  const Tensor pw(part.data, {Wl, C}, DType::F32, part.device);
  const Tensor pb = bias_ ? Tensor(part.f32() + Wl * C, {Wl}, DType::F32, part.device) : Tensor();
  matmul_backward_weight(env_.op, pw, pb, s[L_DQKV], s[L_NORM1F]);
  env_.add_kv_replica_grads(part, q_rows, gw, gb);
}

}  // namespace tide
