// Accepts connections on host:port through a UCP listener.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ferry/transport/connection.hpp"

namespace ferry::transport {

class Worker;

class Listener {
 public:
  // Called on the progress thread with each new connection; set its handlers there.
  using AcceptHandler = std::function<void(std::shared_ptr<Connection>)>;

  // Port 0 picks a free port (see port()). Throws UcxError naming the
  // address when it cannot listen (e.g. the port is taken).
  static std::unique_ptr<Listener> listen(const std::shared_ptr<Worker>& worker, const std::string& host,
                                          std::uint16_t port, AcceptHandler on_accept);
  virtual ~Listener() = default;
  virtual std::uint16_t port() const noexcept = 0;
  // Stops accepting; existing connections stay.
  virtual void stop() = 0;
};

// "ucx://host:port" or "host:port" -> (host, port); throws UsageError naming the text.
std::pair<std::string, std::uint16_t> parse_address(const std::string& text);

}  // namespace ferry::transport
