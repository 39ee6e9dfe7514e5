// What encryption costs: AEAD throughput on one core (with the cipher's
// name), a bulk ship and an empty round trip over loopback TCP, each sealed
// and plaintext side by side in the same run, with the ratios.
//   ferry_bench_secure [--seconds S] [--sealed-bulk-only]
// (--sealed-bulk-only runs just the sealed 4 MiB ship, for a profiler.)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/secure_channel.hpp"
#include "ferry/transport/worker.hpp"

namespace {

using namespace ferry::transport;
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double seal_gbps(Cipher cipher, double seconds) {
  SessionKey a{}, b{};
  a.fill(1);
  b.fill(2);
  SecureChannel channel(cipher, a, b);
  std::vector<std::byte> plain(4 << 20, std::byte{7}), sealed(plain.size() + seal_overhead);
  const std::byte header[16] = {};
  std::size_t bytes = 0;
  const auto start = Clock::now();
  while (since(start) < seconds) {
    channel.seal(header, plain, sealed.data());
    bytes += plain.size();
  }
  return static_cast<double>(bytes) / since(start) / 1e9;
}

// A server that answers every message with an empty one, once its payload is in.
struct Echo {
  explicit Echo(bool sealed) {
    worker = Worker::create({"bench-server"});
    BootstrapServer::Options options;
    options.host = "127.0.0.1";
    options.token = "bench";
    options.encrypt_loopback = sealed;
    server = std::make_unique<BootstrapServer>(worker, options, [this](const Peer&, std::shared_ptr<Connection> c) {
      c->set_handlers(
          [this](Connection& connection, Incoming& in) {
            auto self = connection.shared_from_this();
            if (in.payload_bytes() == 0) return self->send({std::byte{1}});
            sink.resize(std::max(sink.size(), in.payload_bytes()));
            in.into(sink.data(), [self](const std::string&) { self->send({std::byte{1}}); });
          },
          {});
      accepted.push_back(std::move(c));
      return ferry::protocol::Welcome{};
    });
  }
  ~Echo() {
    server.reset();
    worker->call([this] {
      for (auto& c : accepted) c->close();
      accepted.clear();
    });
  }
  std::shared_ptr<Worker> worker;
  std::unique_ptr<BootstrapServer> server;
  std::vector<std::shared_ptr<Connection>> accepted;  // progress thread
  std::vector<std::byte> sink;
};

struct Client {
  Client(std::uint16_t port, bool sealed) {
    worker = Worker::create({"bench-client"});
    DialOptions options;
    options.token = "bench";
    options.privacy = sealed ? ferry::protocol::Privacy::encrypt : ferry::protocol::Privacy::automatic;
    connection = dial(worker, "127.0.0.1", port, options,
                      [this](Connection&, Incoming&) {
                        std::lock_guard lock(mutex);
                        ++answers;
                        cv.notify_all();
                      },
                      {})
                     .connection;
    if (connection->encrypted() != sealed) throw std::runtime_error("the link is not what was asked for");
  }
  ~Client() { connection->close(); }
  // Sends `window` messages at once (as the runtime keeps chunks in flight) and waits for their answers.
  void round_trip(const void* payload, std::size_t bytes, unsigned window = 1) {
    std::unique_lock lock(mutex);
    const auto want = answers + window;
    lock.unlock();
    for (unsigned i = 0; i < window; ++i) connection->send({std::byte{0}}, payload, bytes, {});
    lock.lock();
    cv.wait(lock, [&] { return answers >= want; });
  }
  std::shared_ptr<Worker> worker;
  std::shared_ptr<Connection> connection;
  std::mutex mutex;
  std::condition_variable cv;
  std::uint64_t answers = 0;
};

// Seconds per round trip of `window` messages of `bytes`, the median of a run of `seconds`.
double per_trip(bool sealed, std::size_t bytes, double seconds, unsigned window = 1) {
  Echo echo(sealed);
  Client client(echo.server->port(), sealed);
  std::vector<std::byte> payload(bytes, std::byte{3});
  for (int i = 0; i < 3; ++i) client.round_trip(payload.data(), bytes);  // warm up the path
  std::vector<double> trips;
  const auto start = Clock::now();
  while (since(start) < seconds || trips.size() < 5) {
    const auto t = Clock::now();
    client.round_trip(bytes == 0 ? nullptr : payload.data(), bytes, window);
    trips.push_back(since(t));
  }
  std::sort(trips.begin(), trips.end());
  return trips[trips.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.0;
  bool sealed_bulk_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (arg == "--sealed-bulk-only") {
      sealed_bulk_only = true;
    } else {
      fmt::print(stderr, "ferry_bench_secure: unknown argument '{}' (try --seconds S, --sealed-bulk-only)\n", arg);
      return 2;
    }
  }
  // Shared memory would carry same-host traffic past the wire: measure TCP, as between two hosts.
  ::setenv("UCX_TLS", "tcp", 0);
  constexpr unsigned window = 4;  // 4 MiB chunks, 4 in flight: the runtime's defaults (chunk_bytes, chunk_window)
  if (sealed_bulk_only) {
    const std::size_t bytes = std::size_t{4} << 20;
    fmt::print("sealed bulk ship 4 MiB x {}: {:.2f} GB/s\n", window,
               static_cast<double>(bytes) * window / per_trip(true, bytes, seconds, window) / 1e9);
    return 0;
  }

  const Cipher chosen = preferred_cipher();
  const double chosen_gbps = seal_gbps(chosen, seconds);
  fmt::print("AEAD seal on one core, 4 MiB messages: {} ({}) {:.2f} GB/s", to_string(chosen), cipher_engine(chosen),
             chosen_gbps);
  if (chosen != Cipher::xchacha20poly1305)
    fmt::print("; {} {:.2f} GB/s", to_string(Cipher::xchacha20poly1305),
               seal_gbps(Cipher::xchacha20poly1305, seconds));
  fmt::print("\n");

  for (const std::size_t bytes : {std::size_t{4} << 20, std::size_t{16} << 20}) {
    const double plain = per_trip(false, bytes, seconds, window);
    const double sealed = per_trip(true, bytes, seconds, window);
    const double shipped = static_cast<double>(bytes) * window;
    fmt::print("bulk ship {} MiB x {} in flight over loopback TCP: plaintext {:.2f} GB/s, sealed ({}) {:.2f} GB/s: "
               "sealed/plaintext {:.2f}\n",
               bytes >> 20, window, shipped / plain / 1e9, to_string(chosen), shipped / sealed / 1e9, plain / sealed);
  }
  const double plain = per_trip(false, 0, seconds);
  const double sealed = per_trip(true, 0, seconds);
  fmt::print("empty round trip over loopback TCP: plaintext {:.1f} us, sealed {:.1f} us: sealed/plaintext {:.2f}x\n",
             plain * 1e6, sealed * 1e6, sealed / plain);
  return 0;
}
