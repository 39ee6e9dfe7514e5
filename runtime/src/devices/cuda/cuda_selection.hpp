// Which local GPUs a runtime uses (Runtime::Options::gpus, FERRY_GPUS).
// Compiled on every build, so a bad setting is the same error everywhere.
#pragma once

#include <string>
#include <vector>

namespace ferry::detail {

// "all" (or empty): every GPU there is; "none": no GPU; otherwise ordinals
// like "0,2". Throws UsageError for text that is none of these, for an
// ordinal listed twice, and for an ordinal this host does not have (naming
// it and how many GPUs there are). `available` is cuda::device_count().
std::vector<int> select_gpus(const std::string& spec, int available);

// True when `spec` asks for no GPU, so the runtime need not even probe.
bool selects_no_gpu(const std::string& spec);
// True for "all" (or empty): a GPU that cannot be used is then skipped, not an error.
bool selects_all_gpus(const std::string& spec);

}  // namespace ferry::detail
