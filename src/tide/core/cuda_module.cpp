// Finding and loading libtide_cuda.so (see cuda_module.h for why it is loaded on first use).
#include "tide/core/cuda_module.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <climits>

#include "tide/core/error.h"

namespace tide {

namespace {

// The directory of the file this code runs from: the executable when the floors are linked into
// it (the dynamic linker's map has an empty name for the main program, /proc/self/exe names it),
// the library's when they are in a shared library of their own. Not argv[0] nor the working
// directory: the module is found the same way from wherever tide is started.
std::string own_directory() {
  std::string file;
  Dl_info info{};
  link_map* map = nullptr;
  if (dladdr1(reinterpret_cast<void*>(&own_directory), &info, reinterpret_cast<void**>(&map),
              RTLD_DL_LINKMAP) != 0 &&
      map != nullptr && map->l_name != nullptr && map->l_name[0] != '\0') {
    file = map->l_name;
  } else {
    char buf[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n > 0) file.assign(buf, static_cast<size_t>(n));
  }
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? "." : file.substr(0, slash);
}

std::string last_dlerror() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

// The module's handle, or why it could not be loaded (a clause that follows "..., but ").
struct LoadedModule {
  void* handle = nullptr;
  std::string problem;
};

LoadedModule try_load(const std::string& dir) {
  if (!cuda_built())
    return {nullptr,
            "tide was built without CUDA (nvcc was not found when it was configured); run with "
            "device=cpu, or rebuild tide with the CUDA toolkit installed"};
  const std::string path = dir + "/" + kCudaModuleFile;
  // RTLD_NOW: a CUDA library or symbol the module lacks fails here, named by dlerror, not at
  // the first kernel. RTLD_LOCAL: its symbols stay out of the process's global namespace.
  if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return {handle, ""};
  const std::string at_path = last_dlerror();
  if (access(path.c_str(), F_OK) == 0)
    return {nullptr, fmt::format("the CUDA module {} cannot be loaded: {}; install the CUDA "
                                 "libraries it needs (cudart, cuBLAS, NCCL: `ldd {}` lists them) "
                                 "or add their directory to LD_LIBRARY_PATH, or run with "
                                 "device=cpu",
                                 path, at_path, path)};
  // Not beside the binary: the binary's RUNPATH (test programs in sub-directories of the
  // build), LD_LIBRARY_PATH, or a module already loaded.
  if (void* handle = dlopen(kCudaModuleFile, RTLD_NOW | RTLD_LOCAL)) return {handle, ""};
  return {nullptr,
          fmt::format("the CUDA module is missing: {} not found at {} (nor on the library "
                      "search path): {}; it is built next to the tide program, keep the two "
                      "together (or run with device=cpu)",
                      kCudaModuleFile, path, at_path)};
}

}  // namespace

bool cuda_built() {
#ifdef TIDE_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

void* load_cuda_module(const std::string& dir, const std::string& who) {
  const LoadedModule module = try_load(dir);
  TIDE_CHECK(module.handle != nullptr, "{}, but {}", who, module.problem);
  return module.handle;
}

void* cuda_module_entry(const char* entry, const std::string& who) {
  // The one piece of process state behind the GPU: the module's handle, loaded by the first call
  // (a function-local static: thread-safe, and nothing at all for a run that never asks) and kept
  // until exit. A failed load is remembered too; every later request reports the same cause.
  static const LoadedModule module = try_load(own_directory());
  TIDE_CHECK(module.handle != nullptr, "{}, but {}", who, module.problem);
  void* address = dlsym(module.handle, entry);
  TIDE_CHECK(address != nullptr,
             "{}, but the CUDA module {} has no entry point {} ({}); it is from another build of "
             "tide: use the one built with this tide",
             who, kCudaModuleFile, entry, last_dlerror());
  return address;
}

void check_cuda_table(const char* entry, size_t module_size, size_t expected_size,
                      const std::string& who) {
  TIDE_CHECK(module_size == expected_size,
             "{}, but the CUDA module {} is from another build of tide (its {} table has {} "
             "bytes where this tide expects {}); use the one built with this tide",
             who, kCudaModuleFile, entry, module_size, expected_size);
}

}  // namespace tide
