// cuDNN's fused attention (attention_cudnn.h says when it runs). The graphs follow
// cudnn-frontend's SDPA samples and llm.c's cudnn_att.cpp: q, k, v read in place from the
// qkv rows (strides, no copies), causal mask, the scale 1/sqrt(HS), the softmax statistics
// (the row's log-sum-exp, as tide's lse) in f32, a deterministic backward (tide's GPU results
// repeat bit for bit).
#include "tide/kernels/cuda/attention_cudnn.h"

#include "tide/kernels/cuda/context.h"

#if TIDE_HAVE_CUDNN_FRONTEND

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

#include <cudnn_frontend.h>

#include "tide/kernels/cuda/cuda_check.h"

namespace fe = cudnn_frontend;

// The frontend's dynamic loading (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING) finds every cuDNN
// symbol through this handle, which the user of the headers defines and opens: a global of the
// library's design, set once per process below.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace tide {

namespace {

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV };

// Opens libcudnn.so.9 once per process; the reason when it cannot.
const std::string& cudnn_load_error() {
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    cudnn_frontend::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (cudnn_frontend::cudnn_dlhandle == nullptr) {
      const char* e = dlerror();
      error = e != nullptr ? e : "libcudnn.so.9 could not be opened";
    }
  });
  return error;
}

// Says once per process why the fused attention is not used (tide's kernels run instead).
void note_once(const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr,
                 "tide: cuDNN fused attention not used (%s); attention runs tide's CUDA kernels\n",
                 why.c_str());
  });
}

}  // namespace

// What a context keeps for the fused attention: the cuDNN handle on the context's stream and
// the graphs built so far, by shape.
struct CudnnAttention {
  // One shape's two graphs and the workspace each needs; ok false when cuDNN declined it.
  struct ShapeGraphs {
    bool ok = false;
    std::shared_ptr<fe::graph::Graph> forward, backward;
    int64_t forward_workspace = 0, backward_workspace = 0;
  };
  cudnnHandle_t handle = nullptr;
  std::map<std::tuple<int, int, int, int, int, int>, ShapeGraphs> graphs;  // dtype,B,T,NH,NKV,HS
  ~CudnnAttention() {
    if (handle != nullptr) (void)fe::detail::destroy_handle(handle);
  }
};

