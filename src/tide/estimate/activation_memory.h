#pragma once
// Activation memory of a transformer layer, after Korthikanti et al., "Reducing Activation
// Recomputation in Large Transformer Models" (2022), Table 2. Bytes per layer, one micro-batch,
// on one tensor-parallel rank, with 16-bit activations:
//
//   no parallelism               sbh (34 + 5as/h)
//   tensor parallel (TP)         sbh (10 + 24/t + 5as/(ht))
//   TP + sequence parallel (SP)  sbh (34/t + 5as/(ht))
//   TP + selective recompute     sbh (10 + 24/t)
//   TP + SP + selective          sbh (34/t)
//   full recompute               2sbh                (the layer input only)
//
// Where the numbers come from (elements of (s,b,h) unless noted; e = bytes per activation
// element, 2 in the paper; dropout masks are 1 byte per element):
//   layer norms: 2 inputs                         2 sbh e   replicated under TP
//   QKV matmul input, MLP fc input                2 sbh e   replicated under TP
//   two dropout masks (attention out, MLP out)    2 sbh     replicated under TP
//   Q and K, V, attention projection input        4 sbh e   split over t
//   GeLU input and output (4h wide each)          8 sbh e   split over t
//   attention core: softmax out, its dropout mask, dropout out:  as^2b (2e + 1), split over t
// so with e = 2: 8+2 = 10 replicated, 24 split, and 5as^2b split, as in the table. Sequence
// parallelism splits the replicated part over t as well. Selective recompute drops the
// attention core; full recompute keeps only the layer input (sbh e), which under SP is
// already split over t (the table's 2sbh row is without SP).
//
// The Llama family (RMSNorm, SwiGLU, grouped-query attention, RoPE; dropout only on the
// attention probabilities, its mask drawn again in the backward), counted the
// same way from what its layer keeps (model/llama_block.cpp), with kv the key/value width
// (n_kv_head h/a; t h/a when n_kv_head < t replicates a kv head on each rank) and f the SwiGLU
// width (intermediate_size):
//   layer input, first norm's output, second norm's input and output   4 sbh e   replicated
//   Q, K, V (rotated)                                      sb(h + 2kv) e        split over t
//   attention projection input                             sbh e                split over t
//   gate and up outputs, their SwiGLU product              3 sbf e              split over t
//   attention core: scores and softmax output              2as^2b e             split over t
// so sbh (4e + (2 + 2kv/h + 3f/h) e/t) + 2as^2b e/t; Llama 3.1 8B (kv = h/4, f = 3.5h, e = 2):
// sbh (8 + 26/t) + 4as^2b/t. No dropout masks kept; the norms' f32 statistics (2 sb 4 bytes) are
// left out as the paper leaves out GPT's layernorm statistics.
//
// ZeRO-R P_a (`partition`: activation_checkpointing.partition_activations; full recompute,
// t > 1, no SP) keeps only the rank's 1/t of each layer input, sbh e / t, plus one whole input
// per micro-batch (the residual buffer the forward writes while the slices are kept; tide's
// runtime holds two whole boundaries instead of L + 1, docs/tensor-parallel.md) and one whole
// input in the recompute workspace (the slices all-gathered). With `cpu_checkpointing` the
// slices are on the host (host_checkpoint_bytes), none on the device.

#include <cstdint>

#include "tide/estimate/train_setup.h"

namespace tide {

struct ActivationShape {
  int64_t s = 0;  // sequence length
  int64_t b = 0;  // micro-batch size
  int64_t h = 0;  // hidden size
  int64_t a = 0;  // attention heads
  int64_t v = 0;  // vocabulary size
  int t = 1;      // tensor-parallel degree
  bool sp = false;
  int elem_bytes = 2;              // bytes of one activation element (2 for bf16/fp16, 4 for fp32)
  bool partition = false;          // ZeRO-R P_a (full recompute, t > 1, no SP; see above)
  bool cpu_checkpointing = false;  // with partition: the slices on the host
  // The Llama family's layer (above), with its key/value width and SwiGLU width; GPT-2's
  // otherwise (kv = h, a 4h GELU MLP).
  bool llama = false;
  // The key/value width summed over the t ranks: n_kv_head h/a, or t h/a when n_kv_head < t
  // (each rank holds one replicated kv head: model/layout.h), so kv/t is a rank's.
  int64_t kv = 0;
  int64_t ffn = 0;  // intermediate_size
};

// An ActivationShape's fields from a training setup (the model's family included).
ActivationShape activation_shape(const TrainSetup& setup);

// Bytes one rank keeps between forward and backward for one layer and one micro-batch.
int64_t layer_activation_bytes(const ActivationShape& x, Recompute policy);

// Bytes that exist only while a layer's backward recomputes what was not kept: the whole
// layer's activations (full) or its attention core (selective); 0 when nothing is recomputed.
int64_t recompute_workspace_bytes(const ActivationShape& x, Recompute policy);

// Bytes of the temporaries a layer's backward (B) holds while its ops run, whatever the policy:
// the gradients of the MLP hidden (sbh 4/t) and of the attention output (sbh/t) (Llama: of the
// SwiGLU product sbf/t, the attention output sbh/t and the rotated q, k, v sb(h + 2kv)/t), and
// under SP the two (s,b,h) partial sums of the layernorm outputs' gradients before their
// reduce-scatter. The engine acquires parameters op by op (model/param_groups.h), so automatic
// placement sees them beside the chunks it places.
int64_t backward_workspace_bytes(const ActivationShape& x);

// P_a under full recompute: the whole residual buffer one micro-batch keeps besides the
// partitioned slices (sbh e; 0 without P_a), and the host bytes of one layer's slice with
// cpu_checkpointing (sbh e / t; 0 otherwise).
int64_t partition_buffer_bytes(const ActivationShape& x, Recompute policy);
int64_t host_checkpoint_bytes(const ActivationShape& x, Recompute policy);

// Input layer (first pipeline stage): the embedding dropout mask, sbh bytes (sbh/t under SP),
// as in Korthikanti et al. section 4.3; none in the Llama family.
int64_t input_layer_activation_bytes(const ActivationShape& x);

// Output layer (last pipeline stage): the final layer norm's input and the LM head's input
// (2 sbh e, split over t only under SP) and the fp32 logits for the cross-entropy
// (4 s b v / t with a vocabulary-parallel head). With SP and e = 2 this is the paper's
// 4sbh/t (1 + v/h). The logits' gradient is assumed to overwrite the logits in place.
int64_t output_layer_activation_bytes(const ActivationShape& x);

// A model chunk that does not end in the output layer (a pipeline stage's chunk before the
// last virtual stage) keeps, per micro-batch, its output (what it sends on) and that output's
// gradient (what it receives back): 2 sbh e, split over t only under SP. The output layer's
// figure holds the last chunk's.
int64_t stage_boundary_bytes(const ActivationShape& x);

}  // namespace tide
