// What tests/deploy/dashboard_metrics.py runs against the ferryd it scrapes,
// so that the series the dashboards query exist (a client's, a kernel's, a
// transfer's series are made when something is counted): tasks pinned to
// the host, one of which fails, and data back.
// Usage: dashboard_workload HOST:PORT TOKEN_FILE
#include <algorithm>
#include <cstdio>
#include <exception>

#include <ferry/ferry.hpp>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s HOST:PORT TOKEN_FILE\n", argv[0]);
    return 2;
  }
  try {
    ferry::Runtime::Options o;
    o.read_environment = false;
    o.workers = 1;
    o.gpus = "none";
    o.persist_perf_models = false;
    o.remotes = {argv[1]};
    o.token_file = argv[2];
    ferry::Runtime rt(o);
    const auto there = ferry::on(ferry::remote(argv[1]));
    auto x = rt.buffer<double>(1024);
    auto y = rt.buffer<double>(1024);
    for (double& v : x.host()) v = 1.0;
    for (double& v : y.host()) v = 0.0;
    rt.submit("axpy", ferry::read(x), ferry::readwrite(y), 2.0, there);
    auto not_positive_definite = rt.buffer<double>(2, 2);
    const double values[4] = {1, 2, 2, 1};
    std::copy(values, values + 4, not_positive_definite.host().begin());
    auto failed = rt.submit("potrf", ferry::readwrite(not_positive_definite), there);
    try {
      failed.wait();
      std::fprintf(stderr, "potrf of a matrix that is not positive definite did not fail\n");
      return 1;
    } catch (const ferry::KernelError&) {
    }
    if (y.host()[0] != 2.0) {  // waits for axpy, fetches y from the host
      std::fprintf(stderr, "axpy on the host gave %g, not 2\n", y.host()[0]);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dashboard_workload: %s\n", e.what());
    return 1;
  }
}
