// The `ferry` command-line tool: a look at the machine, a quick allocator check, and keys for ferryd.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "bench_alloc.hpp"
#include "ferry/config.hpp"
#include "ferry/log.hpp"
#include "info.hpp"
#include "keygen.hpp"

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

  std::string key_file, key_name;
  auto* keygen = app.add_subcommand(
      "keygen", "make an Ed25519 key pair to sign in to ferryd with; prints the line for its --authorized-keys");
  keygen->add_option("file", key_file, "where the private key goes (mode 600; the public line goes to FILE.pub)")
      ->required();
  keygen->add_option("--name", key_name, "the key's name in ferryd's logs (default: user@host)");

  CLI11_PARSE(app, argc, argv);

  try {
    if (info->parsed()) {
      // `info` prints why CUDA is unavailable itself; the runtime's log line would say it twice.
      if (std::getenv("FERRY_LOG") == nullptr) ferry::log().set_level(spdlog::level::warn);
      return ferry::tools::run_info(as_json);
    }
    if (keygen->parsed()) return ferry::tools::run_keygen(key_file, key_name);
    return ferry::tools::run_bench_alloc(seconds);
  } catch (const std::exception& e) {
    fmt::print(stderr, "ferry: {}\n", e.what());
    return EXIT_FAILURE;
  }
}
