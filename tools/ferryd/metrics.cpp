#include "metrics.hpp"

#include <fmt/format.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "ferry/error.hpp"

namespace ferry::ferryd {
namespace {

prometheus::Counter& counter(prometheus::Registry& registry, const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Gauge& gauge(prometheus::Registry& registry, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  tasks_ = &counter(r, "ferry_tasks_total", "Tasks run for clients");
  bytes_in_ = &counter(r, "ferry_bytes_in_total", "Payload bytes received from clients");
  bytes_out_ = &counter(r, "ferry_bytes_out_total", "Payload bytes sent to clients");
  auth_failures_ = &counter(r, "ferry_auth_failures_total", "Clients refused for a bad token");
  protocol_errors_ = &counter(r, "ferry_protocol_errors_total", "Connections closed for malformed or out-of-order messages");
  clients_ = &gauge(r, "ferry_clients", "Authenticated clients connected now");
  memory_ = &gauge(r, "ferry_memory_in_use_bytes", "Bytes of replicas held for all clients");
}

Metrics::~Metrics() = default;

std::uint16_t Metrics::expose(const std::string& host, std::uint16_t port) {
  const std::string address = fmt::format("{}:{}", host, port);
  try {
    // One serving thread: a scrape every few seconds needs no more.
    exposer_ = std::make_unique<prometheus::Exposer>(address, 1);
  } catch (const std::exception& e) {
    throw Error(fmt::format("cannot serve metrics on {}: {}", address, e.what()));
  }
  exposer_->RegisterCollectable(registry_);
  const auto ports = exposer_->GetListeningPorts();
  return ports.empty() ? port : static_cast<std::uint16_t>(ports.front());
}

void Metrics::task_done() { tasks_->Increment(); }
void Metrics::bytes_in(std::uint64_t bytes) { bytes_in_->Increment(static_cast<double>(bytes)); }
void Metrics::bytes_out(std::uint64_t bytes) { bytes_out_->Increment(static_cast<double>(bytes)); }
void Metrics::auth_failure() { auth_failures_->Increment(); }
void Metrics::protocol_error() { protocol_errors_->Increment(); }
void Metrics::client_connected() { clients_->Increment(); }
void Metrics::client_gone() { clients_->Decrement(); }
void Metrics::memory_in_use(std::uint64_t bytes) { memory_->Set(static_cast<double>(bytes)); }

}  // namespace ferry::ferryd
