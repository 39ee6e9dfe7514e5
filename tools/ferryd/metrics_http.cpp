#include "metrics_http.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/log.hpp"

namespace ferry::ferryd {
namespace {

// How long a port still held by a stopping predecessor is waited for.
constexpr auto bind_patience = std::chrono::seconds(5);

std::string response(int status, const char* reason, const char* type, const std::string& body) {
  return fmt::format(
             "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n"
             "Connection: close\r\n\r\n",
             status, reason, type, body.size()) +
         body;
}

// A listening socket on host:port, or the reason there is none.
int listen_on(const std::string& host, std::uint16_t port, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int error = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); error != 0) {
    why = gai_strerror(error);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  return fd;
}

std::uint16_t bound_port(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

// One client of the port: what it sent so far, then what it is owed.
struct Connection {
  int fd = -1;
  std::chrono::steady_clock::time_point deadline;
  std::string in, out;
  std::size_t sent = 0;
  bool answering = false;
};

}  // namespace

MetricsHttp::MetricsHttp(const std::string& host, std::uint16_t port, Routes routes) : routes_(std::move(routes)) {
  const std::string address =
      host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
  const auto give_up = std::chrono::steady_clock::now() + bind_patience;
  for (bool told = false;;) {
    std::string why;
    listener_ = listen_on(host, port, why);
    if (listener_ >= 0) break;
    // A ferryd restarted at once finds its predecessor still letting go of the port.
    if (port == 0 || std::chrono::steady_clock::now() >= give_up)
      throw Error(fmt::format("cannot serve metrics on {}: {}", address, why));
    if (!std::exchange(told, true))
      log().info("metrics port {} is busy (a ferryd stopping?); retrying for up to {} s", address,
                 std::chrono::duration_cast<std::chrono::seconds>(bind_patience).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  port_ = bound_port(listener_);
  wake_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_ < 0) {
    ::close(listener_);
    throw Error(fmt::format("cannot serve metrics on {}: eventfd: {}", address, std::strerror(errno)));
  }
  thread_ = std::jthread([this](std::stop_token stop) { serve(stop); });
}

MetricsHttp::~MetricsHttp() {
  thread_.request_stop();
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto rung = ::write(wake_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  ::close(wake_);
  ::close(listener_);
}

std::string MetricsHttp::respond(const std::string& request) const {
  // "GET /path?query HTTP/1.x": only the path matters.
  const auto method_end = request.find(' ');
  const auto path_end = method_end == std::string::npos ? method_end : request.find_first_of(" ?\r", method_end + 1);
  if (method_end == std::string::npos || path_end == std::string::npos)
    return response(400, "Bad Request", "text/plain", "expected GET PATH HTTP/1.1\n");
  const std::string method = request.substr(0, method_end), path = request.substr(method_end + 1, path_end - method_end - 1);
  if (method != "GET")
    return response(405, "Method Not Allowed", "text/plain", "ferryd's metrics port answers GET only\n");
  try {
    if (path == "/metrics") return response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", routes_.metrics());
    if (path == "/healthz") {
      const std::string why = routes_.not_live();
      return why.empty() ? response(200, "OK", "text/plain", "ok\n")
                         : response(503, "Service Unavailable", "text/plain", "not live: " + why + "\n");
    }
    if (path == "/readyz") {
      const std::string why = routes_.not_ready();
      return why.empty() ? response(200, "OK", "text/plain", "ready\n")
                         : response(503, "Service Unavailable", "text/plain", "not ready: " + why + "\n");
    }
    return response(404, "Not Found", "text/plain", "ferryd serves /metrics, /healthz and /readyz\n");
  } catch (const std::exception& e) {
    return response(500, "Internal Server Error", "text/plain", std::string(e.what()) + "\n");
  }
}

void MetricsHttp::serve(std::stop_token stop) {
  std::vector<Connection> connections;
  std::vector<pollfd> polled;
  const auto drop = [&](std::size_t i) {
    ::close(connections[i].fd);
    connections[i] = std::move(connections.back());
    connections.pop_back();
  };
  while (!stop.stop_requested()) {
    const auto now = std::chrono::steady_clock::now();
    for (std::size_t i = connections.size(); i-- > 0;)
      if (connections[i].deadline <= now) drop(i);
    auto next_deadline = now + deadline;
    polled.assign({pollfd{wake_, POLLIN, 0}, pollfd{listener_, POLLIN, 0}});
    for (const auto& c : connections) {
      polled.push_back(pollfd{c.fd, static_cast<short>(c.answering ? POLLOUT : POLLIN), 0});
      next_deadline = std::min(next_deadline, c.deadline);
    }
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next_deadline - now).count();
    if (::poll(polled.data(), polled.size(), static_cast<int>(std::max<std::int64_t>(wait, 1))) < 0) {
      if (errno == EINTR) continue;
      log().error("ferryd metrics port: poll failed: {}; no longer serving", std::strerror(errno));
      break;
    }
    if (polled[0].revents != 0) break;  // rung by the destructor
    // Connections first, by their index in `polled` (accepting below appends to `connections`).
    for (std::size_t i = connections.size(); i-- > 0;) {
      const short events = polled[i + 2].revents;
      if (events == 0) continue;
      Connection& c = connections[i];
      if (!c.answering) {
        char buffer[2048];
        const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
        if (n <= 0) {
          if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
          drop(i);  // hung up before asking, or failed
          continue;
        }
        c.in.append(buffer, static_cast<std::size_t>(n));
        if (c.in.find("\r\n\r\n") != std::string::npos || c.in.find("\n\n") != std::string::npos) {
          c.out = respond(c.in);
        } else if (c.in.size() > max_request_bytes) {
          c.out = response(431, "Request Header Fields Too Large", "text/plain", "request too large\n");
        } else {
          continue;
        }
        c.answering = true;
      }
      const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n < 0) {
        drop(i);
        continue;
      }
      c.sent += static_cast<std::size_t>(n);
      if (c.sent == c.out.size()) drop(i);  // Connection: close
    }
    if (polled[1].revents != 0) {
      for (;;) {
        const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;  // EAGAIN: all taken; anything else: try again at the next wake
        if (connections.size() >= max_connections) {
          // Full: the one nearest its deadline makes room, so a scrape always gets in.
          const auto oldest = std::min_element(connections.begin(), connections.end(),
                                               [](const auto& a, const auto& b) { return a.deadline < b.deadline; });
          drop(static_cast<std::size_t>(oldest - connections.begin()));
        }
        connections.push_back(Connection{fd, std::chrono::steady_clock::now() + deadline, {}, {}, 0, false});
      }
    }
  }
  for (const auto& c : connections) ::close(c.fd);
}

}  // namespace ferry::ferryd