namespace cuda {

namespace {

using ShapeGraphs = CudnnAttention::ShapeGraphs;

bool eligible(const OpContext& ctx, DType dtype, int C, int NH, float dropout_p) {
  const int HS = C / NH;
  return ctx.fused_attention && (dtype == DType::BF16 || dtype == DType::F16) &&
         dropout_p == 0.0f && HS % 8 == 0 && HS <= 128;
}

// A (B, n_heads, T, HS) view of a (B,T,row) tensor whose heads are consecutive HS-column slices
// of each row (the view's pointer, given at execution, is its first head's first column).
fe::graph::Tensor_attributes heads(const char* name, int64_t uid, int B, int n_heads, int T, int HS,
                                   int row) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({B, n_heads, T, HS})
      .set_stride({static_cast<int64_t>(T) * row, HS, row, 1});
}

fe::error_t build(fe::graph::Graph& g, cudnnHandle_t handle, int64_t& workspace) {
  if (auto e = g.validate(); e.is_bad()) return e;
  if (auto e = g.build_operation_graph(handle); e.is_bad()) return e;
  if (auto e = g.create_execution_plans({fe::HeurMode_t::A}); e.is_bad()) return e;
  if (auto e = g.check_support(handle); e.is_bad()) return e;
  if (auto e = g.build_plans(handle); e.is_bad()) return e;
  return g.get_workspace_size(workspace);
}

// One shape's two graphs, described (not built).
ShapeGraphs describe_graphs(DType dtype, int B, int T, int NH, int NKV, int HS) {
  ShapeGraphs s;
  const auto io = dtype == DType::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
  const int C = NH * HS, W = (NH + 2 * NKV) * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  auto new_graph = [&] {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(io)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return g;
  };
  // q, k, v: their columns of the qkv rows (B,T,W); out and dout (B,T,C); the statistics (B,NH,T).
  auto qkv_inputs = [&](fe::graph::Graph& g) {
    return std::array{g.tensor(heads("Q", kQ, B, NH, T, HS, W)),
                      g.tensor(heads("K", kK, B, NKV, T, HS, W)),
                      g.tensor(heads("V", kV, B, NKV, T, HS, W))};
  };
  const std::vector<int64_t> stats_dim{B, NH, T, 1}, stats_stride{int64_t{NH} * T, T, 1, 1};

  s.forward = new_graph();
  {
    auto [q, k, v] = qkv_inputs(*s.forward);
    auto options = fe::graph::SDPA_attributes()
                       .set_name("attention_forward")
                       .set_generate_stats(true)
                       .set_causal_mask(true)
                       .set_attn_scale(scale);
    auto [o, stats] = s.forward->sdpa(q, k, v, options);
    o->set_output(true).set_uid(kO).set_dim({B, NH, T, HS}).set_stride({int64_t{T} * C, HS, C, 1});
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(stats_dim)
        .set_stride(stats_stride);
  }
  s.backward = new_graph();
  {
    auto [q, k, v] = qkv_inputs(*s.backward);
    auto o = s.backward->tensor(fe::graph::Tensor_attributes()
                                    .set_name("O")
                                    .set_uid(kO)
                                    .set_dim({B, NH, T, HS})
                                    .set_stride({int64_t{T} * C, HS, C, 1}));
    auto dO = s.backward->tensor(fe::graph::Tensor_attributes()
                                     .set_name("dO")
                                     .set_uid(kdO)
                                     .set_dim({B, NH, T, HS})
                                     .set_stride({int64_t{T} * C, HS, C, 1}));
    auto stats = s.backward->tensor(fe::graph::Tensor_attributes()
                                        .set_name("stats")
                                        .set_uid(kStats)
                                        .set_data_type(fe::DataType_t::FLOAT)
                                        .set_dim(stats_dim)
                                        .set_stride(stats_stride));
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("attention_backward")
                       .set_causal_mask(true)
                       .set_attn_scale(scale)
                       .set_deterministic_algorithm(true);
    auto [dq, dk, dv] = s.backward->sdpa_backward(q, k, v, o, dO, stats, options);
    // The gradients in the qkv layout (B,T,W), in the caller's scratch.
    dq->set_output(true)
        .set_uid(kdQ)
        .set_dim({B, NH, T, HS})
        .set_stride({int64_t{T} * W, HS, W, 1});
    dk->set_output(true)
        .set_uid(kdK)
        .set_dim({B, NKV, T, HS})
        .set_stride({int64_t{T} * W, HS, W, 1});
    dv->set_output(true)
        .set_uid(kdV)
        .set_dim({B, NKV, T, HS})
        .set_stride({int64_t{T} * W, HS, W, 1});
  }
  return s;
}

// The graphs of one shape, built on its first call (cuDNN's plan building takes a while).
const ShapeGraphs& graphs_for(CudnnAttention& state, DType dtype, int B, int T, int NH, int NKV,
                              int HS) {
  const auto key = std::make_tuple(static_cast<int>(dtype), B, T, NH, NKV, HS);
  if (auto it = state.graphs.find(key); it != state.graphs.end()) return it->second;
  ShapeGraphs& s = state.graphs[key] = describe_graphs(dtype, B, T, NH, NKV, HS);
  fe::error_t e = build(*s.forward, state.handle, s.forward_workspace);
  if (e.is_good()) e = build(*s.backward, state.handle, s.backward_workspace);
  s.ok = e.is_good();
  if (!s.ok) {
    note_once(fmt::format("cuDNN declined B={} T={} NH={} NKV={} HS={} {}: {}", B, T, NH, NKV, HS,
                          dtype_name(dtype), e.get_message()));
    s.forward.reset();
    s.backward.reset();
  }
  return s;
}

// The context's cuDNN state, made on first use; nullptr when cuDNN cannot be loaded.
CudnnAttention* state_of(const OpContext& ctx) {
  CudaHandles& h = handles_of(ctx);
  if (h.cudnn_attention) return h.cudnn_attention.get();
  if (const std::string& error = cudnn_load_error(); !error.empty()) {
    note_once(error);
    return nullptr;
  }
  auto state = std::make_shared<CudnnAttention>();
  if (fe::detail::create_handle(&state->handle) != CUDNN_STATUS_SUCCESS) {
    note_once("cudnnCreate failed");
    return nullptr;
  }
  h.cudnn_attention = std::move(state);
  return h.cudnn_attention.get();
}

const ShapeGraphs* ready_graphs(const OpContext& ctx, DType dtype, int B, int T, int C, int NH,
                                int NKV, float dropout_p) {
  if (!eligible(ctx, dtype, C, NH, dropout_p)) return nullptr;
  CudnnAttention* state = state_of(ctx);
  if (state == nullptr) return nullptr;
  if (fe::detail::set_stream(state->handle, stream_of(ctx)) != CUDNN_STATUS_SUCCESS)
    throw Error("cudnnSetStream failed for the fused attention");
  const ShapeGraphs& s = graphs_for(*state, dtype, B, T, NH, NKV, C / NH);
  return s.ok ? &s : nullptr;
}

void execute(const OpContext& ctx, const fe::graph::Graph& g,
             std::unordered_map<int64_t, void*>& pack, void* workspace) {
  if (auto e = g.execute(handles_of(ctx).cudnn_attention->handle, pack, workspace); e.is_bad())
    throw Error(fmt::format("cuDNN fused attention: {}", e.get_message()));
  TIDE_CUDA_CHECK(cudaGetLastError());
}

// The forward graph's variant pack over qkv, out and the statistics.
std::unordered_map<int64_t, void*> forward_pack(DType dtype, const void* qkv, void* out,
                                                float* stats, int NH, int NKV, int HS) {
  const auto* base = static_cast<const char*>(qkv);
  const size_t elem = dtype_size(dtype);
  return {{kQ, const_cast<char*>(base)},
          {kK, const_cast<char*>(base + elem * NH * HS)},
          {kV, const_cast<char*>(base + elem * (NH + NKV) * HS)},
          {kO, out},
          {kStats, stats}};
}

}  // namespace

