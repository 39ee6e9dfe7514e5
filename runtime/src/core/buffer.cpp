#include "ferry/runtime/buffer.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "data/buffer_state.hpp"
#include "data/coherence.hpp"
#include "data/dependencies.hpp"
#include "core/host_acquisition.hpp"
#include "core/core.hpp"
#include "ferry/error.hpp"
#include "data/task_record.hpp"
#include "base/transfer_label.hpp"

namespace ferry {

namespace detail {

BufferRoot::~BufferRoot() {
  clear_history(*this);
  keep_lineage_inputs(*this);
  // Copies elsewhere would otherwise hold GPU or remote memory until evicted.
  drop_copies(*this);
  if (host != nullptr) memory->deallocate(host, bytes);
}

}  // namespace detail

void BufferBase::require_valid() const {
  if (!state_) throw UsageError("this Buffer is empty (default-constructed or moved from)");
}

DType BufferBase::dtype() const {
  require_valid();
  return state_->root->dtype;
}
std::size_t BufferBase::rows() const {
  require_valid();
  return state_->region.rows;
}
std::size_t BufferBase::cols() const {
  require_valid();
  return state_->region.cols;
}
std::size_t BufferBase::size() const { return rows() * cols(); }
std::size_t BufferBase::bytes() const { return size() * size_of(dtype()); }
std::size_t BufferBase::ld() const {
  require_valid();
  return state_->ld();
}
bool BufferBase::contiguous() const { return rows() <= 1 || ld() == cols(); }
Region BufferBase::region() const {
  require_valid();
  return state_->region;
}
bool BufferBase::is_view() const {
  require_valid();
  return !state_->whole();
}
std::uint64_t BufferBase::id() const {
  require_valid();
  return state_->id;
}
const std::string& BufferBase::name() const {
  require_valid();
  return state_->name;
}
void BufferBase::set_name(std::string name) {
  require_valid();
  state_->name = std::move(name);
}

void* BufferBase::acquire_host(bool for_writing, std::shared_ptr<const void>* hold) const {
  require_valid();
  std::exception_ptr failure;
  const std::vector<detail::Use> uses = detail::users_of(*state_);
  std::vector<const detail::TaskRecord*> awaited;
  for (const detail::Use& use : uses)
    if (!detail::held_by_this_thread(use.task) && !use.task->done.load(std::memory_order_acquire))
      awaited.push_back(use.task);
  if (!awaited.empty()) {
    // A task that waits behind this thread's own view would be waited for forever.
    if (auto core = state_->root->runtime.lock()) {
      try {
        core->host_views().check_wait(fmt::format("a host view of buffer '{}'", state_->name), awaited);
      } catch (...) {
        for (const detail::Use& use : uses) detail::release(use.task);
        throw;
      }
      core->push_held();
    }
  }
  for (const detail::Use& use : uses) {
    // A view this thread holds is ordered by the program, not by waiting.
    if (!detail::held_by_this_thread(use.task)) use.task->done.wait(false, std::memory_order_acquire);
    // A failed reader leaves the data as it was; a failed writer does not.
    if (!failure && use.writes && use.task->failed()) failure = use.task->error;
    detail::release(use.task);
  }
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      throw KernelError(fmt::format("buffer '{}' has no valid contents: {}", state_->name, e.what()));
    }
  }
  const AccessMode mode = for_writing ? AccessMode::readwrite : AccessMode::read;
  static const std::string view_task = "host view";
  const detail::TaskLabelScope transfers_for(view_task);
  // A writable view makes copies elsewhere stale; a read-only one keeps them.
  detail::acquire_on_host(*state_, mode);
  if (hold != nullptr) {
    // The view holds the buffer until it ends: later tasks that conflict with it wait for that.
    if (auto core = state_->root->runtime.lock())
      *hold = std::make_shared<detail::HostAcquisition>(std::move(core), state_, mode);
  }
  return state_->host_data();
}

namespace {

std::shared_ptr<detail::BufferState> make_view(const detail::BufferState& parent, Region region, std::size_t index) {
  auto view = std::make_shared<detail::BufferState>();
  view->root = parent.root;
  view->region = region;
  view->id = parent.id;
  view->name = fmt::format("{}[{}]", parent.name, index);
  return view;
}

}  // namespace

std::vector<std::shared_ptr<detail::BufferState>> BufferBase::split_states(std::size_t parts) const {
  require_valid();
  const Region& r = state_->region;
  const bool by_rows = r.rows > 1;
  const std::size_t extent = by_rows ? r.rows : r.cols;
  if (parts == 0 || parts > extent)
    throw UsageError(fmt::format("split({}) of buffer '{}': it has {} {}; ask for 1 to {} parts", parts, state_->name,
                                 extent, by_rows ? "rows" : "elements", extent));
  std::vector<std::shared_ptr<detail::BufferState>> out;
  std::size_t begin = 0;
  for (std::size_t i = 0; i < parts; ++i) {
    const std::size_t len = extent / parts + (i < extent % parts ? 1 : 0);
    Region sub = r;
    if (by_rows) {
      sub.row0 = r.row0 + begin;
      sub.rows = len;
    } else {
      sub.col0 = r.col0 + begin;
      sub.cols = len;
    }
    out.push_back(make_view(*state_, sub, i));
    begin += len;
  }
  return out;
}

std::vector<std::shared_ptr<detail::BufferState>> BufferBase::tile_states(std::size_t tile_rows, std::size_t tile_cols,
                                                                          std::size_t& grid_rows,
                                                                          std::size_t& grid_cols) const {
  require_valid();
  const Region& r = state_->region;
  if (tile_rows == 0 || tile_cols == 0)
    throw UsageError(fmt::format("tiles({}, {}) of buffer '{}': tile sizes must be positive", tile_rows, tile_cols,
                                 state_->name));
  grid_rows = (r.rows + tile_rows - 1) / tile_rows;
  grid_cols = (r.cols + tile_cols - 1) / tile_cols;
  std::vector<std::shared_ptr<detail::BufferState>> out;
  out.reserve(grid_rows * grid_cols);
  for (std::size_t i = 0; i < grid_rows; ++i) {
    for (std::size_t j = 0; j < grid_cols; ++j) {
      Region sub;
      sub.row0 = r.row0 + i * tile_rows;
      sub.col0 = r.col0 + j * tile_cols;
      sub.rows = std::min(tile_rows, r.rows - i * tile_rows);
      sub.cols = std::min(tile_cols, r.cols - j * tile_cols);
      auto view = make_view(*state_, sub, 0);
      view->name = fmt::format("{}({},{})", state_->name, i, j);
      out.push_back(std::move(view));
    }
  }
  return out;
}

}  // namespace ferry
