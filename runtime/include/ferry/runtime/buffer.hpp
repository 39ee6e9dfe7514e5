// Buffers: logical arrays with a replica on each memory node where they have
// been used. The host replica lives in the runtime's pinned pool.
// Views made by split() and tiles() are buffers themselves; tasks on
// overlapping views are ordered, on disjoint ones they run in parallel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ferry/runtime/access.hpp"
#include "ferry/runtime/dtype.hpp"
#include "ferry/runtime/host_view.hpp"
#include "ferry/runtime/region.hpp"

namespace ferry {

namespace detail {
struct BufferState;
}

class BufferBase {
 public:
  BufferBase() = default;

  bool valid() const noexcept { return state_ != nullptr; }
  DType dtype() const;
  std::size_t rows() const;
  std::size_t cols() const;
  std::size_t size() const;  // elements
  std::size_t bytes() const;
  std::size_t ld() const;    // elements between row starts in the root buffer
  bool contiguous() const;
  Region region() const;     // where this view lies in its root
  bool is_view() const;
  std::uint64_t id() const;
  const std::string& name() const;
  // Names appear in error messages, explanations and traces.
  void set_name(std::string name);

  const std::shared_ptr<detail::BufferState>& state() const noexcept { return state_; }

 protected:
  explicit BufferBase(std::shared_ptr<detail::BufferState> state) : state_(std::move(state)) {}
  // Waits for every task that uses this view (or an overlapping one) and
  // makes the host replica valid; returns the view's first element. For
  // writing, copies elsewhere (GPUs, remotes) become stale; for reading
  // they stay valid, so the next task there moves no bytes. With `hold`,
  // the acquisition lasts until *hold is dropped (host_view.hpp).
  void* acquire_host(bool for_writing = true, std::shared_ptr<const void>* hold = nullptr) const;
  std::vector<std::shared_ptr<detail::BufferState>> split_states(std::size_t parts) const;
  std::vector<std::shared_ptr<detail::BufferState>> tile_states(std::size_t tile_rows, std::size_t tile_cols,
                                                                std::size_t& grid_rows, std::size_t& grid_cols) const;
  void require_valid() const;

  std::shared_ptr<detail::BufferState> state_;
};

template <typename T>
class TileGrid;

template <typename T>
class Buffer : public BufferBase {
 public:
  Buffer() = default;
  explicit Buffer(std::shared_ptr<detail::BufferState> state) : BufferBase(std::move(state)) {}

  // Waits for the tasks using this buffer, then gives the host replica to
  // read and write: copies on GPUs and remotes are dropped. Until the view
  // ends, tasks submitted that use the buffer wait for it.
  HostView<T> host() const {
    std::shared_ptr<const void> hold;
    T* data = static_cast<T*>(acquire_host(true, &hold));
    return HostView<T>(data, rows(), cols(), ld(), std::move(hold));
  }
  // The same, read-only: copies elsewhere stay valid. Prefer it to look at
  // results (printing one element of host() throws the GPU copy away).
  // Until it ends, only tasks that write the buffer wait for it.
  HostView<const T> host_read() const {
    std::shared_ptr<const void> hold;
    const T* data = static_cast<const T*>(acquire_host(false, &hold));
    return HostView<const T>(data, rows(), cols(), ld(), std::move(hold));
  }

  // `parts` views of (nearly) equal size: along the elements of a 1-D buffer,
  // along the rows of a 2-D one.
  std::vector<Buffer<T>> split(std::size_t parts) const {
    std::vector<Buffer<T>> out;
    for (auto& state : split_states(parts)) out.emplace_back(std::move(state));
    return out;
  }

  // A grid of tile_rows x tile_cols views (edge tiles may be smaller).
  TileGrid<T> tiles(std::size_t tile_rows, std::size_t tile_cols) const;
};

template <typename T>
class TileGrid {
 public:
  TileGrid() = default;
  TileGrid(std::vector<Buffer<T>> tiles, std::size_t rows, std::size_t cols)
      : tiles_(std::move(tiles)), rows_(rows), cols_(cols) {}

  std::size_t rows() const noexcept { return rows_; }  // tiles down
  std::size_t cols() const noexcept { return cols_; }  // tiles across
  const Buffer<T>& operator()(std::size_t i, std::size_t j) const { return tiles_.at(i * cols_ + j); }

 private:
  std::vector<Buffer<T>> tiles_;
  std::size_t rows_ = 0, cols_ = 0;
};

template <typename T>
TileGrid<T> Buffer<T>::tiles(std::size_t tile_rows, std::size_t tile_cols) const {
  std::size_t grid_rows = 0, grid_cols = 0;
  std::vector<Buffer<T>> out;
  for (auto& state : tile_states(tile_rows, tile_cols, grid_rows, grid_cols)) out.emplace_back(std::move(state));
  return TileGrid<T>(std::move(out), grid_rows, grid_cols);
}

// A buffer whose element type is known only at run time (servers, bindings).
class AnyBuffer : public BufferBase {
 public:
  AnyBuffer() = default;
  explicit AnyBuffer(std::shared_ptr<detail::BufferState> state) : BufferBase(std::move(state)) {}
  template <typename T>
  explicit AnyBuffer(const Buffer<T>& typed) : BufferBase(typed.state()) {}
  // Waits for the tasks using it; the first byte of the view's host replica.
  void* host_data() const { return acquire_host(); }
  // The same, for reading only: copies elsewhere stay valid.
  const void* host_data_read() const { return acquire_host(false); }

  std::vector<AnyBuffer> split(std::size_t parts) const {
    std::vector<AnyBuffer> out;
    for (auto& state : split_states(parts)) out.emplace_back(std::move(state));
    return out;
  }
  // Row-major tiles; grid_rows x grid_cols of them.
  std::vector<AnyBuffer> tiles(std::size_t tile_rows, std::size_t tile_cols, std::size_t& grid_rows,
                               std::size_t& grid_cols) const {
    std::vector<AnyBuffer> out;
    for (auto& state : tile_states(tile_rows, tile_cols, grid_rows, grid_cols)) out.emplace_back(std::move(state));
    return out;
  }
};

// How a task uses a buffer: rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 2.0).
struct BufferAccess {
  std::shared_ptr<detail::BufferState> state;
  AccessMode mode = AccessMode::read;
};

inline BufferAccess read(const BufferBase& buffer) { return {buffer.state(), AccessMode::read}; }
inline BufferAccess write(const BufferBase& buffer) { return {buffer.state(), AccessMode::write}; }
inline BufferAccess readwrite(const BufferBase& buffer) { return {buffer.state(), AccessMode::readwrite}; }

}  // namespace ferry
