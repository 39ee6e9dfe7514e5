// Where a view lies inside its root buffer. Every buffer is a row-major
// matrix (a 1-D buffer of n elements is 1 x n); a view is a rectangle of it.
#pragma once

#include <cstddef>

namespace ferry {

struct Region {
  std::size_t row0 = 0;
  std::size_t col0 = 0;
  std::size_t rows = 0;
  std::size_t cols = 0;

  std::size_t elements() const noexcept { return rows * cols; }
  bool empty() const noexcept { return rows == 0 || cols == 0; }
  bool overlaps(const Region& o) const noexcept {
    return !empty() && !o.empty() && row0 < o.row0 + o.rows && o.row0 < row0 + rows && col0 < o.col0 + o.cols &&
           o.col0 < col0 + cols;
  }
  bool contains(const Region& o) const noexcept {
    return o.row0 >= row0 && o.col0 >= col0 && o.row0 + o.rows <= row0 + rows && o.col0 + o.cols <= col0 + cols;
  }
  friend bool operator==(const Region&, const Region&) = default;
};

}  // namespace ferry
