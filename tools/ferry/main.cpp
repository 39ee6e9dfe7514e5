// The `ferry` command-line tool: a look at the machine and a quick allocator check.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "bench_alloc.hpp"
#include "ferry/config.hpp"
#include "ferry/log.hpp"
#include "info.hpp"

int main(int argc, char** argv) {
  CLI::App app{"ferry: inspect this machine for the Ferry offload runtime"};
  app.set_version_flag("--version", ferry::config::version);
  app.require_subcommand(1);

  bool as_json = false;
  auto* info = app.add_subcommand("info", "CPUs, memory, CUDA devices, UCX transports and RDMA devices");
  info->add_flag("--json", as_json, "print the same as JSON");

  double seconds = 2.0;
  auto* bench = app.add_subcommand("bench-alloc", "median cost of an alloc+free pair: pinned pool vs malloc vs mmap");
  bench->add_option("--seconds", seconds, "total time to spend measuring")
      ->check(CLI::Range(0.01, 600.0))
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);

  try {
    if (info->parsed()) {
      // `info` prints why CUDA is unavailable itself; the runtime's log line would say it twice.
      if (std::getenv("FERRY_LOG") == nullptr) ferry::log().set_level(spdlog::level::warn);
      return ferry::tools::run_info(as_json);
    }
    return ferry::tools::run_bench_alloc(seconds);
  } catch (const std::exception& e) {
    fmt::print(stderr, "ferry: {}\n", e.what());
    return EXIT_FAILURE;
  }
}
