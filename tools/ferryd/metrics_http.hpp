// ferryd's HTTP port for operators: /metrics (Prometheus text), /healthz
// (the process is alive and of use) and /readyz (it accepts clients), bound
// to the address the operator named.
//
// One thread waits on every connection at once (poll), reading a request
// only as its bytes come and writing the answer as the peer takes it, so a
// connection that is idle, half-sent or slow to read holds up no other: each
// has a deadline from when it was accepted, and past max_connections the
// one nearest its deadline is closed for the newcomer.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

namespace ferry::ferryd {

class MetricsHttp {
 public:
  struct Routes {
    std::function<std::string()> metrics;  // the body of /metrics
    // Why not, for people; empty: 200. Otherwise 503 with the reason.
    std::function<std::string()> not_ready;  // /readyz
    std::function<std::string()> not_live;   // /healthz
  };
  static constexpr std::size_t max_connections = 256;
  static constexpr std::size_t max_request_bytes = 8192;
  static constexpr std::chrono::seconds deadline{5};  // a connection's whole life

  // Serves on host:port (port 0: any free port). A port still held by a
  // ferryd that is stopping is waited for, a few seconds at most; then
  // throws ferry::Error naming the address.
  MetricsHttp(const std::string& host, std::uint16_t port, Routes routes);
  // Closes the port and every connection.
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  std::uint16_t port() const noexcept { return port_; }

 private:
  void serve(std::stop_token stop);
  // The whole response to `request` (its head, up to the blank line).
  std::string respond(const std::string& request) const;

  Routes routes_;
  int listener_ = -1;
  int wake_ = -1;  // an eventfd: the destructor rings it to stop the thread
  std::uint16_t port_ = 0;
  std::jthread thread_;  // last: it starts once the rest is there
};

}  // namespace ferry::ferryd
