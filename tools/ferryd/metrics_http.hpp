// ferryd's HTTP port for operators: /metrics (Prometheus text), /healthz
// (the process is alive) and /readyz (it accepts clients). Served by a few
// threads with a deadline per request, so one slow or half-sent request
// cannot hold up a scrape; bound to the address the operator named.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

class CivetServer;

namespace ferry::ferryd {

class MetricsHttp {
 public:
  struct Routes {
    std::function<std::string()> metrics;  // the body of /metrics
    std::function<bool()> ready;           // /readyz: 200 when true, else 503
  };
  // Serves on host:port (port 0: any free port). A port still held by a
  // ferryd that is stopping is waited for, a few seconds at most; then
  // throws ferry::Error naming the address.
  MetricsHttp(const std::string& host, std::uint16_t port, Routes routes);
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  std::uint16_t port() const noexcept { return port_; }

 private:
  class Handler;
  Routes routes_;
  std::unique_ptr<Handler> handler_;
  std::unique_ptr<CivetServer> server_;
  std::uint16_t port_ = 0;
};

}  // namespace ferry::ferryd
