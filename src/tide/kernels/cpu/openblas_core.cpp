#include "tide/kernels/cpu/openblas_core.h"

#include <cblas.h>
#include <cstdlib>

namespace tide::cpu {

std::string openblas_core() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

std::string better_openblas_core() {
  // DYNAMIC_ARCH's fallback for a CPU it does not recognise (OpenBLAS's cpuid_x86.c).
  if (openblas_core() != "Prescott") return "";
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  if (avx512 && __builtin_cpu_supports("avx512bf16")) return "Cooperlake";
  if (avx512) return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return "";
}

bool choose_vector_openblas_kernels() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return false;
  const std::string core = better_openblas_core();
  return !core.empty() && setenv("OPENBLAS_CORETYPE", core.c_str(), 1) == 0;
}

}  // namespace tide::cpu
