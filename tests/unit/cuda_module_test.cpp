// The CUDA module (libferry_cuda.so): the core libraries link no CUDA
// library, a CPU-only runtime never loads the module nor any CUDA library,
// the module says where it came from, and its built-in variants are the
// ones the registry forwards to. Runs on every machine; each test is its own
// process under ctest, so "not loaded yet" means what it says.
#include <gtest/gtest.h>
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cuda_port/cuda_module.hpp"
#include "ferry/allocator/pinned_pool.hpp"
#include "ferry/config.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/ferry.hpp"

namespace ferry {
namespace {

// The shared objects of this process whose file name contains `part`.
std::vector<std::string> loaded_objects(std::string_view part) {
  struct Search {
    std::string_view part;
    std::vector<std::string> found;
  } search{part, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_name != nullptr && std::string_view(info->dlpi_name).find(s->part) != std::string_view::npos)
          s->found.emplace_back(info->dlpi_name);
        return 0;
      },
      &search);
  return search.found;
}

// Every CUDA library Ferry's module links, by the start of its file name.
constexpr std::array<std::string_view, 8> cuda_libraries{"libcuda.", "libcudart", "libcublas", "libcusolver",
                                                         "libcusparse", "libnvrtc",  "libnvJitLink", "libferry_cuda"};

std::vector<std::string> loaded_cuda_objects() {
  std::vector<std::string> out;
  for (std::string_view name : cuda_libraries)
    for (std::string& path : loaded_objects(name)) out.push_back(std::move(path));
  return out;
}

// The DT_NEEDED entries of a shared object, as readelf prints them.
std::string needed_of(const std::string& library) {
  const std::string command = "readelf -d '" + library + "' 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return "popen failed";
  std::string out;
  std::array<char, 512> line{};
  while (std::fgets(line.data(), line.size(), pipe.get()) != nullptr)
    if (std::string_view(line.data()).find("(NEEDED)") != std::string_view::npos) out += line.data();
  return out;
}

Runtime::Options cpu_only() {
  Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = "none";
  return o;
}

TEST(CudaModule, CoreLibrariesLinkNoCudaLibrary) {
  for (const std::string library : {FERRY_CORE_LIBRARIES}) {
    const std::string needed = needed_of(library);
    ASSERT_NE(needed.find("(NEEDED)"), std::string::npos) << library << ": readelf found nothing:\n" << needed;
    for (std::string_view cuda : cuda_libraries)
      EXPECT_EQ(needed.find(cuda), std::string::npos) << library << " needs " << cuda << ":\n" << needed;
  }
#ifdef FERRY_CUDA_MODULE_FILE
  // The same reading finds CUDA where it is: in the module.
  EXPECT_NE(needed_of(FERRY_CUDA_MODULE_FILE).find("libcudart"), std::string::npos) << FERRY_CUDA_MODULE_FILE;
#endif
}

TEST(CudaModule, CpuOnlyRuntimeLoadsNoCudaAtAll) {
  ASSERT_TRUE(loaded_cuda_objects().empty()) << "loaded before the test: " << loaded_cuda_objects().front();
  {
    Runtime rt(cpu_only());
    auto x = rt.buffer<double>(1 << 16);  // host replicas come from the runtime's pinned pool
    rt.submit("fill", write(x), 2.0);
    EXPECT_EQ(rt.submit("sum", read(x)).result(), 2.0 * (1 << 16));
    // Its pinned pool's slabs are mmap+mlock, not cudaHostAlloc.
    const auto* pool = dynamic_cast<const SlabPool*>(rt.host_memory().get());
    ASSERT_NE(pool, nullptr);
    EXPECT_GT(pool->stats().slab_bytes, 0u);
    EXPECT_EQ(pool->source().name(), "mmap+mlock");
  }
  const std::vector<std::string> loaded = loaded_cuda_objects();
  EXPECT_TRUE(loaded.empty()) << "a gpus=\"none\" runtime loaded " << loaded.front();
}

TEST(CudaModule, PinnedPoolIsMmapUntilAGpuIsInUse) {
  PinnedPool pool;
  void* p = pool.allocate(1 << 20);
  EXPECT_EQ(pool.source().name(), "mmap+mlock");
  EXPECT_EQ(pool.source().kind(), MemoryKind::host_pinned);
  EXPECT_TRUE(loaded_cuda_objects().empty()) << loaded_cuda_objects().front();
  // Told a GPU is in use, it turns to cudaHostAlloc only where a device exists.
  pool.gpu_in_use(0);
  EXPECT_EQ(pool.source().name(), cuda::device_count() > 0 ? "cudaHostAlloc" : "mmap+mlock");
  void* q = pool.allocate(std::size_t{80} << 20);  // a slab of its own, from the source as it is now
  pool.deallocate(q, std::size_t{80} << 20);
  pool.deallocate(p, 1 << 20);
  pool.trim();
  EXPECT_EQ(pool.stats().slab_bytes, 0u);
}

TEST(CudaModule, StatusSaysWhereItCameFromOrWhyNot) {
  const cuda::ModuleStatus& status = cuda::module_status();
#ifdef FERRY_CUDA_MODULE_FILE
  ASSERT_EQ(status.state, cuda::ModuleStatus::State::loaded) << cuda::to_string(status.state) << ": " << status.detail;
  EXPECT_TRUE(std::filesystem::equivalent(status.path, FERRY_CUDA_MODULE_FILE)) << status.path;
  // What CpuOnlyRuntimeLoadsNoCudaAtAll looks for is found where it is loaded.
  EXPECT_FALSE(loaded_objects("libferry_cuda").empty());
  EXPECT_FALSE(loaded_objects("libcudart").empty());
  // Loaded, the driver may still say no (this machine may have no GPU): the reason says the driver's words.
  if (cuda::device_count() == 0) {
    EXPECT_NE(cuda::unavailable_reason().find("no CUDA device: "), std::string::npos);
    // A machine without the driver hears so, not that its driver is "insufficient".
    if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL); driver == nullptr) {
      EXPECT_NE(cuda::unavailable_reason().find("no NVIDIA driver found"), std::string::npos)
          << cuda::unavailable_reason();
      EXPECT_EQ(cuda::unavailable_reason().find("insufficient"), std::string::npos) << cuda::unavailable_reason();
    } else {
      dlclose(driver);
    }
  }
#else
  EXPECT_EQ(status.state, cuda::ModuleStatus::State::not_built);
  EXPECT_NE(status.detail.find("FERRY_WITH_CUDA=OFF"), std::string::npos) << status.detail;
  EXPECT_EQ(detail::cuda_module(), nullptr);
#endif
}

TEST(CudaModule, BuiltinVariantsAreTheOnesTheRegistryForwardsTo) {
  const detail::CudaModule* module = detail::cuda_module();
  if (!config::with_cuda) GTEST_SKIP() << "built without CUDA: no module";
  ASSERT_NE(module, nullptr) << cuda::module_status().detail;
  for (const std::string& name : KernelRegistry::global().names()) {
    const bool listed = std::ranges::find(detail::cuda_builtin_variants, name) != std::end(detail::cuda_builtin_variants);
    const KernelDef* def = KernelRegistry::global().find(name);
    if (def->cuda_source) continue;
    EXPECT_EQ(static_cast<bool>(module->builtin_variant(name)), listed) << name;
    EXPECT_EQ(static_cast<bool>(def->cuda), listed) << name;
  }
}

}  // namespace
}  // namespace ferry
