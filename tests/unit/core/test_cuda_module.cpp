// The CUDA module's loader (core/cuda_module.h): the errors a GPU request gives when the build
// has no CUDA, when libtide_cuda.so is not where it should be, or is there but cannot be loaded;
// and, in builds with CUDA, that it loads from beside the program on a machine without a GPU.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "error_of.h"
#include "tide/core/cuda_module.h"
#include "tide/core/cuda_table.h"
#include "tide/core/device.h"

using namespace tide;
using tide::test::error_of;

namespace {

// A fresh directory under the build tree for this test.
std::string fresh_dir(const std::string& name) {
  const auto p = std::filesystem::path(TIDE_BINARY_DIR) / "test_tmp" / "cuda_module" / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

}  // namespace

TEST(CudaModule, WithoutTheModuleBesideTheProgramTheErrorSaysWhereItLooked) {
  // Loaded already (by a test before this one in the same process): the dynamic linker would
  // hand that one out for the bare name, the search path step.
  if (dlopen(kCudaModuleFile, RTLD_NOW | RTLD_NOLOAD) != nullptr)
    GTEST_SKIP() << "the module is loaded in this process already";
  const std::string dir = fresh_dir("empty");
  const std::string msg = error_of([&] { load_cuda_module(dir, "cuda:0 was asked for"); });
  if (!cuda_built()) {
    EXPECT_NE(msg.find("cuda:0 was asked for, but tide was built without CUDA"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("device=cpu"), std::string::npos) << msg;
    return;
  }
  EXPECT_NE(msg.find("cuda:0 was asked for, but the CUDA module is missing: libtide_cuda.so not "
                     "found at " +
                     dir + "/libtide_cuda.so (nor on the library search path): "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;  // dlerror
}

TEST(CudaModule, AModuleThatCannotBeLoadedIsNamedWithTheLoadersReason) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no CUDA module";
  const std::string dir = fresh_dir("broken");
  std::ofstream(dir + "/libtide_cuda.so") << "not an ELF file";
  const std::string msg = error_of([&] { load_cuda_module(dir, "cuda:0 was asked for"); });
  EXPECT_NE(msg.find("cuda:0 was asked for, but the CUDA module " + dir +
                     "/libtide_cuda.so cannot be loaded: "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("LD_LIBRARY_PATH"), std::string::npos) << msg;
}

TEST(CudaModule, LoadsFromBesideTheProgramWithOrWithoutAGpu) {
  if (!cuda_built()) {
    EXPECT_FALSE(cuda_available());
    EXPECT_NE(error_of([] {
                cuda_module_entry("tide_cuda_core", "a GPU was asked for");
              }).find("a GPU was asked for, but tide was built without CUDA"),
              std::string::npos);
    return;
  }
  // This test program is built beside libtide_cuda.so, as tide is; the CUDA libraries are
  // installed wherever nvcc is, GPU or not.
  const auto& core = cuda_module_table<CudaCoreTable>("tide_cuda_core", "test");
  ASSERT_NE(core.device_count, nullptr);
  EXPECT_EQ(cuda_available(), core.device_count() > 0);
  EXPECT_NE(error_of([] {
              cuda_module_entry("tide_cuda_nothing", "test");
            }).find("has no entry point tide_cuda_nothing"),
            std::string::npos);
  EXPECT_NE(error_of([] { check_cuda_table("tide_cuda_core", 8, 16, "test"); })
                .find("is from another build of tide (its tide_cuda_core table has 8 bytes where "
                      "this tide expects 16)"),
            std::string::npos);
}
