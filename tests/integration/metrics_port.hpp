// A test's view of ferryd's operator port (--metrics 127.0.0.1:0): which
// port it took, from its log, a scrape, and one series' value.
#pragma once

#include <cstdint>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>

#include "ferryd_process.hpp"
#include "http_get.hpp"

namespace ferry::test {

// The port the server's "metrics on http://127.0.0.1:PORT/metrics" line names.
inline std::uint16_t metrics_port(const FerrydProcess& server) {
  if (!server.wait_for_log("metrics on http://")) throw std::runtime_error("no metrics line:\n" + server.log());
  std::smatch match;
  const std::string log = server.log();
  if (!std::regex_search(log, match, std::regex(R"(metrics on http://127\.0\.0\.1:(\d+)/metrics)")))
    throw std::runtime_error("no metrics port in:\n" + log);
  return static_cast<std::uint16_t>(std::stoi(match[1]));
}

// The body of GET /metrics (with its status line), or a throw naming what came.
inline std::string scrape_metrics(std::uint16_t port) {
  const std::string response = http_get(port, "/metrics");
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
