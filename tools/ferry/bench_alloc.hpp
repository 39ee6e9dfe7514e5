#pragma once

namespace ferry::tools {

// A quick look at what one alloc+free pair costs in the pinned pool against
// malloc and mmap; the full benchmark is bench/allocator_bench.
int run_bench_alloc(double seconds);

}  // namespace ferry::tools
