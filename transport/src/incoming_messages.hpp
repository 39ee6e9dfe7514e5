// What a connection's message handler is handed (Incoming), by how the
// message came: as UCX delivered it (eager, or a rendezvous fetched into
// place), sealed (opened once its payload landed), or pulled out of the
// sender's memory (pull.hpp).
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "completion.hpp"
#include "connection_impl.hpp"
#include "pull.hpp"

namespace ferry::transport {

// Valid for one AM callback. Eager data is copied out right there; a
// rendezvous payload is fetched straight into `dest` by ucp_am_recv_data_nbx.
class IncomingMessage final : public Incoming {
 public:
  // `bulk`: the connection, when the message came on its peer's bulk lane
  // (a close waits for its payload). `generation`: the UCX worker it came on.
  IncomingMessage(Worker::Impl::Generation& generation, std::span<const std::byte> header, void* data,
                  std::size_t length, bool rendezvous, ConnectionImpl* bulk = nullptr)
      : impl_(*generation.impl),
        worker_(generation.worker),
        header_(header),
        data_(data),
        length_(length),
        rendezvous_(rendezvous),
        bulk_(bulk) {}

  std::span<const std::byte> header() const noexcept override { return header_; }
  std::size_t payload_bytes() const noexcept override { return length_; }

  void into(void* dest, Done done) override;

  ucs_status_t status() const noexcept { return status_; }

 private:
  Worker::Impl& impl_;
  ucp_worker_h worker_;
  std::span<const std::byte> header_;
  void* data_;
  std::size_t length_;
  bool rendezvous_;
  ConnectionImpl* bulk_;
  bool taken_ = false;
  ucs_status_t status_ = UCS_OK;
};

// An encrypted connection's message: the header opened already, the payload
// landing sealed in a staging buffer of its own and opened there; the
// destination sees plaintext only once it authenticated, and nothing at all
// otherwise.
class OpenedMessage final : public Incoming {
 public:
  OpenedMessage(Incoming& sealed, std::vector<std::byte> header, std::uint64_t number,
                std::shared_ptr<ConnectionImpl> connection)
      : sealed_(sealed), header_(std::move(header)), number_(number), connection_(std::move(connection)) {}

  std::span<const std::byte> header() const noexcept override { return header_; }
  std::size_t payload_bytes() const noexcept override {
    const auto wire = sealed_.payload_bytes();
    return wire == 0 ? 0 : wire - seal_overhead;
  }

  void into(void* dest, Done done) override;

 private:
  // Payloads smaller than this are opened on the progress thread: a hand-off
  // costs two wake-ups, more than opening 256 KiB.
  static constexpr std::size_t open_elsewhere_from = std::size_t{256} << 10;
  // Where the payload opened (`opened`) or failed to: tells `done`, and
  // drops the connection on a failure.
  static void opened_or_rejected(ConnectionImpl& connection, bool opened, const Done& done);
  Incoming& sealed_;
  std::vector<std::byte> header_;
  std::uint64_t number_;
  std::shared_ptr<ConnectionImpl> connection_;
};

// A message whose payload stays in the sender's memory until into() pulls it.
class PulledMessage final : public Incoming {
 public:
  PulledMessage(ConnectionImpl& connection, std::span<const std::byte> header, const pull::Descriptor& d)
      : connection_(connection), header_(header), descriptor_(d) {}

  std::span<const std::byte> header() const noexcept override { return header_; }
  std::size_t payload_bytes() const noexcept override { return descriptor_.bytes; }
  void into(void* dest, Done done) override;
  bool taken() const noexcept { return taken_; }

 private:
  ConnectionImpl& connection_;
  std::span<const std::byte> header_;
  pull::Descriptor descriptor_;
  bool taken_ = false;
};

}  // namespace ferry::transport
