#include "tide/model/gpt.h"

#include <cmath>
#include <cstring>
#include <string>

namespace tide {

namespace {
// Names of a transformer layer's 12 parameters, in declaration order.
const char* const kLayerParams[12] = {
    "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
    "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
}  // namespace

ChunkLayout GPT::make_layout(const GPTConfig& c) {
  const int64_t C = c.n_embd;
  const Shape layer_shapes[12] = {{C}, {C}, {3 * C, C}, {3 * C}, {C, C},     {C},
                                  {C}, {C}, {4 * C, C}, {4 * C}, {C, 4 * C}, {C}};
  ChunkLayout layout;
  layout.add("wte", {c.vocab_size, C}, true);
  layout.add("wpe", {c.max_seq_len, C}, true);
  for (int l = 0; l < c.n_layer; ++l)
    for (int i = 0; i < 12; ++i)
      layout.add(fmt::format("h.{}.{}", l, kLayerParams[i]), layer_shapes[i],
                 layer_shapes[i].ndim >= 2);  // decay matrices, not biases or norms
  layout.add("ln_f.weight", {C}, false);
  layout.add("ln_f.bias", {C}, false);
  return layout;
}

GPT::GPT(const GPTConfig& config, ActivationPolicy policy, int64_t chunk_elems, bool with_optimizer,
         int group_size)
    : config_(config) {
  config_.validate();
  ChunkLayout layout = make_layout(config_);
  layout.pack(chunk_elems, group_size);
  store_ = std::make_unique<ChunkStore>(std::move(layout), DType::F32, with_optimizer);
  env_.config = &config_;
  env_.policy = policy;
  env_.store = store_.get();

  const ChunkLayout& lay = store_->layout();
  const int wte = lay.find("wte"), wpe = lay.find("wpe");
  blocks_.push_back(std::make_unique<EmbeddingBlock>(env_, wte, wpe));
  grads_done_after_.push_back({wte, wpe});
  for (int l = 0; l < config_.n_layer; ++l) {
    std::vector<int> ids;
    for (const char* name : kLayerParams) ids.push_back(lay.find(fmt::format("h.{}.{}", l, name)));
    grads_done_after_.push_back(ids);
    blocks_.push_back(std::make_unique<TransformerBlock>(env_, l, std::move(ids)));
  }
  const int lnf_w = lay.find("ln_f.weight"), lnf_b = lay.find("ln_f.bias");
  blocks_.push_back(std::make_unique<HeadBlock>(env_, wte, lnf_w, lnf_b));
  grads_done_after_.push_back({lnf_w, lnf_b});
}

void GPT::init_weights(uint64_t seed) {
  const ChunkLayout& lay = store_->layout();
  const float proj_std = 0.02f / std::sqrt(2.0f * config_.n_layer);
  for (int id = 0; id < lay.num_tensors(); ++id) {
    const TensorSlot& s = lay.slot(id);
    float* w = store_->tensor(ChunkKind::MASTER, id).f32();
    const bool is_bias = s.name.ends_with(".bias");
    const bool is_norm = s.name.find("ln_") != std::string::npos;
    if (is_norm || is_bias) {
      const float v = (is_norm && !is_bias) ? 1.0f : 0.0f;
      for (int64_t i = 0; i < s.numel; ++i) w[i] = v;
      continue;
    }
    const float std = s.name.ends_with("c_proj.weight") ? proj_std : 0.02f;
    // One RNG stream per tensor, keyed by its name's position: independent of chunking.
    const PhiloxStream rng{seed, rng_stream_id(0x1417, static_cast<uint64_t>(id))};
    for (int64_t i = 0; i < s.numel; ++i) w[i] = std * rng.normal(static_cast<uint64_t>(i));
  }
}

std::unique_ptr<MicroBatch> GPT::make_micro_batch(int B, int T) const {
  TIDE_CHECK(B >= 1, "micro-batch size must be at least 1 (got {})", B);
  TIDE_CHECK(T >= 1 && T <= config_.max_seq_len,
             "sequence length {} is outside [1, model.max_seq_len = {}]; lower the sequence "
             "length or raise model.max_seq_len",
             T, config_.max_seq_len);
  auto mb = std::make_unique<MicroBatch>();
  mb->B = B;
  mb->T = T;
  const int64_t N = int64_t{B} * T, C = config_.n_embd;
  // saved: tokens, targets, L+1 residuals, dresidual, then every block's saved tensors.
  size_t saved =
      2 * Arena::aligned(static_cast<size_t>(N) * 4) + (config_.n_layer + 2) * f32_bytes(N * C);
  size_t workspace = 0;
  for (const auto& b : blocks_) {
    saved += b->saved_bytes(B, T);
    workspace = std::max(workspace, b->workspace_bytes(B, T));
  }
  mb->saved = Arena("activations", saved);
  mb->workspace = Arena("workspace", workspace);
  mb->tokens = mb->saved.alloc_tensor({B, T}, DType::I32);
  mb->targets = mb->saved.alloc_tensor({B, T}, DType::I32);
  for (int l = 0; l <= config_.n_layer; ++l)
    mb->residual.push_back(mb->saved.alloc_tensor({B, T, C}));
  mb->dresidual = mb->saved.alloc_tensor({B, T, C});
  mb->saved_mark = mb->saved.mark();
  mb->block_saved.resize(blocks_.size());
  return mb;
}

void GPT::set_states(int block, TensorState s) {
  for (int id : blocks_[block]->param_ids()) store_->set_state(id, s);
}

void GPT::forward_block(MicroBatch& mb, int i) {
  mb.workspace_mark = mb.workspace.mark();
  set_states(i, TensorState::COMPUTE);
  blocks_[i]->forward(mb);
  set_states(i, TensorState::HOLD_AFTER_FWD);
  mb.workspace.rewind(mb.workspace_mark);
}

void GPT::backward_input_block(MicroBatch& mb, int i) {
  mb.workspace_mark = mb.workspace.mark();  // B's workspace lives until this block's W
  set_states(i, TensorState::COMPUTE);
  blocks_[i]->backward_input(mb);
  set_states(i, TensorState::HOLD_AFTER_BWD);
}

void GPT::backward_weight_block(MicroBatch& mb, int i, bool last_micro_batch) {
  set_states(i, TensorState::COMPUTE);
  blocks_[i]->backward_weight(mb);
  set_states(i, TensorState::HOLD_AFTER_BWD);
  mb.workspace.rewind(mb.workspace_mark);
  if (last_micro_batch)
    for (int id : grads_done_after_[i]) store_->mark_grad_ready(id);
}

float GPT::forward(MicroBatch& mb) {
  TIDE_ASSERT(mb.residual.size() == static_cast<size_t>(config_.n_layer) + 1);
  // Drop the previous micro-batch's saved activations (everything after dresidual).
  mb.saved.rewind(mb.saved_mark);
  for (int i = 0; i < num_blocks(); ++i) forward_block(mb, i);
  return mb.loss;
}

void GPT::backward(MicroBatch& mb, bool last_micro_batch) {
  TIDE_CHECK(mb.training, "backward needs a micro-batch run forward with training = true");
  std::memset(mb.dresidual.data, 0, mb.dresidual.nbytes());
  for (int i = num_blocks() - 1; i >= 0; --i) {
    backward_input_block(mb, i);
    backward_weight_block(mb, i, last_micro_batch);
  }
}

}  // namespace tide