bool cudnn_attention_forward(const OpContext& ctx, DType dtype, void* out, float* lse,
                             const void* qkv, int B, int T, int C, int NH, int NKV,
                             float dropout_p) {
  const ShapeGraphs* s = ready_graphs(ctx, dtype, B, T, C, NH, NKV, dropout_p);
  if (s == nullptr) return false;
  void* workspace =
      s->forward_workspace > 0 ? handles_of(ctx).scratch(s->forward_workspace) : nullptr;
  auto pack = forward_pack(dtype, qkv, out, lse, NH, NKV, C / NH);
  execute(ctx, *s->forward, pack, workspace);
  ++handles_of(ctx).fused_attention_calls;
  return true;
}

const void* cudnn_attention_backward(const OpContext& ctx, DType dtype, const void* dout,
                                     const void* qkv, int B, int T, int C, int NH, int NKV,
                                     float dropout_p) {
  const ShapeGraphs* s = ready_graphs(ctx, dtype, B, T, C, NH, NKV, dropout_p);
  if (s == nullptr) return nullptr;
  const int HS = C / NH, W = (NH + 2 * NKV) * HS;
  const size_t elem = dtype_size(dtype);
  // Scratch: the gradient (B,T,W), the recomputed output (B,T,C) and statistics (B,NH,T), and
  // the larger of the two graphs' workspaces.
  const size_t grad_bytes = CudaHandles::aligned(int64_t{B} * T * W * elem);
  const size_t out_bytes = CudaHandles::aligned(int64_t{B} * T * C * elem);
  const size_t stats_bytes = CudaHandles::aligned(int64_t{B} * NH * T * sizeof(float));
  const size_t workspace_bytes =
      CudaHandles::aligned(std::max(s->forward_workspace, s->backward_workspace));
  char* scratch = static_cast<char*>(
      handles_of(ctx).scratch(grad_bytes + out_bytes + stats_bytes + workspace_bytes));
  char* grad = scratch;
  char* out = grad + grad_bytes;
  auto* stats = reinterpret_cast<float*>(out + out_bytes);
  void* workspace = workspace_bytes > 0 ? out + out_bytes + stats_bytes : nullptr;
  auto pack = forward_pack(dtype, qkv, out, stats, NH, NKV, HS);
  execute(ctx, *s->forward, pack, workspace);
  pack[kdO] = const_cast<void*>(dout);
  pack[kdQ] = grad;
  pack[kdK] = grad + elem * NH * HS;
  pack[kdV] = grad + elem * (NH + NKV) * HS;
  execute(ctx, *s->backward, pack, workspace);
  ++handles_of(ctx).fused_attention_calls;
  return grad;
}

}  // namespace cuda
}  // namespace tide

#else  // no cudnn-frontend headers: every call declines

namespace tide::cuda {

bool cudnn_attention_forward(const OpContext&, DType, void*, float*, const void*, int, int, int,
                             int, int, float) {
  return false;
}

const void* cudnn_attention_backward(const OpContext&, DType, const void*, const void*, int, int,
                                     int, int, int, float) {
  return nullptr;
}

}  // namespace tide::cuda

#endif
