#include "metrics_http.hpp"

#include <CivetServer.h>
#include <fmt/format.h>

#include <chrono>
#include <thread>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/log.hpp"

namespace ferry::ferryd {
namespace {

// Enough that a few stalled connections leave threads for Prometheus; the
// deadline bounds how long one connection may hold a thread.
constexpr const char* serving_threads = "4";
constexpr const char* request_deadline_ms = "5000";
// How long a port still held by a stopping predecessor is waited for.
constexpr auto bind_patience = std::chrono::seconds(5);

void respond(mg_connection* conn, int status, const char* reason, const char* type, const std::string& body) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
            "Connection: close\r\n\r\n",
            status, reason, type, body.size());
  mg_write(conn, body.data(), body.size());
}

}  // namespace

class MetricsHttp::Handler : public CivetHandler {
 public:
  explicit Handler(const Routes& routes) : routes_(routes) {}

  bool handleGet(CivetServer*, mg_connection* conn) override {
    const mg_request_info* request = mg_get_request_info(conn);
    const std::string uri = request->local_uri ? request->local_uri : "";
    try {
      if (uri == "/metrics") {
        respond(conn, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", routes_.metrics());
      } else if (uri == "/healthz") {
        respond(conn, 200, "OK", "text/plain", "ok\n");
      } else if (uri == "/readyz") {
        if (routes_.ready()) respond(conn, 200, "OK", "text/plain", "ready\n");
        else respond(conn, 503, "Service Unavailable", "text/plain", "not accepting clients\n");
      } else {
        respond(conn, 404, "Not Found", "text/plain", "ferryd serves /metrics, /healthz and /readyz\n");  // e.g. /metrics/x
      }
    } catch (const std::exception& e) {
      respond(conn, 500, "Internal Server Error", "text/plain", std::string(e.what()) + "\n");
    }
    return true;
  }

 private:
  const Routes& routes_;
};

MetricsHttp::MetricsHttp(const std::string& host, std::uint16_t port, Routes routes)
    : routes_(std::move(routes)), handler_(std::make_unique<Handler>(routes_)) {
  const std::string address =
      host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
  const std::vector<std::string> options{"listening_ports",    address,
                                         "num_threads",        serving_threads,
                                         "request_timeout_ms", request_deadline_ms,
                                         "enable_keep_alive",  "no"};
  const auto deadline = std::chrono::steady_clock::now() + bind_patience;
  for (bool told = false;;) {
    try {
      server_ = std::make_unique<CivetServer>(options);
      break;
    } catch (const std::exception& e) {
      // A ferryd restarted at once finds its predecessor still letting go of the port.
      if (port == 0 || std::chrono::steady_clock::now() >= deadline)
        throw Error(fmt::format("cannot serve metrics on {}: {}", address, e.what()));
      if (!std::exchange(told, true))
        log().info("metrics port {} is busy (a ferryd stopping?); retrying for up to {} s", address,
                   std::chrono::duration_cast<std::chrono::seconds>(bind_patience).count());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  for (const char* uri : {"/metrics", "/healthz", "/readyz"}) server_->addHandler(uri, handler_.get());
  const auto ports = server_->getListeningPorts();
  port_ = ports.empty() ? port : static_cast<std::uint16_t>(ports.front());
}

MetricsHttp::~MetricsHttp() {
  if (server_) server_->close();
}

}  // namespace ferry::ferryd
