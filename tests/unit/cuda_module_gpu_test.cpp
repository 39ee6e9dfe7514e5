// On a GPU (ctest label gpu): a runtime that starts a GPU device turns its
// pinned pool to cudaHostAlloc, and the CUDA module it loaded is the one
// `ferry info` would name.
#include <gtest/gtest.h>

#include "ferry/allocator/slab_pool.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/ferry.hpp"

namespace ferry {
namespace {

TEST(CudaModuleGpu, ARuntimeWithAGpuPinsWithCudaHostAlloc) {
  if (cuda::device_count() == 0) GTEST_SKIP() << cuda::unavailable_reason();
  ASSERT_EQ(cuda::module_status().state, cuda::ModuleStatus::State::loaded);
  Runtime::Options o;
  o.workers = 2;
  o.persist_perf_models = false;
  o.read_environment = false;
  o.gpus = "0";
  Runtime rt(o);
  auto x = rt.buffer<double>(1 << 16);
  rt.submit("fill", write(x), 2.0);
  EXPECT_EQ(rt.submit("sum", read(x)).result(), 2.0 * (1 << 16));
  const auto* pool = dynamic_cast<const SlabPool*>(rt.host_memory().get());
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->source().name(), "cudaHostAlloc");
}

}  // namespace
}  // namespace ferry
