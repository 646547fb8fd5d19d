#pragma once
// Element-wise sums of host buffers in f32, bf16 and f16: the arithmetic of the MPI backend's
// reductions, shared by MPI's own collectives (a user-defined MPI_Op, mpi_engine.h) and tide's
// ring (mpi_ring_ops.cpp), so both round alike. (The average's division: divide_elements, dtype.h.)
//
// The 16-bit rule is NCCL's (and so the GPU backend's): each addition widens its two operands to
// f32, adds in f32 and rounds the sum to nearest-even into the storage dtype, so every hop of a
// ring rounds once. An average is the sum, then each element divided by the group size in f32
// and rounded. f32 adds and divides in f32, as it always did.

#include <cstdint>

#include "tide/core/dtype.h"

namespace tide {

// Whether host_add takes `t`: f32, bf16 and f16.
bool host_reducible(DType t);
// dst[i] = a[i] + b[i] for n elements of dtype `t`; dst may be a or b.
void host_add(DType t, void* dst, const void* a, const void* b, int64_t n);

}  // namespace tide
