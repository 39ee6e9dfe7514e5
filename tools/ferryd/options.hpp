// ferryd's command line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "fetch_sources.hpp"

namespace ferry::ferryd {

struct Options {
  std::string listen_host;  // empty with --connect and no --listen: 127.0.0.1, any port
  std::uint16_t listen_port = 0;
  // --connect: client runtimes that listen (Options::listen), HOST and PORT;
  // ferryd dials each and redials when it goes away.
  std::vector<std::pair<std::string, std::uint16_t>> connect;
  std::filesystem::path token_file;
  std::string token;  // read from token_file while parsing, so a bad file is a bad command line
  std::filesystem::path authorized_keys;  // clients' Ed25519 keys (checked while parsing)
  std::filesystem::path host_key;         // ferryd's own Ed25519 key, which clients pin
  bool plaintext = false;                 // clients that ask for a plaintext link get one
  bool encrypt_loopback = false;          // seal loopback links too
  // Empty: none asked for; {-1}: all there are; otherwise ordinals.
  std::vector<int> gpus{-1};
  std::uint64_t gpu_memory = 0;    // per GPU, for replicas; 0: its free memory less a margin
  std::vector<std::filesystem::path> plugins;
  std::optional<std::string> metrics_host;
  std::uint16_t metrics_port = 0;
  std::uint64_t memory_limit = 0;  // every client's replicas together
  std::uint64_t client_quota = 0;
  unsigned workers = 0;            // 0: one per CPU this process may use (ferry::available_cpus)
  double handshake_timeout = 10;   // seconds a client has to authenticate
  // Seconds NVRTC may take to compile one client's CUDA source kernel when
  // its definition arrives (at most 100: a client waits 120 s for the reply).
  double compile_limit = 30;
  double drain_seconds = 0;        // after SIGTERM: /readyz 503 this long before clients are told
  // Microseconds the progress thread polls after activity before it sleeps:
  // a client's next request usually comes within it, and waking a sleeping
  // thread costs more than a loopback round trip (docs/tuning.md).
  unsigned poll_us = 100;
  // Client connections per UCX worker before a new one takes the next and
  // the old one ends with its last session (transport::Worker::Options).
  unsigned ucx_worker_sessions = 65536;
  std::filesystem::path port_file;
  std::filesystem::path audit_log;  // empty: no audit log
  // Hosts a client may tell this ferryd to fetch from (FetchSources::parse).
  std::string fetch_from{FetchSources::default_list};
};

// The parsed options, or the exit status when main should stop here: 0
// after --help or --version, 2 after printing what was wrong.
struct Parsed {
  std::optional<Options> options;
  int exit_code = 0;
};
Parsed parse_options(int argc, char** argv);

}  // namespace ferry::ferryd
