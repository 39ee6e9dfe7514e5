// Reading a ferryd's /metrics port from a test: the port it logged, one
// scrape, and one series' value out of the text.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>

#include "ferryd_process.hpp"

namespace ferry::test {

// The port a ferryd started with --metrics 127.0.0.1:0 took.
inline std::uint16_t logged_metrics_port(const FerrydProcess& server) {
  if (!server.wait_for_log("metrics on http://")) throw std::runtime_error("no metrics line:\n" + server.log());
  std::smatch match;
  const std::string log = server.log();
  if (!std::regex_search(log, match, std::regex(R"(metrics on http://127\.0\.0\.1:(\d+)/metrics)")))
    throw std::runtime_error("no metrics port in:\n" + log);
  return static_cast<std::uint16_t>(std::stoi(match[1]));
}

// The body of GET /metrics from 127.0.0.1:port.
inline std::string scrape_metrics(std::uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  timeval tv{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
    const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) response.append(buffer, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  if (response.find("200 OK") == std::string::npos) throw std::runtime_error("scrape failed: '" + response + "'");
  return response;
}

// The value of the series written exactly as `series` (name and labels as
// the text has them), or nothing.
inline std::optional<double> metric_value(const std::string& text, const std::string& series) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with(series + " ")) return std::stod(line.substr(series.size() + 1));
  return std::nullopt;
}

}  // namespace ferry::test
