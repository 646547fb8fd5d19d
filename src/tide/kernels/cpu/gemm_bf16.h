#pragma once
// Native bf16 GEMM for the CPU matmul ops: bf16 operands read as stored, f32 accumulation, each
// output rounded to nearest-even once (f32 operands and outputs also taken, for the LM head).
//
// Why: the widening reference (f32_buffer.h + OpenBLAS sgemm) converts every operand to f32
// and runs at f32 speed. A CPU with AMX (Sapphire/Emerald Rapids) multiplies bf16 tiles about an
// order of magnitude faster than its f32 FMA units; one with AVX512-BF16 only (Cooper Lake, Zen 4
// and 5, AMX-less virtual machines) takes two bf16 products per f32 lane per instruction
// (vdpbf16ps) without widening, which pays where that instruction runs at the FMA units' rate
// (not on the Emerald Rapids VM measured: opt-in there). PyTorch's bf16 autocast (oneDNN) uses
// both (issue #26). Debian 12's OpenBLAS 0.3.21 has no sbgemm, and oneDNN 2.6 would add a shared
// library to carry and its blocking choices depend on the shapes, so this is a small
// hand-written kernel pair sharing one packing, chosen at run time (like the AVX-512 AdamW);
// other CPUs keep the widening reference.
//
// Reproducibility: every output element is one fixed sequence of products over K in chunks of
// 32 (zero-padded): AMX tile products, or vdpbf16ps pairs in k order. So its bits depend only
// on the path, its row of op(A), its column of op(B) and K: not on M, N, its position, the
// blocking or the number of threads. The sum order differs from OpenBLAS's (and between the
// two paths), so a result can differ from the widening reference's by one bf16 rounding step
// where the f32 sums straddle a rounding boundary (rare: the op table's 16-bit check allows 1%
// of the elements). Both treat bf16 subnormal inputs (below 1.2e-38) as zero and flush
// subnormal f32 sums to zero.

#include <cstdint>
#include <string_view>

#include "tide/core/dtype.h"
#include "tide/kernels/cpu/gemm_packed.h"

namespace tide::cpu {

enum class Bf16GemmPath {
  kReference,   // widen to f32, OpenBLAS sgemm (f32_buffer.h, gemm.h): any CPU
  kAmx,         // AMX-BF16 tiles (Intel Sapphire Rapids and later, Linux 5.16+)
  kAvx512Bf16,  // AVX512-BF16 vdpbf16ps (Intel Cooper Lake and later, AMD Zen 4 and later)
};

std::string_view bf16_gemm_path_name(Bf16GemmPath p);
// Whether this CPU and kernel can run path p (kReference: always). Asking for kAmx requests
// the AMX tile state from Linux once (arch_prctl ARCH_REQ_XCOMP_PERM).
bool bf16_gemm_path_supported(Bf16GemmPath p);
// The path the bf16 matmul ops take: AMX where supported, else AVX512-BF16 on an AMD CPU
// that has it (on Intel only when chosen), else the reference, unless the environment variable
// TIDE_CPU_BF16_GEMM ("amx", "avx512bf16" or "reference") chose one (an unknown or unsupported
// value is an error naming the choices), or set_bf16_gemm_path did.
Bf16GemmPath bf16_gemm_path();
// Overrides the path for the whole process (tests, benchmarks); throws if p is not supported.
void set_bf16_gemm_path(Bf16GemmPath p);
// How many products the native path has computed since the process started (a test's proof
// that the matmul ops took it).
int64_t bf16_gemm_native_calls();

// gemm_bf16's operands and epilogue are gemm_packed.h's GemmOperand and GemmEpilogue. A factor
// may be bf16, or f32: an f32 factor enters as three bf16 terms per value (hi + mid + lo, exact
// for normal values), so its products are those of the f32 values and the GEMM costs three
// times the work (the head's f32 logits and their gradient, against bf16 weights).

// Whether gemm_bf16 takes factors of dtypes a and b and an output of dtype c: bf16 or f32
// each, not both factors f32 (that is sgemm's work).
bool gemm_bf16_takes(DType a, DType b, DType c);

// Row-major C(M,N) <- op(A) @ op(B) with `epilogue`, through `path` (a native one); C of
// dtype c_dtype with leading dimension ldc.
void gemm_bf16(Bf16GemmPath path, int64_t M, int64_t N, int64_t K, const GemmOperand& A,
               const GemmOperand& B, void* C, DType c_dtype, int64_t ldc, GemmEpilogue epilogue,
               const float* bias = nullptr);

namespace bf16_detail {
// The native paths' pieces (gemm_bf16_kernels.cpp, compiled for AMX or AVX-512 whatever -march
// says; called only where bf16_gemm_path_supported said the CPU allows it), gemm_packed.h's
// PackTile and Kernel32x32. A chunk of a packed tile is 512 bf16 (1 KiB), 32 values of K:
//   A tile: (16 rows, 32 k) row-major;  B tile: (16 k-pairs, 16 columns, 2), VNNI: element
//   (k, j) of a chunk at [k/2][j][k%2], the layout TDPBF16PS reads (and a row of it, one
//   k-pair of 16 columns, is vdpbf16ps's operand).
// An f32 operand's chunk is `terms` = 3 such blocks, its hi, mid and lo terms (a bf16 operand:
// terms = 1); the kernels take, per chunk, the terms in order (a one-term operand's block
// against each).
packed_detail::PackTileFn pack_a_tile, pack_b_tile;
packed_detail::Kernel32x32Fn kernel_32x32_amx, kernel_32x32_avx512;
}  // namespace bf16_detail

}  // namespace tide::cpu
