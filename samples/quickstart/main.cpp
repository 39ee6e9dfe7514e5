// Ferry in a dozen lines: buffers, a few tasks, a result.
#include <algorithm>
#include <cstdio>

#include <ferry/ferry.hpp>

int main() {
  ferry::Runtime rt;
  const std::size_t n = 1 << 20;
  auto x = rt.buffer<float>(n);
  auto y = rt.buffer<float>(n);
  std::ranges::fill(x.host(), 1.0f);
  std::ranges::fill(y.host(), 2.0f);

  rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 3.0);  // built-in: y = 3x + y
  auto halve = rt.kernel("halve", [](ferry::InOut<float> v) {    // your own kernel
    for (float& e : v) e *= 0.5f;
  });
  rt.submit(halve, ferry::readwrite(y));
  const double dot = rt.submit("dot", ferry::read(x), ferry::read(y)).result();  // waits for the chain

  const double expected = 2.5 * static_cast<double>(n);
  std::printf("x . y = %.1f (expected %.1f); y[0] = %.2f; ran on: %s\n", dot, expected, y.host()[0],
              rt.describe().c_str());
  return dot == expected ? 0 : 1;
}
