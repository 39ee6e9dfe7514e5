// The host replica of a buffer as the user sees it after acquiring it: a
// row-major matrix (1-D buffers are one row) with a leading dimension.
// A view is an acquisition (StarPU's acquire/release): while it (or a copy
// of it) lives, tasks submitted later that would race with it wait for it,
// those that write the buffer and, for a writable view, those that read it.
// It ends when the last copy goes out of scope, or at release().
//
// A view indexes its own elements, never the root's: on a tile of a larger
// matrix, `v[i]` is the tile's row i / cols(), column i % cols(), and
// `v(r, c)` its row r, column c; both are checked by assert (builds without
// NDEBUG). Only a contiguous view is a range (begin/end are plain pointers,
// so std:: algorithms run at full speed); a tile refuses to be iterated.
#pragma once

#include <cassert>
#include <cstddef>
#include <memory>
#include <utility>

#include "ferry/error.hpp"

namespace ferry {

template <typename T>
class HostView {
 public:
  HostView(T* data, std::size_t rows, std::size_t cols, std::size_t ld,
           std::shared_ptr<const void> hold = nullptr) noexcept
      : data_(data), rows_(rows), cols_(cols), ld_(ld), hold_(std::move(hold)) {}

  // Ends this view's hold early: tasks waiting for it may run. The view is
  // empty afterwards (no elements), so it cannot be used by mistake.
  void release() noexcept {
    hold_.reset();
    data_ = nullptr;
    rows_ = cols_ = 0;
  }

  T* data() const noexcept { return data_; }
  std::size_t rows() const noexcept { return rows_; }
  std::size_t cols() const noexcept { return cols_; }
  std::size_t ld() const noexcept { return ld_; }
  std::size_t size() const noexcept { return rows_ * cols_; }
  bool contiguous() const noexcept { return rows_ <= 1 || ld_ == cols_; }

  T& operator()(std::size_t row, std::size_t col) const noexcept {
    assert(row < rows_ && col < cols_ && "ferry::HostView: (row, col) outside the view");
    return data_[row * ld_ + col];
  }
  // Element i of the view in row-major order. A contiguous view (every 1-D
  // buffer, every split(), a whole matrix) takes it directly; a tile skips
  // the root's columns outside it at each row end. The test costs a loop
  // that -O2 does not unswitch about 2x on a bare scale; the hottest loops
  // over contiguous views take data() or begin(), plain pointers.
  T& operator[](std::size_t i) const noexcept {
    assert(i < size() && "ferry::HostView: [i] outside the view");
    if (contiguous()) [[likely]]
      return data_[i];
    return data_[i / cols_ * ld_ + i % cols_];
  }

  // A contiguous view is a range, so std::ranges algorithms work on it; a
  // tile of a larger matrix is not, and says so instead of walking off a row.
  T* begin() const {
    require_contiguous();
    return data_;
  }
  T* end() const {
    require_contiguous();
    return data_ + size();
  }

 private:
  void require_contiguous() const {
    if (!contiguous())
      throw UsageError(
          "this buffer view is a tile of a larger matrix (rows are not adjacent), so it is not a range: "
          "index it as [i] or (row, col)");
  }

  T* data_;
  std::size_t rows_, cols_, ld_;
  std::shared_ptr<const void> hold_;  // the acquisition; shared by copies of the view
};

}  // namespace ferry
