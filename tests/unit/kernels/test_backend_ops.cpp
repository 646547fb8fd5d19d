// The op case table (tests/support/op_cases.h) on the backends every machine has: the CPU
// alone (each case well formed and deterministic) and the simulated device against the CPU.
// The simulated device runs the same CPU kernels, so every tensor must come back bit for bit;
// what this checks is the orchestration: the upload, the op and the download queued on one
// stream, in order, and the host reading only after it waited (a missing wait is a data race
// that ThreadSanitizer reports; see docs/architecture.md, "The simulated device").

#include <gtest/gtest.h>

#include <vector>

#include "op_cases.h"
#include "tide/core/arena.h"
#include "tide/kernels/mover.h"
#include "tide/kernels/ops.h"

using namespace tide;
using namespace tide::testing;

namespace {

// Uploads the case's tensors into sim memory, runs the op on `ctx`'s stream, downloads them.
std::vector<HostTensor> run_on_sim(const OpCase& c, const OpContext& ctx, Allocator& memory) {
  std::vector<HostTensor> out = c.tensors;
  size_t bytes = 0;
  for (const auto& t : out) bytes += Arena::aligned(t.bytes());
  Arena arena("op case", bytes, &memory);
  std::vector<Tensor> host = host_views(out), device;
  for (const Tensor& h : host) {
    device.push_back(arena.alloc_tensor(h.shape, h.dtype));
    copy(ctx, device.back(), h);
  }
  c.run(ctx, device);
  for (size_t i = 0; i < host.size(); ++i) copy(ctx, host[i], device[i]);
  synchronize(ctx);
  return out;
}

}  // namespace

// Every case runs on the CPU twice with bitwise equal results, so a case with a wrong shape
// or argument fails here, on any machine, and not first on a GPU machine.
TEST(OpCases, RunOnTheCpu) {
  for (const OpCase& c : all_op_cases()) {
    SCOPED_TRACE(c.name);
    std::vector<HostTensor> a = c.tensors, b = c.tensors;
    ASSERT_NO_THROW(c.run(OpContext{}, host_views(a)));
    c.run(OpContext{}, host_views(b));
    for (size_t i = 0; i < a.size(); ++i) expect_bitwise(c.name + " " + a[i].name, a[i], b[i]);
  }
}

// Every case, in f32 and with its float tensors in bf16 and f16 (the dtype axis: in_dtype),
// and the mixes of 16-bit training (mixed_dtype_cases), which the device's dtype rule admits.
TEST(SimDevice, EveryOpCaseEqualsTheCpu) {
  SimAllocator memory(Device::sim(0));
  const OpContext ctx = make_op_context(Device::sim(0), nullptr, 1);
  std::vector<OpCase> cases;
  for (const OpCase& c : all_op_cases())
    for (const OpCase& d : {c, in_dtype(c, DType::BF16), in_dtype(c, DType::F16)})
      cases.push_back(d);
  for (DType dtype : {DType::BF16, DType::F16})
    for (OpCase& c : mixed_dtype_cases(dtype)) cases.push_back(std::move(c));
  for (const OpCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<HostTensor> cpu = c.tensors;
    c.run(OpContext{}, host_views(cpu));
    const std::vector<HostTensor> sim = run_on_sim(c, ctx, memory);
    for (size_t i = 0; i < cpu.size(); ++i)
      expect_bitwise(c.name + " " + cpu[i].name, sim[i], cpu[i]);
  }
  EXPECT_EQ(memory.allocated(), 0u);  // every arena gave its block back
}
