// A view indexes its own elements: on a tile of a larger matrix, `[i]` is the
// tile's row i / cols, column i % cols, in a kernel and on the host, and never
// reaches into a neighbouring tile that another task may be using.
//
// The views' bounds checks are asserts; they stay live here in every build
// type, so the death test below runs in Release too.
#undef NDEBUG
#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime_test_support.hpp"

namespace {

using ferry::In;
using ferry::InOut;

// A rows x cols matrix holding 100 * row + col, so a value names its place.
ferry::Buffer<double> numbered(ferry::Runtime& rt, std::size_t rows, std::size_t cols) {
  auto m = rt.buffer<double>(rows, cols);
  auto h = m.host();
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) h(r, c) = static_cast<double>(100 * r + c);
  return m;
}

double place(std::size_t row, std::size_t col) { return static_cast<double>(100 * row + col); }

TEST(TileView, AKernelLoopingOverATileWritesOnlyThatTile) {
  ferry::Runtime rt(ferry::testing::quiet_options());
  auto m = numbered(rt, 4, 4);
  auto set = rt.kernel("set", [](InOut<double> t, double value) {
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = value;
  });
  rt.submit(set, ferry::readwrite(m.tiles(2, 2)(0, 0)), -1.0).wait();
  const auto h = m.host_read();
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t c = 0; c < 4; ++c)
      EXPECT_EQ(h(r, c), r < 2 && c < 2 ? -1.0 : place(r, c)) << "element (" << r << ", " << c << ")";
}

// Four tasks at once, one per tile: each finds its own tile's elements.
TEST(TileView, KernelsOnNeighbouringTilesSeeTheirOwnElements) {
  ferry::Runtime rt(ferry::testing::quiet_options(4));
  auto m = numbered(rt, 4, 6);
  auto grid = m.tiles(2, 3);
  // Adds the tile's number to each element after checking [i] against (row, col).
  auto mark = rt.kernel("mark", [](InOut<double> t, double tile) {
    for (std::size_t i = 0; i < t.size(); ++i) {
      if (&t[i] != &t(i / t.cols(), i % t.cols())) throw std::runtime_error("[i] is not (i / cols, i % cols)");
      t[i] += 1000 * tile;
    }
  });
  for (std::size_t i = 0; i < grid.rows(); ++i)
    for (std::size_t j = 0; j < grid.cols(); ++j)
      rt.submit(mark, ferry::readwrite(grid(i, j)), static_cast<double>(1 + i * grid.cols() + j));
  rt.wait();
  const auto h = m.host_read();
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t c = 0; c < 6; ++c) {
      const double tile = static_cast<double>(1 + (r / 2) * 2 + c / 3);
      EXPECT_EQ(h(r, c), place(r, c) + 1000 * tile) << "element (" << r << ", " << c << ")";
    }
}

TEST(TileView, HostViewsOfATileIndexTheTile) {
  ferry::Runtime rt(ferry::testing::quiet_options());
  auto m = numbered(rt, 4, 4);
  auto grid = m.tiles(2, 2);
  EXPECT_EQ(grid(0, 0).host_read()[2], place(1, 0)) << "tile (0,0)'s element 2 is its row 1, column 0";
  EXPECT_EQ(grid(0, 1).host_read()[1], place(0, 3));
  EXPECT_EQ(grid(1, 1).host_read()[3], place(3, 3));
  grid(1, 0).host()[1] = -5;
  EXPECT_EQ(m.host_read()(2, 1), -5.0);
  EXPECT_EQ(m.host_read()(2, 2), place(2, 2)) << "a write through tile (1,0) reached tile (1,1)";
}

// [i] walks a view in the order range-for does where a view is a range
// (contiguous ones, including a tile as wide as its root and a one-row tile),
// and in (row, col) order everywhere, edge tiles included; a strided tile
// refuses range-for with a message that says how to index it.
TEST(TileView, RangeForAndIndexAgree) {
  ferry::Runtime rt(ferry::testing::quiet_options());
  auto m = numbered(rt, 5, 5);
  auto agree = [](const ferry::HostView<const double>& v, const std::string& what) {
    for (std::size_t i = 0; i < v.size(); ++i)
      EXPECT_EQ(v[i], v(i / v.cols(), i % v.cols())) << what << ", element " << i;
    if (!v.contiguous()) {
      try {
        for ([[maybe_unused]] double x : v) {
        }
        ADD_FAILURE() << what << ": range-for over a strided tile did not refuse";
      } catch (const ferry::UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("(row, col)"), std::string::npos) << e.what();
      }
      return;
    }
    std::size_t i = 0;
    for (const double& x : v) EXPECT_EQ(&x, &v[i++]) << what;
    EXPECT_EQ(i, v.size()) << what;
  };
  agree(m.host_read(), "the whole matrix");
  agree(m.split(2)[1].host_read(), "rows 3-4");
  agree(m.tiles(2, 5)(1, 0).host_read(), "a full-width tile");
  agree(m.tiles(1, 3)(2, 1).host_read(), "a one-row tile");
  agree(m.tiles(2, 2)(1, 1).host_read(), "a 2 x 2 tile");
  agree(m.tiles(2, 2)(0, 2).host_read(), "an edge tile, 2 x 1");
  agree(m.tiles(3, 3)(0, 1).host_read(), "an edge tile, 3 x 2");

  auto checked = rt.kernel("checked", [](In<double> t) {
    double bad = 0;
    for (std::size_t i = 0; i < t.size(); ++i) bad += t[i] != t(i / t.cols(), i % t.cols());
    return bad;
  });
  EXPECT_EQ(rt.submit(checked, ferry::read(m.tiles(3, 2)(0, 1))).result(), 0.0);
}

// An index past the view dies instead of reading the neighbour's element.
TEST(TileViewDeathTest, IndexesOutsideTheViewAreCaught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<double> root(16);
  const ferry::HostView<double> tile(root.data() + 2, 2, 2, 4);  // rows 0-1, cols 2-3 of a 4 x 4
  EXPECT_DEATH((void)tile[4], "outside the view");
  EXPECT_DEATH((void)tile(0, 2), "outside the view");
  EXPECT_DEATH((void)tile(2, 0), "outside the view");
  const ferry::HostView<double> row(root.data(), 1, 16, 16);
  EXPECT_DEATH((void)row[16], "outside the view");
}

}  // namespace
