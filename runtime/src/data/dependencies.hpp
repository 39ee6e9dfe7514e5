// Inferring task dependencies from buffer accesses in submission order
// (RAW, WAR, WAW), per root buffer and per overlapping region, as StarPU and
// OmpSs do.
#pragma once

#include <vector>

#include "data/buffer_state.hpp"
#include "ferry/runtime/access.hpp"
#include "data/task_record.hpp"

namespace ferry::detail {

// Records that `task` accesses `view` with `mode`, making it wait for the
// earlier tasks it conflicts with. Call in submission order.
void register_access(TaskRecord* task, const BufferState& view, AccessMode mode);

// The same for a host view's record (host_acquisition.hpp), which gets no
// edges: returns the conflicting tasks still unfinished (referenced), for
// the view to wait for.
std::vector<TaskRecord*> register_view(TaskRecord* view_record, const BufferState& view, AccessMode mode);

struct Use {
  TaskRecord* task;
  bool writes;
};
// The tasks whose accesses overlap `view` and still matter (unfinished, or
// failed writers), each referenced: the caller releases them.
std::vector<Use> users_of(const BufferState& view);
// For prefetching `task`'s input `view`: whether shipping it now would be
// wasted, because an unfinished task other than `task` still writes it
// before `task` (a writer that waits for `task` does not count), or `task`
// is already done.
bool prefetch_too_early(const BufferState& view, TaskRecord* task);

// Drops every task reference a root's history holds.
void clear_history(BufferRoot& root);

}  // namespace ferry::detail
