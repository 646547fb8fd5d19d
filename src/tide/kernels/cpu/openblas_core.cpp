#include "tide/kernels/cpu/openblas_core.h"

#include <cblas.h>
#include <unistd.h>
#include <cstdlib>
#include <string>

namespace tide::cpu {

namespace {
// The OPENBLAS_CORETYPE for this CPU's vector kernels when OpenBLAS chose its generic core;
// empty when it chose a specific core itself or the CPU has nothing better.
std::string better_openblas_core() {
  // DYNAMIC_ARCH's fallback for a CPU it does not recognise (OpenBLAS's cpuid_x86.c).
  const char* core = openblas_get_corename();
  if (core == nullptr || std::string(core) != "Prescott") return "";
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
}  // namespace

bool choose_vector_openblas_kernels() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return false;
  const std::string core = better_openblas_core();
  return !core.empty() && setenv("OPENBLAS_CORETYPE", core.c_str(), 1) == 0;
}

void reexec_with_vector_openblas_kernels(char** argv) {
  if (choose_vector_openblas_kernels()) execv("/proc/self/exe", argv);
}

}  // namespace tide::cpu
