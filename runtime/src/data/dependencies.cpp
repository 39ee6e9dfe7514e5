#include "data/dependencies.hpp"

#include <algorithm>

namespace ferry::detail {

namespace {

bool finished(const TaskRecord* task) noexcept { return task->done.load(std::memory_order_acquire); }

// Histories only need unfinished tasks: a finished one orders nothing. Pruned
// when they grow, so a long run of reads of one buffer stays cheap.
void prune(BufferRoot& root) {
  for (AccessRecord& record : root.records) {
    // A failed writer stays: host() must still see that the data is bad.
    if (record.writer != nullptr && finished(record.writer) && !record.writer->failed()) {
      release(record.writer);
      record.writer = nullptr;
    }
    std::erase_if(record.readers, [](TaskRecord* reader) {
      if (!finished(reader)) return false;
      release(reader);
      return true;
    });
  }
  std::erase_if(root.records, [](const AccessRecord& r) { return r.writer == nullptr && r.readers.empty(); });
}

constexpr std::size_t kPruneAt = 32;

}  // namespace

namespace {

// `task` must follow the conflicting earlier tasks: edges from them, or (for
// a host view, which cannot wait as a task does) a list of those unfinished.
void order_after(TaskRecord* earlier, TaskRecord* task, bool data, std::vector<TaskRecord*>* unfinished) {
  if (earlier == task) return;
  if (unfinished == nullptr) {
    add_edge(earlier, task, data);
  } else if (!finished(earlier)) {
    retain(earlier);
    unfinished->push_back(earlier);
  }
}

void record_access(TaskRecord* task, const BufferState& view, AccessMode mode, std::vector<TaskRecord*>* unfinished) {
  BufferRoot& root = *view.root;
  const Region& region = view.region;
  std::lock_guard lock(root.mutex);
  if (root.records.size() > kPruneAt) prune(root);

  for (AccessRecord& record : root.records) {
    if (!record.region.overlaps(region)) continue;
    // Read-after-write and write-after-write: wait for the last writer.
    if (record.writer != nullptr) order_after(record.writer, task, reads(mode), unfinished);
    // Write-after-read: a writer waits for every reader since.
    if (writes(mode)) {
      for (TaskRecord* reader : record.readers) order_after(reader, task, /*data=*/false, unfinished);
    } else if (record.readers.size() > kPruneAt) {
      std::erase_if(record.readers, [](TaskRecord* reader) {
        if (!finished(reader)) return false;
        release(reader);
        return true;
      });
    }
  }

  if (writes(mode)) {
    // Records this write covers completely are superseded: anything later
    // that overlaps them now waits for this task, which waited for them.
    std::erase_if(root.records, [&](AccessRecord& record) {
      if (!region.contains(record.region)) return false;
      if (record.writer != nullptr) release(record.writer);
      for (TaskRecord* reader : record.readers) release(reader);
      return true;
    });
    retain(task);
    root.records.push_back(AccessRecord{region, task, {}});
    return;
  }

  // A read is listed under exactly its own region (joining that record, or
  // starting one): a later writer of any overlapping region finds it there,
  // and a writer of a disjoint part of a larger record does not wait for it.
  for (AccessRecord& record : root.records) {
    if (record.region == region) {
      retain(task);
      record.readers.push_back(task);
      return;
    }
  }
  retain(task);
  root.records.push_back(AccessRecord{region, nullptr, {task}});
}

}  // namespace

void register_access(TaskRecord* task, const BufferState& view, AccessMode mode) {
  record_access(task, view, mode, nullptr);
}

std::vector<TaskRecord*> register_view(TaskRecord* view_record, const BufferState& view, AccessMode mode) {
  std::vector<TaskRecord*> unfinished;
  record_access(view_record, view, mode, &unfinished);
  return unfinished;
}

std::vector<Use> users_of(const BufferState& view) {
  std::vector<Use> out;
  BufferRoot& root = *view.root;
  std::lock_guard lock(root.mutex);
  for (const AccessRecord& record : root.records) {
    if (!record.region.overlaps(view.region)) continue;
    if (record.writer != nullptr) out.push_back({record.writer, true});
    for (TaskRecord* reader : record.readers)
      if (!finished(reader)) out.push_back({reader, false});
  }
  for (const Use& use : out) retain(use.task);
  return out;
}

void clear_history(BufferRoot& root) {
  std::lock_guard lock(root.mutex);
  for (AccessRecord& record : root.records) {
    if (record.writer != nullptr) release(record.writer);
    for (TaskRecord* reader : record.readers) release(reader);
  }
  root.records.clear();
}

namespace {

// Whether `later` waits for `task`: one of its successors.
bool waits_for(TaskRecord* task, const TaskRecord* later) {
  std::lock_guard lock(task->mutex);
  return std::ranges::any_of(task->successors, [&](const TaskRecord::Edge& e) { return e.task == later; });
}

}  // namespace

bool prefetch_too_early(const BufferState& view, TaskRecord* task) {
  bool pending = false;
  bool writes_it = false;
  bool written_after = false;
  for (const Use& use : users_of(view)) {
    if (use.writes && use.task != task && !use.task->done.load(std::memory_order_acquire)) {
      // A writer that waits for this task runs after it: the join of a split
      // task's pieces (which writes the whole region) or a later write of an
      // input. It changes nothing this task reads; its pieces' prefetches
      // were all skipped for it, and a GPU's copy engine idled between pieces.
      if (waits_for(task, use.task)) written_after = true;
      else pending = true;
    }
    writes_it = writes_it || (use.writes && use.task == task);
    release(use.task);
  }
  // A task that writes the region is its record's writer: the writer before
  // it, its predecessor, is listed no more, and may still be running. The
  // host's bytes are then an old version; shipped ahead, they once landed
  // beside the predecessor's result as a copy as good as the host's, and
  // the task ran on them (a readwrite chain hopping between hosts lost a
  // step; an edge read zeros). So is the writer before a later writer that
  // superseded the record. Its predecessors done, the data is final.
  if ((writes_it || written_after) && task->pending.load(std::memory_order_acquire) > 0) pending = true;
  return pending || task->done.load(std::memory_order_acquire);
}

}  // namespace ferry::detail
