// Automatic chunking at submission: a large chunkable task placed on an
// offload device becomes pieces on row (or element) range views of its
// buffers, so the device's transfers of one piece overlap another's kernel.
#pragma once

#include <cstddef>

#include "data/task_record.hpp"

namespace ferry::detail {

// Called with `whole` placed and not yet registered on its buffers. Submits
// its pieces to whole's device and returns how many (0: it runs whole). With
// pieces, `whole` becomes their join: registered after them, it waits for
// all of them and runs nothing, so its handle completes when they have.
std::size_t submit_pieces(TaskRecord& whole);

}  // namespace ferry::detail
