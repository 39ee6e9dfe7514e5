// libFuzzer target for the check of a peer's UCX worker address
// (transport/src/worker_address.cpp). A peer controls every byte of it, so
// for any input the check must return without reading outside the input
// (ASan watches), and what it accepts must be exactly one address: no
// shorter prefix of an accepted input is accepted too (the walk ends where
// the address ends, as UCX's own packer asserts). Run through
// run_worker_address_fuzzer.sh.
//
// FERRY_FUZZ_SEED_DIR=dir ./worker_address_fuzzer writes real addresses,
// made by this host's UCX with several transports and both address
// versions, into dir and exits.
#include <ucp/api/ucp.h>

#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "worker_address.hpp"

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "worker_address_fuzzer: %s\n", what);
  std::abort();
}

// This host's UCX worker address under `tls` and `version`; empty when UCX
// cannot make one here (a transport missing).
std::vector<std::uint8_t> real_address(const char* tls, const char* version, const char* debug_info) {
  setenv("UCX_TLS", tls, 1);
  setenv("UCX_ADDRESS_VERSION", version, 1);
  setenv("UCX_ADDRESS_DEBUG_INFO", debug_info, 1);
  std::vector<std::uint8_t> bytes;
  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) return bytes;
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM;
  ucp_context_h context = nullptr;
  const ucs_status_t made = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (made != UCS_OK) return bytes;
  ucp_worker_params_t worker_params{};
  ucp_worker_h worker = nullptr;
  if (ucp_worker_create(context, &worker_params, &worker) == UCS_OK) {
    ucp_address_t* address = nullptr;
    std::size_t length = 0;
    if (ucp_worker_get_address(worker, &address, &length) == UCS_OK) {
      const auto* begin = reinterpret_cast<const std::uint8_t*>(address);
      bytes.assign(begin, begin + length);
      ucp_worker_release_address(worker, address);
    }
    ucp_worker_destroy(worker);
  }
  ucp_cleanup(context);
  return bytes;
}

void write_seeds(const std::string& dir) {
  int n = 0;
  for (const char* tls : {"tcp", "tcp,self", "posix,sysv,self", "all"})
    for (const char* version : {"v1", "v2"})
      for (const char* debug_info : {"n", "y"}) {
        const auto address = real_address(tls, version, debug_info);
        if (address.empty()) continue;
        if (!ferry::transport::worker_address::check(address).empty()) finding("a real address is refused");
        const std::string path = dir + "/seed-" + std::to_string(n++);
        std::FILE* f = std::fopen(path.c_str(), "wb");
        if (f == nullptr || std::fwrite(address.data(), 1, address.size(), f) != address.size()) {
          std::perror(path.c_str());
          std::exit(1);
        }
        std::fclose(f);
      }
  std::printf("wrote %d real addresses\n", n);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("FERRY_FUZZ_SEED_DIR")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> address(data, size);
  const std::string why = ferry::transport::worker_address::check(address);
  if (!why.empty()) return 0;  // refused: the expected outcome for most inputs
  for (std::size_t n = 0; n < size; ++n)
    if (ferry::transport::worker_address::check(address.first(n)).empty())
      finding("a prefix of an accepted address is accepted too");
  return 0;
}
