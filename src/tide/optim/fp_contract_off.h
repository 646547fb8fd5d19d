#pragma once
// Include FIRST in every file that does AdamW arithmetic (internal to tide_optim).
//
// GCC contracts a*b + c into one fused multiply-add by default in C++ (-ffp-contract=fast),
// and the library is built with -march=native, so FMA instructions are available. A fused
// multiply-add rounds once instead of twice, so the result would depend on what the compiler
// chose to contract, and the CPU paths, the CUDA kernel and the reference would no longer
// agree bitwise. This turns contraction off for the rest of the including file.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
