#pragma once
// The OpenBLAS kernels for this CPU, when the library's own choice falls short.
//
// Why: OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels from the CPU model it
// knows, and falls back to the generic SSE3 "Prescott" kernels for a model it does not: 0.3.21
// (Debian 12) does not know Intel family 6 model 207 (Emerald Rapids), and there tide's sgemm ran
// at 55 GFLOP/s on 2 cores instead of 244 with the AVX-512 kernels (bench/RESULTS.md). The
// library reads OPENBLAS_CORETYPE once, when it is loaded, so a program sets it and re-executes
// itself (apps/tide/main.cpp), unless the user chose a core.

namespace tide::cpu {

// Where OpenBLAS fell back to its generic core and OPENBLAS_CORETYPE is unset (the user's choice
// wins), sets it to the CPU's vector kernels: "Cooperlake" (AVX-512 with BF16), "SkylakeX"
// (AVX-512) or "Haswell" (AVX2 and FMA). True when it did: the program must re-execute itself
// for the library to read it.
bool choose_vector_openblas_kernels();

// For a benchmark's main(), before anything runs: choose_vector_openblas_kernels(), and when it
// chose, re-executes this program (/proc/self/exe, same arguments) so that OpenBLAS reads it.
// Returns when nothing changed (or the re-execution failed: the program runs on as it is).
void reexec_with_vector_openblas_kernels(char** argv);

}  // namespace tide::cpu
