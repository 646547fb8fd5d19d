// The kernels floor's entry point of the CUDA module: the table of cuda/cuda_ops.h's functions
// that make_op_context hands to every CUDA OpContext (kernels/cuda_table.h). Designated
// initializers: an entry misnamed or out of order does not compile; one left out stays nullptr,
// which test_kernels' CudaModule test catches.
#include "tide/core/cuda_module.h"
#include "tide/kernels/cuda_table.h"

TIDE_CUDA_MODULE_ENTRY const tide::CudaKernelTable* tide_cuda_kernels() {
  namespace cuda = tide::cuda;
  static const tide::CudaKernelTable table{
      .size = sizeof(tide::CudaKernelTable),
      .make_context = &cuda::make_context,
      .copy_async = &cuda::copy_async,
      .fill_zero_async = &cuda::fill_zero_async,
      .convert_async = &cuda::convert_async,
      .record_event = &cuda::record_event,
      .wait_event = &cuda::wait_event,
      .synchronize_event = &cuda::synchronize_event,
      .synchronize_stream = &cuda::synchronize_stream,
      .embedding_forward = &cuda::embedding_forward,
      .embedding_backward = &cuda::embedding_backward,
      .layernorm_forward = &cuda::layernorm_forward,
      .layernorm_backward_input = &cuda::layernorm_backward_input,
      .layernorm_backward_weight = &cuda::layernorm_backward_weight,
      .rmsnorm_forward = &cuda::rmsnorm_forward,
      .rmsnorm_backward_input = &cuda::rmsnorm_backward_input,
      .rmsnorm_backward_weight = &cuda::rmsnorm_backward_weight,
      .matmul_forward = &cuda::matmul_forward,
      .matmul_backward_input = &cuda::matmul_backward_input,
      .matmul_backward_weight = &cuda::matmul_backward_weight,
      .attention_forward = &cuda::attention_forward,
      .attention_backward = &cuda::attention_backward,
      .rope_forward = &cuda::rope_forward,
      .rope_backward = &cuda::rope_backward,
      .gelu_forward = &cuda::gelu_forward,
      .gelu_backward = &cuda::gelu_backward,
      .swiglu_forward = &cuda::swiglu_forward,
      .swiglu_backward = &cuda::swiglu_backward,
      .residual_forward = &cuda::residual_forward,
      .residual_backward = &cuda::residual_backward,
      .divide_by = &cuda::divide_by,
      .dropout_forward = &cuda::dropout_forward,
      .dropout_backward = &cuda::dropout_backward,
      .crossentropy_forward = &cuda::crossentropy_forward,
      .crossentropy_backward = &cuda::crossentropy_backward,
      .crossentropy_forward_backward = &cuda::crossentropy_forward_backward,
      .residual_layernorm_forward = &cuda::residual_layernorm_forward,
      .vocab_parallel_embedding_forward = &cuda::vocab_parallel_embedding_forward,
      .vocab_parallel_embedding_backward = &cuda::vocab_parallel_embedding_backward,
      .add_position_embedding = &cuda::add_position_embedding,
      .position_embedding_backward = &cuda::position_embedding_backward,
      .vocab_parallel_ce_row_max = &cuda::vocab_parallel_ce_row_max,
      .vocab_parallel_ce_partials = &cuda::vocab_parallel_ce_partials,
      .vocab_parallel_ce_losses = &cuda::vocab_parallel_ce_losses,
      .vocab_parallel_crossentropy_backward = &cuda::vocab_parallel_crossentropy_backward,
      .permute_sequence_rows = &cuda::permute_sequence_rows,
  };
  return &table;
}
