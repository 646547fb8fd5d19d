#pragma once
// What the CUDA module (core/cuda_module.h) offers the kernels floor: make_op_context's CUDA
// half, the mover's (mover.h) and every op's kernel (cuda/cuda_ops.h), as pointers. make_op_context
// fetches the table once and keeps it in the OpContext (OpContext::cuda), so an op calls its kernel
// through the context like everything else it needs. Filled by cuda/module_entry.cpp.

#include <cstddef>

#include "tide/kernels/cuda/cuda_ops.h"

namespace tide {

struct CudaKernelTable {
  size_t size = sizeof(CudaKernelTable);
  decltype(&cuda::make_context) make_context = nullptr;
  decltype(&cuda::copy_async) copy_async = nullptr;
  decltype(&cuda::fill_zero_async) fill_zero_async = nullptr;
  decltype(&cuda::convert_async) convert_async = nullptr;
  decltype(&cuda::record_event) record_event = nullptr;
  decltype(&cuda::wait_event) wait_event = nullptr;
  decltype(&cuda::synchronize_event) synchronize_event = nullptr;
  decltype(&cuda::synchronize_stream) synchronize_stream = nullptr;
  decltype(&cuda::embedding_forward) embedding_forward = nullptr;
  decltype(&cuda::embedding_backward) embedding_backward = nullptr;
  decltype(&cuda::layernorm_forward) layernorm_forward = nullptr;
  decltype(&cuda::layernorm_backward_input) layernorm_backward_input = nullptr;
  decltype(&cuda::layernorm_backward_weight) layernorm_backward_weight = nullptr;
  decltype(&cuda::rmsnorm_forward) rmsnorm_forward = nullptr;
  decltype(&cuda::rmsnorm_backward_input) rmsnorm_backward_input = nullptr;
  decltype(&cuda::rmsnorm_backward_weight) rmsnorm_backward_weight = nullptr;
  decltype(&cuda::matmul_forward) matmul_forward = nullptr;
  decltype(&cuda::matmul_backward_input) matmul_backward_input = nullptr;
  decltype(&cuda::matmul_backward_weight) matmul_backward_weight = nullptr;
  decltype(&cuda::attention_forward) attention_forward = nullptr;
  decltype(&cuda::attention_backward) attention_backward = nullptr;
  decltype(&cuda::rope_forward) rope_forward = nullptr;
  decltype(&cuda::rope_backward) rope_backward = nullptr;
  decltype(&cuda::gelu_forward) gelu_forward = nullptr;
  decltype(&cuda::gelu_backward) gelu_backward = nullptr;
  decltype(&cuda::swiglu_forward) swiglu_forward = nullptr;
  decltype(&cuda::swiglu_backward) swiglu_backward = nullptr;
  decltype(&cuda::residual_forward) residual_forward = nullptr;
  decltype(&cuda::residual_backward) residual_backward = nullptr;
  decltype(&cuda::divide_by) divide_by = nullptr;
  decltype(&cuda::dropout_forward) dropout_forward = nullptr;
  decltype(&cuda::dropout_backward) dropout_backward = nullptr;
  decltype(&cuda::crossentropy_forward) crossentropy_forward = nullptr;
  decltype(&cuda::crossentropy_backward) crossentropy_backward = nullptr;
  decltype(&cuda::crossentropy_forward_backward) crossentropy_forward_backward = nullptr;
  decltype(&cuda::residual_layernorm_forward) residual_layernorm_forward = nullptr;
  decltype(&cuda::vocab_parallel_embedding_forward) vocab_parallel_embedding_forward = nullptr;
  decltype(&cuda::vocab_parallel_embedding_backward) vocab_parallel_embedding_backward = nullptr;
  decltype(&cuda::add_position_embedding) add_position_embedding = nullptr;
  decltype(&cuda::position_embedding_backward) position_embedding_backward = nullptr;
  decltype(&cuda::vocab_parallel_ce_row_max) vocab_parallel_ce_row_max = nullptr;
  decltype(&cuda::vocab_parallel_ce_partials) vocab_parallel_ce_partials = nullptr;
  decltype(&cuda::vocab_parallel_ce_losses) vocab_parallel_ce_losses = nullptr;
  decltype(&cuda::vocab_parallel_crossentropy_backward) vocab_parallel_crossentropy_backward =
      nullptr;
  decltype(&cuda::permute_sequence_rows) permute_sequence_rows = nullptr;
};

}  // namespace tide
