// The `ferry` command-line tool: a look at the machine, a check of a GPU host, models, a quick allocator check, and keys for ferryd.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "bench_alloc.hpp"
#include "check.hpp"
#include "models.hpp"
#include "ferry/config.hpp"
#include "ferry/log.hpp"
#include "info.hpp"
#include "keygen.hpp"

int main(int argc, char** argv) {
  CLI::App app{"ferry: inspect this machine for the Ferry offload runtime"};
  app.set_version_flag("--version", ferry::config::version);
  app.require_subcommand(0, 1);  // none: print the help

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
  ferry::tools::CheckOptions check_options;
  double check_timeout = 10.0;
  auto* check = app.add_subcommand("check", "connect to a ferryd as a runtime would: authenticate, measure the link, "
                                            "list its devices and kernels");
  check->add_option("address", check_options.address, "the GPU host, ucx://host:port or host:port")->required();
  check->add_option("--token", check_options.token, "the pre-shared token (default: FERRY_TOKEN)");
  check->add_option("--token-file", check_options.token_file, "the file holding it (default: FERRY_TOKEN_FILE)");
  check->add_option("--identity", check_options.identity,
                    "sign in with this private key (ferry keygen) (default: FERRY_IDENTITY)");
  check->add_flag("--strict", check_options.strict,
                  "trust only host keys pinned beforehand in known_hosts (default: FERRY_STRICT_HOST_KEYS)");
  check->add_option("--timeout", check_timeout, "seconds to connect and authenticate")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();

  ferry::tools::ModelsOptions models_options;
  auto* models = app.add_subcommand("models", "the performance models runtimes learned: list, show KERNEL, reset");
  models->add_option("action", models_options.action, "list (default), show or reset")
      ->check(CLI::IsMember({"list", "show", "reset"}));
  models->add_option("kernel", models_options.kernel, "show: the kernel; reset: only its models");
  models->add_option("--device", models_options.device, "only models of this device key (as list prints it)");
  models->add_option("--dir", models_options.dir, "where models are kept (default: FERRY_PERFMODEL_DIR or ~/.cache)");

  CLI11_PARSE(app, argc, argv);
  if (app.get_subcommands().empty()) {
    fmt::print("{}", app.help());
    return EXIT_SUCCESS;
  }

  try {
    if (info->parsed()) {
      // `info` prints why CUDA is unavailable itself; the runtime's log line would say it twice.
      if (std::getenv("FERRY_LOG") == nullptr) ferry::log().set_level(spdlog::level::warn);
      return ferry::tools::run_info(as_json);
    }
    if (keygen->parsed()) return ferry::tools::run_keygen(key_file, key_name);
    if (models->parsed()) return ferry::tools::run_models(models_options);
    if (check->parsed()) {
      check_options.timeout = std::chrono::milliseconds(static_cast<long>(check_timeout * 1000));
      return ferry::tools::run_check(check_options);
    }
    return ferry::tools::run_bench_alloc(seconds);
  } catch (const std::exception& e) {
    fmt::print(stderr, "ferry: {}\n", e.what());
    return EXIT_FAILURE;
  }
}
