// Every floor's table in the CUDA module (core/cuda_module.h) has all its entries: a table is
// filled by hand in the module, and an entry left out would be a null pointer found only by the
// first call on a GPU. The module loads without a GPU, so this runs wherever CUDA was built.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "tide/comm/cuda_table.h"
#include "tide/comm/nccl_process_group.h"
#include "tide/core/cuda_module.h"
#include "tide/core/cuda_table.h"
#include "tide/kernels/cuda_table.h"
#include "tide/memory/cuda_table.h"
#include "tide/optim/cuda_table.h"

using namespace tide;

namespace {

// The entries after `size`, all function pointers, that are null.
template <class Table>
int null_entries(const Table& t) {
  static_assert((sizeof(Table) - sizeof(size_t)) % sizeof(void (*)()) == 0);
  int nulls = 0;
  for (size_t at = sizeof(size_t); at < sizeof(Table); at += sizeof(void (*)())) {
    void (*entry)() = nullptr;
    std::memcpy(&entry, reinterpret_cast<const char*>(&t) + at, sizeof(entry));
    nulls += entry == nullptr;
  }
  return nulls;
}

template <class Table>
void expect_complete(const char* entry) {
  const Table& t = cuda_module_table<Table>(entry, "test");
  EXPECT_EQ(null_entries(t), 0) << entry;
}

}  // namespace

TEST(CudaModule, EveryTableIsComplete) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no CUDA module";
  expect_complete<CudaCoreTable>("tide_cuda_core");
  expect_complete<CudaKernelTable>("tide_cuda_kernels");
  expect_complete<CudaMemoryTable>("tide_cuda_memory");
  expect_complete<CudaOptimTable>("tide_cuda_optim");
  if (nccl_available()) expect_complete<CudaCommTable>("tide_cuda_comm");
}
