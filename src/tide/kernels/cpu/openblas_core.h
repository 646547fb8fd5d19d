#pragma once
// The OpenBLAS kernels for this CPU, when the library's own choice falls short.
//
// Why: OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels from the CPU model it
// knows, and falls back to the generic SSE3 "Prescott" kernels for a model it does not: 0.3.21
// (Debian 12) does not know Intel family 6 model 207 (Emerald Rapids), and there tide's sgemm ran
// at 55 GFLOP/s on 2 cores instead of 244 with the AVX-512 kernels (bench/RESULTS.md). The
// library reads OPENBLAS_CORETYPE once, when it is loaded, so a program sets it and re-executes
// itself (apps/tide/main.cpp), unless the user chose a core.

#include <string>

namespace tide::cpu {

// The core OpenBLAS is using now (openblas_get_corename()).
std::string openblas_core();
// The OPENBLAS_CORETYPE that gives this CPU its vector kernels when OpenBLAS fell back to the
// generic core: "Cooperlake" (AVX-512 with BF16), "SkylakeX" (AVX-512), "Haswell" (AVX2 and
// FMA); empty when OpenBLAS chose a specific core itself or the CPU has nothing better.
std::string better_openblas_core();
// Sets OPENBLAS_CORETYPE to better_openblas_core() when that is not empty and the variable is
// unset (the user's choice wins); true when it did: the program must re-execute itself for the
// library to read it.
bool choose_vector_openblas_kernels();

}  // namespace tide::cpu
