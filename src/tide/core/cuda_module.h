#pragma once
// The CUDA module: why the GPU code is a separate shared library, loaded on first use.
//
// The CUDA side of every floor (the kernels with cuBLAS/cuBLASLt, the CUDA allocator, AdamW,
// the NCCL process group) is built into libtide_cuda.so, not into the floors' static libraries.
// The tide program and the tests never link it, nor cudart, cuBLAS or NCCL: the first request
// for a GPU loads it with dlopen. A CPU run, `tide --version` or `tide export` so never maps the
// CUDA libraries, which cost about 217 MB of resident memory at start when they were linked in
// (bench/RESULTS.md, "CUDA libraries loaded on first use").
//
// Each floor with a CUDA side describes it as a table of function pointers (<floor>/cuda_table.h)
// that the module hands out from an extern "C" entry point tide_cuda_<floor>; the floor's host
// code finds it with cuda_module_table and calls through it. Header is C++17-clean (the
// module's .cu files include it).

#include <cstddef>
#include <string>

namespace tide {

// The module's file name. CMake builds it under this name next to the tide program.
inline constexpr const char* kCudaModuleFile = "libtide_cuda.so";

// True when this build has a CUDA module (nvcc was found when it was configured).
bool cuda_built();

// The address of the module's entry point `entry`, loading the module first if no call has yet.
// `who` says what asked for the GPU ("make_op_context: cuda:0 was asked for") and starts every
// error, each one line with the cause and the fix:
//   "..., but tide was built without CUDA (nvcc was not found when it was configured); ..."
//   "..., but the CUDA module is missing: libtide_cuda.so not found at <dir>/libtide_cuda.so
//    (nor on the library search path): <dlerror>; ..."
//   "..., but the CUDA module <dir>/libtide_cuda.so cannot be loaded: <dlerror>; ..." (a CUDA
//    library it needs is missing, say)
// The module is loaded once per process and never unloaded: contexts, allocators and groups it
// made run its code until exit.
void* cuda_module_entry(const char* entry, const std::string& who);

// Loads the module: <dir>/libtide_cuda.so if that file exists, else libtide_cuda.so from the
// dynamic linker's search path (the binary's RUNPATH, LD_LIBRARY_PATH). Returns the dlopen
// handle or throws with the cause (who as above). cuda_module_entry uses it once with the
// directory of the running binary; exposed for the tests of a missing or broken module.
void* load_cuda_module(const std::string& dir, const std::string& who);

// Throws when a table's size differs from this build's (a module from another build of tide).
void check_cuda_table(const char* entry, size_t module_size, size_t expected_size,
                      const std::string& who);

// The table of the module's entry point `entry` (a function returning const Table*), checked
// to be this build's shape. Every table starts with `size_t size = sizeof(Table)`.
template <class Table>
const Table& cuda_module_table(const char* entry, const std::string& who) {
  using Entry = const Table* (*)();
  const Table* table = reinterpret_cast<Entry>(cuda_module_entry(entry, who))();
  check_cuda_table(entry, table->size, sizeof(Table), who);
  return *table;
}

}  // namespace tide

// Marks a function of the module as an entry point: exported (the module hides everything
// else) and unmangled, so dlsym finds it by its name.
#define TIDE_CUDA_MODULE_ENTRY extern "C" __attribute__((visibility("default")))
