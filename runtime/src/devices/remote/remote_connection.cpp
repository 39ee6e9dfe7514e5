// A remote device's connection to its host: dialling it (or taking the
// call of a host that dials us), using a connection once it is welcomed,
// wired up and measured, losing it, reconnecting with backoff, and what
// comes in on it. The requests on it are RemoteRequests'.
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>
#include <thread>

#include "base/scratch_bytes.hpp"
#include "devices/device_host.hpp"
#include "devices/remote/remote_device.hpp"
#include "devices/remote/remote_policy.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/units.hpp"

namespace ferry::detail {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string client_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return fmt::format("{}:{}", host, ::getpid());
}

}  // namespace

// Retried until the deadline: what a later try may find changed. A refused
// port is among them on purpose: a ferryd that is starting (or restarted by
// its supervisor) refuses its port until it listens, which takes seconds on
// a host that probes its GPUs first. Final at once: a refusal (a wrong
// token or key, a host key that is not the pinned one: remote_policy.hpp)
// and a host name that names nothing, which the next try would meet again.
void RemoteDevice::connect_until(Clock::time_point deadline) {
  const auto started = Clock::now();
  auto backoff = std::chrono::milliseconds(250);
  for (int tries = 1;; ++tries) {
    try {
      return connect();
    } catch (const RemoteRefused&) {
      throw;
    } catch (const transport::Unresolvable&) {
      throw;
    } catch (const std::exception& e) {
      const auto now = Clock::now();
      if (now + backoff >= deadline) {
        if (tries == 1) throw;
        throw RemoteError(fmt::format("{} (tried {} times in {:.1f} s)", e.what(), tries,
                                      std::chrono::duration<double>(now - started).count()));
      }
      // Said once, so that a wait of seconds is not mistaken for a hang.
      if (tries == 1)
        log().info("remote {}: {}; retrying for up to {:.1f} s more (FERRY_REMOTE_TIMEOUT)", options_.address, e.what(),
                   std::chrono::duration<double>(deadline - now).count());
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

bool RemoteDevice::note_down(const std::string& why, bool refused) {
  if (refused) refused_.store(true, std::memory_order_release);
  health().still_down(why);
  return offer_.first_warning();
}

void RemoteDevice::connect() {
  // Authenticated, keyed and welcomed on the bootstrap socket; UCX connects only then.
  auto dial = options_.dial;
  dial.client = client_name();
  dial.cancel = &stopping_;  // the destructor joins the thread that dials
  std::shared_ptr<transport::Worker> worker = workers_();
  transport::Dialed dialed;
  try {
    dialed = transport::dial(
        worker, host_, port_, dial, [this](transport::Connection&, transport::Incoming& in) { on_message(in); },
        [this](transport::Connection&, const std::string& reason) { lost(reason); });
  } catch (const transport::DialRefused& e) {
    // A refusal retrying cannot fix (remote_policy.hpp) is a RemoteRefused;
    // a host key that is not the pinned one is one (auth_failed).
    if (permanent(e.status)) throw RemoteRefused(e.what());
    throw;
  }
  use(dialed, std::move(worker));
}

std::shared_ptr<transport::Worker> RemoteDevice::connection_worker() const {
  std::lock_guard lock(worker_mutex_);
  return worker_;
}

void RemoteDevice::use(transport::Dialed& dialed, std::shared_ptr<transport::Worker> worker) {
  requests_.use(dialed.connection, dialed.host_key);
  {
    // The previous connection's worker goes when this function returns (the
    // connection holds it too, until it is closed): its sockets with it.
    std::lock_guard lock(worker_mutex_);
    std::swap(worker_, worker);
  }
  const auto* welcome = &dialed.welcome;
  welcomed(*welcome);
  bulk_.set_max_payload(welcome->max_payload);
  quota_ = welcome->memory_quota;
  gpus_.store(welcome->gpus, std::memory_order_relaxed);
  wait_wired(*dialed.connection);
  heard_from();  // the welcome: a new connection is not judged by the old one's silence
  epoch_.fetch_add(1, std::memory_order_acq_rel);
  health().restored();
  measure_link();
  const std::string cipher = dialed.connection->encrypted() ? transport::to_string(dialed.cipher) : "plaintext";
  offer_.connected(cipher);
  log().info("remote {}: connected to {} ({}, {}, quota {}; {}); link {:.0f} µs, {}/s", options_.address,
             welcome->server, plural(welcome->cpu_workers, "CPU worker"), plural(welcome->gpus, "GPU"),
             format_bytes(quota_), cipher,
             runtime().links().get(host_node, node()).latency_seconds * 1e6,
             format_bytes(static_cast<std::size_t>(runtime().links().get(host_node, node()).bytes_per_second)));
}

// A host stopped (or cut off) before anything waited on it is not judged
// lost, and closing its connection flushes it: the close waits for the
// host, and UCX 1.13 aborts the process if the worker is destroyed under
// it, so after the transport's 2 s the worker was left open, its sockets
// and some MiB with it (the soak's fresh-runtime client, at a stop). A ping
// first tells: a host that answers within the liveness limit (2 s at most)
// is closed gracefully.
void RemoteDevice::part(const std::string& why) {
  std::optional<std::future<protocol::Message>> ping;
  if (options_.liveness.count() > 0 && alive()) {
    try {
      const std::uint64_t id = requests_.next_id();
      ping = requests_.request(id, protocol::Ping{id}, nullptr, 0);
    } catch (const std::exception&) {
      ping.reset();  // the connection failed meanwhile: closed unflushed below
    }
  }
  // No longer than the transport's close would have waited for the host.
  const auto wait = std::min<std::chrono::milliseconds>(options_.liveness, std::chrono::seconds(2));
  const bool answers = !ping || ping->wait_for(wait) == std::future_status::ready;
  std::shared_ptr<transport::Connection> connection = requests_.take();
  health().lost(why);
  if (!connection) return;
  if (answers) {
    connection->send(protocol::encode(protocol::Bye{protocol::Status::ok, why}));
    connection->close();
  } else {
    log().info("remote {}: no answer in {} ms as its connection ends ({}); closed without waiting for it",
               options_.address, wait.count(), why);
    connection->abort();
  }
}

// Every endpoint wired before the connection is used: UCX 1.13 aborts the
// process when an endpoint fails (its host killed, say) with its wireup
// still pending, and an endpoint nothing is sent on (the control endpoint
// beside a shared-memory lane) stays pending until something is. A flush
// completes once the wireup is done.
void RemoteDevice::wait_wired(transport::Connection& connection) {
  auto wired = std::make_shared<std::promise<std::string>>();
  auto result = wired->get_future();
  connection.flush([wired](const std::string& error) { wired->set_value(error); });
  if (result.wait_for(options_.timeout) != std::future_status::ready)
    throw RemoteError(fmt::format("remote {}: its endpoints were not wired up in {} ms", options_.address,
                                  std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeout).count()));
  if (std::string error = result.get(); !error.empty())
    throw RemoteError(fmt::format("remote {}: wiring up its endpoints: {}", options_.address, error));
}

void RemoteDevice::welcomed(const protocol::Welcome& welcome) {
  if (offer_.welcomed(welcome)) warn_missing(KernelRegistry::global().names());
}

void RemoteDevice::warn_missing(const std::vector<std::string>& kernels) const {
  const std::vector<std::string> missing = offer_.lacks(kernels);
  // Typically a plugin this program loaded and ferryd was not started with.
  if (!missing.empty())
    log().warn("remote {} lacks kernels this program has: {}; their tasks run here (start ferryd with the --plugin "
               "that has them)",
               options_.address, fmt::join(missing, ", "));
}

std::string RemoteDevice::down_reason() const {
  const std::string why = health().reason();
  if (alive()) return {};
  return why.empty() ? "not connected" : why;
}

void RemoteDevice::measure_link() {
  // The fastest of five pings: the others carry whatever else the two hosts'
  // cores were doing (under a loaded test run the median once came to
  // 1.5 ms against 20-40 µs quiet, and planners then judged every pipeline
  // on a link twenty times slower than it is). Transfers refine it.
  const double latency = fastest(5, [&] {
    const std::uint64_t id = requests_.next_id();
    auto pong = requests_.request(id, protocol::Ping{id}, nullptr, 0);
    requests_.await(pong, "ping");
  }) / 2;
  // One bulk transfer the size of a chunk gives the bandwidth to start from;
  // real transfers refine it (LinkModels::record).
  // Small enough to fit any sensible quota; a refusal only costs the estimate.
  ScratchBytes probe(std::min({options_.chunk_bytes, std::size_t{4} << 20,
                               quota_ > 0 ? static_cast<std::size_t>(quota_ / 4) : std::size_t{4} << 20}));
  HostRegion shape{probe.data(), DType::u8, 1, probe.size(), probe.size()};
  double seconds = 0;
  try {
    for (int round = 0; round < 2; ++round) {  // the first pays for setting up the rendezvous path
      const auto start = Clock::now();
      const std::uint64_t id = memory_.put(shape);
      seconds = std::max(seconds_since(start) - latency, 1e-9);
      drop(id);
    }
  } catch (const RemoteError& e) {
    if (!alive()) throw;
    log().debug("remote {}: bandwidth probe refused ({}); assuming 1 GB/s until transfers tell", options_.address,
                e.what());
    seconds = static_cast<double>(probe.size()) / 1e9;
  }
  const Link link{latency, static_cast<double>(probe.size()) / seconds};
  set_link(link, link);
}

void RemoteDevice::lost(const std::string& reason) {
  if (health().lost(reason))
    log().warn("remote {} lost: {}; its tasks run elsewhere until it is back", options_.address, reason);
  // Closed before the pending requests fail: a request made meanwhile sees
  // the closed connection and fails itself (RpcClient::request), rather
  // than wait for a reply that cannot come.
  if (auto connection = requests_.take()) connection->close();
  requests_.fail_all(reason);
  jobs_.reply_came(true);
  reconnect_cv_.notify_all();
}

void RemoteDevice::reconnect_loop() {
  auto backoff = std::chrono::milliseconds(250);
  std::unique_lock lock(reconnect_mutex_);
  while (!stopping_.load()) {
    reconnect_cv_.wait(lock, [&] {
      return stopping_.load() ||
             (!alive() && !refused_.load() && !retiring_.load() && (!options_.reverse || adopted_.has_value()));
    });
    if (stopping_.load()) return;
    std::optional<transport::Dialed> called;
    if (options_.reverse) called = std::exchange(adopted_, std::nullopt);
    lock.unlock();
    bool ok = false;
    try {
      if (called) {
        use(*called, workers_());
      } else {
        connect();
      }
      ok = true;
      backoff = std::chrono::milliseconds(250);
      log().info("remote {}: back in service", options_.address);
    } catch (const RemoteRefused& e) {
      if (note_down(e.what(), true)) log().warn("{}; it is not used again (retrying cannot help)", e.what());
    } catch (const std::exception& e) {
      note_down(e.what(), false);
      log().debug("remote {}: reconnect failed: {}", options_.address, e.what());
    }
    lock.lock();
    if (!ok && !options_.reverse) {  // a host that dials us is waited for, not retried
      reconnect_cv_.wait_for(lock, backoff, [&] { return stopping_.load(); });
      backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
    }
  }
}

// ---- replies ----

void RemoteDevice::on_message(transport::Incoming& incoming) {
  heard_from();
  protocol::Message message;
  try {
    message = protocol::decode(incoming.header());
  } catch (const std::exception& e) {
    // Not Ferry's protocol, or another version of it: retrying will not help.
    const std::string why =
        fmt::format("ferryd at {} sent an undecodable message (another version of Ferry?): {}", options_.address, e.what());
    requests_.fail_all(why);
    lost(why);  // wakes proxies for the replies that failed
    return;
  }
  std::visit(
      [&](auto& m) {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, protocol::Data> || std::is_same_v<M, protocol::PutAck> ||
                      std::is_same_v<M, protocol::Done> || std::is_same_v<M, protocol::Pong> ||
                      std::is_same_v<M, protocol::StatsReply>) {
          // A host whose reply broke its request (the wrong number of bytes
          // for a get) is not trusted with another: dropped, and not dialled
          // again (lying once, or that broken, it would do it again).
          if (auto done = requests_.complete(m.request, message, incoming); !done.broken.empty()) {
            refused_.store(true, std::memory_order_release);
            log().warn("remote {} is not used again: {}", options_.address, done.broken);
            return lost(done.broken);
          }
          if constexpr (std::is_same_v<M, protocol::Done>) jobs_.reply_came(false);
        } else if constexpr (std::is_same_v<M, protocol::ErrorMessage>) {
          if (!requests_.complete(0, message, incoming).matched)
            lost(fmt::format("ferryd error {}: {}", protocol::to_string(m.status), m.message));
        } else if constexpr (std::is_same_v<M, protocol::Bye>) {
          lost(fmt::format("ferryd closed the session: {}", m.message));
        } else {  // the handshake (challenge, welcome) happened on the bootstrap socket, never here
          log().warn("remote {}: unexpected {} message ignored", options_.address,
                     protocol::to_string(protocol::type_of(message)));
        }
      },
      message);
}

}  // namespace ferry::detail
