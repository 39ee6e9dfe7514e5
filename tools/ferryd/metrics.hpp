// ferryd's Prometheus metrics. The counters always exist (updating one is a
// relaxed atomic add); only with --metrics does an HTTP exposer serve them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Registry;
}  // namespace prometheus

namespace ferry::ferryd {

class Metrics {
 public:
  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Serves /metrics on host:port (port 0: any free port); returns the port.
  // Throws ferry::Error naming the address when it cannot bind.
  std::uint16_t expose(const std::string& host, std::uint16_t port);

  void task_done();
  void bytes_in(std::uint64_t bytes);
  void bytes_out(std::uint64_t bytes);
  void auth_failure();
  void protocol_error();
  void client_connected();
  void client_gone();
  void memory_in_use(std::uint64_t bytes);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* tasks_;
  prometheus::Counter* bytes_in_;
  prometheus::Counter* bytes_out_;
  prometheus::Counter* auth_failures_;
  prometheus::Counter* protocol_errors_;
  prometheus::Gauge* clients_;
  prometheus::Gauge* memory_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace ferry::ferryd
