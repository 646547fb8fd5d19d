#pragma once
// Model states per rank: parameters, gradients and optimizer states, and how ZeRO-DP
// partitions them (Rajbhandari et al., "ZeRO", SC20, section 5 and Table 1).
//
// With Psi parameters, mixed precision and Adam, every parameter costs 2 bytes (param16) +
// 2 bytes (grad16) + K = 12 bytes (fp32 master, momentum, variance). Over Nd data-parallel
// ranks, per rank:
//   stage 0 (DDP)  (2 + 2 + K) Psi
//   stage 1 (Pos)  2 Psi + 2 Psi + K Psi / Nd
//   stage 2 (Pos+g) 2 Psi + (2 + K) Psi / Nd
//   stage 3 (Pos+g+p) (2 + 2 + K) Psi / Nd
// A partition holds ceil(Psi / Nd) elements (the last rank's share is padded).

#include <cstdint>
#include <string>
#include <vector>

#include "tide/estimate/train_setup.h"
#include "tide/model/config.h"

namespace tide {

// Bytes of each kind of model state; "param16" is the compute-precision copy (4 bytes per
// parameter in fp32 training, where there is no separate master copy).
struct ModelStateBytes {
  int64_t param16 = 0;
  int64_t grads = 0;
  int64_t master = 0;
  int64_t adam_m = 0;
  int64_t adam_v = 0;
  int64_t optimizer_bytes() const { return master + adam_m + adam_v; }  // ZeRO's K per param
  int64_t total() const { return param16 + grads + optimizer_bytes(); }
};

// Bytes per parameter of each kind (the unpartitioned Psi = 1 case).
ModelStateBytes bytes_per_parameter(Precision precision, Optimizer optimizer);

// ZeRO's per-rank model-state bytes for psi parameters at the given stage and DP degree,
// partitions exact (no chunks). This is the function ZeRO's Table 1 tabulates.
ModelStateBytes zero_model_states(int64_t psi, int zero_stage, int dp, Precision precision,
                                  Optimizer optimizer);

// One parameter tensor as one tensor-parallel rank holds it.
struct ParamTensor {
  std::string name;
  int64_t elems = 0;
};

// The parameter tensors one tensor-parallel rank of pipeline stage `stage` holds, in
// forward-use order (the chunk layout order). GPT-2 blocks; under TP (Megatron-LM): QKV and
// MLP fc are column-parallel (weights and biases split), attention and MLP projections are
// row-parallel (weights split, biases replicated), layer norms and the position embedding are
// replicated, and the token embedding is vocabulary-parallel (ceil(V/t) rows). Stage 0 holds
// the embeddings; the last stage holds the final layer norm and, when p > 1, its own copy of
// the token embedding for the tied LM head. With t = p = 1 the sizes add up to
// GPTConfig::num_parameters().
std::vector<ParamTensor> stage_param_tensors(const GPTConfig& model, int tp, int pp, int stage);

// Fixed-size chunks over a stage's tensors, packed like memory/chunk_layout.h: greedily in
// order, a tensor never straddles two chunks, the chunk is at least the largest tensor and a
// multiple of 16 elements, and the chunk count is padded to a multiple of the DP degree (chunk
// c is owned by DP rank c % Nd).
struct ChunkPlan {
  int64_t chunk_elems = 0;
  int64_t chunks = 0;         // chunks holding tensors
  int64_t chunks_padded = 0;  // rounded up to a multiple of Nd
  int64_t payload_elems = 0;  // parameters (sum of tensor sizes)
  int64_t owned_chunks(int dp) const { return chunks_padded / dp; }
};
// requested_chunk_elems = 0 picks the smallest valid chunk (the largest tensor); a requested
// size smaller than the largest tensor is an error naming the tensor and the size needed.
// elem_bytes (bytes of a compute-precision parameter) only words that error in MiB.
ChunkPlan plan_chunks(const std::vector<ParamTensor>& tensors, int64_t requested_chunk_elems,
                      int dp, int elem_bytes);

}  // namespace tide
