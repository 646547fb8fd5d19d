// exp_f32: simd.h's exp8 over an array, compiled with the library's flags, so that tests
// (built without -march=native) check the code path the kernels really run.
#include "tide/kernels/cpu/simd.h"

namespace tide::cpu {

void exp_f32(float* out, const float* in, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(out + i, exp8(load8(in + i)));
  if (i < n) store_partial(out + i, exp8(load_partial(in + i, static_cast<int>(n - i))), n - i);
}

}  // namespace tide::cpu
