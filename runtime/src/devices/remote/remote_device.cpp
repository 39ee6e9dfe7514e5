#include "devices/remote/remote_device.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/transfer_label.hpp"
#include "devices/device_host.hpp"
#include "devices/run_record.hpp"
#include "data/dependencies.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/runtime/cuda_source.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/address.hpp"
#include "ferry/units.hpp"
#include "data/task_record.hpp"
#include "ferry/allocator/small_objects.hpp"
#include "devices/remote/remote_policy.hpp"

namespace ferry::detail {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string client_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return fmt::format("{}:{}", host, ::getpid());
}

DevicePeak remote_peak() {
  DevicePeak peak;  // a seed; measured runs replace it
  peak.flops_per_second = 8e9;
  peak.bytes_per_second = 8e9;
  peak.launch_seconds = 50e-6;
  return peak;
}

protocol::DType wire(DType t) { return static_cast<protocol::DType>(static_cast<std::uint8_t>(t)); }
protocol::Mode wire(AccessMode m) { return static_cast<protocol::Mode>(static_cast<std::uint8_t>(m)); }

bool contiguous(const HostRegion& r) { return r.rows <= 1 || r.ld == r.cols; }

}  // namespace

RemoteDevice::RemoteDevice(DeviceHost& runtime, DeviceId id, MemoryNodeId node, RemoteOptions options,
                           std::shared_ptr<transport::Worker> worker)
    : Device(id, "remote:" + options.address, DeviceKind::remote, node, "remote:" + options.address, remote_peak()),
      runtime_(runtime),
      options_(std::move(options)),
      rpc_(options_.address),
      worker_(std::move(worker)) {
  if (!options_.reverse) std::tie(host_, port_) = transport::parse_address(options_.address);
  if (options_.chunk_bytes == 0) throw UsageError("remote chunk size must be positive");
  options_.window = std::max(1u, options_.window);
  options_.proxies = std::max(1u, options_.proxies);
  if (Trace* trace = runtime_.trace()) {
    for (unsigned slot = 0; slot < options_.proxies; ++slot)
      lanes_.push_back(trace->lane(fmt::format("{} slot {}", name(), slot), name()));
    lane_out_ = trace->lane(fmt::format("link host -> {}", name()), "link");
    lane_in_ = trace->lane(fmt::format("link {} -> host", name()), "link");
  }
}

void RemoteDevice::start() {
  const bool require = options_.policy == RemotePolicy::require && !options_.reverse;
  if (options_.reverse) {
    // Nothing to dial: the host calls (adopt).
  } else try {
    connect_until(Clock::now() + (require ? options_.timeout : std::chrono::milliseconds(0)));
  } catch (const std::exception& e) {
    const bool refused = dynamic_cast<const RemoteRefused*>(&e) != nullptr;
    // A host that cannot be reached may be done without (prefer); a refusal
    // (a wrong token or key, a host key not pinned or not the pinned one)
    // is a security answer, and the error must not suggest going around it.
    if (require && refused) throw RemoteError(fmt::format("remote {} cannot be used: {}", options_.address, e.what()));
    if (require)
      throw RemoteError(fmt::format("remote {} cannot be used: {} (with FERRY_REMOTE_POLICY=prefer the program runs "
                                    "without it)",
                                    options_.address, e.what()));
    if (note_down(e.what(), refused)) {
      if (refused) log().warn("{}; it is not used (retrying cannot help)", e.what());  // names the host and why
      else log().warn("remote {} cannot be reached: {}; its tasks run here until it answers (retrying)",
                      options_.address, e.what());
    }
  }
  // Models follow what the host is, not where it listens: a restart on
  // another port, or an identical host, starts calibrated. Set before the
  // runtime lists this device; a host down at start keeps its address.
  const Offer offered = offer();
  if (!offered.device_key.empty()) set_perf_key("remote:" + offered.device_key);
  // The host's probe seeds the first estimates, so they are not fixed guesses.
  if (offered.peak_flops > 0 && offered.peak_bytes > 0) {
    DevicePeak measured = peak();
    measured.flops_per_second = offered.peak_flops;
    measured.bytes_per_second = offered.peak_bytes;
    measured.measured = true;
    set_peak(measured);
  }
  for (unsigned slot = 0; slot < options_.proxies; ++slot) proxies_.emplace_back([this, slot] { proxy_loop(slot); });
  reconnector_ = std::thread([this] { reconnect_loop(); });
  if (options_.liveness.count() > 0) liveness_ = std::thread([this] { watch_liveness(); });
}

RemoteDevice::~RemoteDevice() {
  drain();
  // Bring home what only this host holds: buffers may outlive the runtime.
  bring_home("at shutdown");
  {
    std::lock_guard lock(forward_mutex_);
    for (auto& [id, task] : waiting_) release(task);
    waiting_.clear();
    held_behind_.clear();
    held_under_.clear();
  }
  stopping_.store(true);
  queue_cv_.notify_all();
  reconnect_cv_.notify_all();
  {
    std::lock_guard lock(liveness_mutex_);  // the watch checks stopping_ under it before it sleeps
  }
  liveness_cv_.notify_all();
  for (auto& thread : proxies_) thread.join();
  if (reconnector_.joinable()) reconnector_.join();
  if (liveness_.joinable()) liveness_.join();
  if (adopted_ && adopted_->connection) adopted_->connection->close();  // a call never used
  std::shared_ptr<transport::Connection> connection;
  {
    std::lock_guard lock(connection_mutex_);
    connection = std::move(connection_);
  }
  alive_.store(false);
  if (connection) {
    connection->send(protocol::encode(protocol::Bye{protocol::Status::ok, "client shutting down"}));
    connection->close();
  }
}

// ---- connection ----

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
  std::lock_guard lock(offer_mutex_);
  down_reason_ = why;
  return !std::exchange(warned_, true);
}

void RemoteDevice::connect() {
  // Authenticated, keyed and welcomed on the bootstrap socket; UCX connects only then.
  auto dial = options_.dial;
  dial.client = client_name();
  dial.cancel = &stopping_;  // the destructor joins the thread that dials
  transport::Dialed dialed;
  try {
    dialed = transport::dial(
        worker_, host_, port_, dial, [this](transport::Connection&, transport::Incoming& in) { on_message(in); },
        [this](transport::Connection&, const std::string& reason) { lost(reason); });
  } catch (const transport::DialRefused& e) {
    // A refusal retrying cannot fix (remote_policy.hpp) is a RemoteRefused;
    // a host key that is not the pinned one is one (auth_failed).
    if (permanent(e.status)) throw RemoteRefused(e.what());
    throw;
  }
  use(dialed);
}

void RemoteDevice::use(transport::Dialed& dialed) {
  {
    std::lock_guard lock(connection_mutex_);
    connection_ = dialed.connection;
    host_key_ = dialed.host_key;
  }
  const auto* welcome = &dialed.welcome;
  welcomed(*welcome);
  max_payload_ = welcome->max_payload == 0 ? options_.chunk_bytes : welcome->max_payload;
  quota_ = welcome->memory_quota;
  gpus_.store(welcome->gpus, std::memory_order_relaxed);
  wait_wired(*dialed.connection);
  heard_from();  // the welcome: a new connection is not judged by the old one's silence
  epoch_.fetch_add(1, std::memory_order_acq_rel);
  alive_.store(true, std::memory_order_release);
  measure_link();
  const std::string cipher = dialed.connection->encrypted() ? transport::to_string(dialed.cipher) : "plaintext";
  {
    std::lock_guard lock(offer_mutex_);
    down_reason_.clear();
    warned_ = false;
    cipher_ = cipher;
  }
  log().info("remote {}: connected to {} ({}, {}, quota {}; {}); link {:.0f} µs, {}/s", options_.address,
             welcome->server, plural(welcome->cpu_workers, "CPU worker"), plural(welcome->gpus, "GPU"),
             format_bytes(quota_), cipher,
             runtime_.links().get(host_node, node()).latency_seconds * 1e6,
             format_bytes(static_cast<std::size_t>(runtime_.links().get(host_node, node()).bytes_per_second)));
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
  bool first = false;
  {
    std::lock_guard lock(offer_mutex_);
    offer_ = Offer{welcome.server, welcome.kernels, welcome.devices, welcome.memory_quota, welcome.device_key,
                   welcome.peak_flops, welcome.peak_bytes};
    kernels_ = {welcome.kernels.begin(), welcome.kernels.end()};
    first = !std::exchange(told_missing_, true);
  }
  if (first) warn_missing(KernelRegistry::global().names());
}

void RemoteDevice::warn_missing(const std::vector<std::string>& kernels) const {
  std::vector<std::string> missing;
  {
    std::lock_guard lock(offer_mutex_);
    if (kernels_.empty()) return;  // the host did not say
    for (const std::string& name : kernels)
      if (!kernels_.contains(name)) missing.push_back(name);
  }
  // Typically a plugin this program loaded and ferryd was not started with.
  if (!missing.empty())
    log().warn("remote {} lacks kernels this program has: {}; their tasks run here (start ferryd with the --plugin "
               "that has them)",
               options_.address, fmt::join(missing, ", "));
}

RemoteDevice::Offer RemoteDevice::offer() const {
  std::lock_guard lock(offer_mutex_);
  return offer_;
}

std::string RemoteDevice::cipher() const {
  std::lock_guard lock(offer_mutex_);
  return cipher_;
}

std::string RemoteDevice::down_reason() const {
  std::lock_guard lock(offer_mutex_);
  if (alive()) return {};
  return down_reason_.empty() ? "not connected" : down_reason_;
}

bool RemoteDevice::offers(const std::string& kernel) const {
  std::lock_guard lock(offer_mutex_);
  return kernels_.empty() || kernels_.contains(kernel);
}

void RemoteDevice::measure_link() {
  std::vector<double> rtts;
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    const std::uint64_t id = next_request();
    auto pong = request(id, protocol::Ping{id}, nullptr, 0);
    await(pong, "ping");
    rtts.push_back(seconds_since(start));
  }
  // The fastest of them: the others carry whatever else the two hosts'
  // cores were doing (under a loaded test run the median once came to
  // 1.5 ms against 20-40 µs quiet, and planners then judged every pipeline
  // on a link twenty times slower than it is). Transfers refine it.
  const double latency = *std::min_element(rtts.begin(), rtts.end()) / 2;
  // One bulk transfer the size of a chunk gives the bandwidth to start from;
  // real transfers refine it (LinkModels::record).
  // Small enough to fit any sensible quota; a refusal only costs the estimate.
  std::vector<std::byte> probe(std::min({options_.chunk_bytes, std::size_t{4} << 20,
                                         quota_ > 0 ? static_cast<std::size_t>(quota_ / 4) : std::size_t{4} << 20}));
  HostRegion shape{probe.data(), DType::u8, 1, probe.size(), probe.size()};
  double seconds = 0;
  try {
    for (int round = 0; round < 2; ++round) {  // the first pays for setting up the rendezvous path
      const auto start = Clock::now();
      const std::uint64_t id = next_copy_.fetch_add(1);
      put_chunks(id, shape, probe.data(), probe.size());
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
  runtime_.links().set(host_node, node(), link);
  runtime_.links().set(node(), host_node, link);
}

void RemoteDevice::lost(const std::string& reason) {
  {
    std::lock_guard lock(offer_mutex_);
    down_reason_ = reason;
  }
  if (alive_.exchange(false, std::memory_order_acq_rel))
    log().warn("remote {} lost: {}; its tasks run elsewhere until it is back", options_.address, reason);
  // Closed before the pending requests fail: a request made meanwhile sees
  // the closed connection and fails itself (RpcClient::request), rather
  // than wait for a reply that cannot come.
  std::shared_ptr<transport::Connection> connection;
  {
    std::lock_guard lock(connection_mutex_);
    connection = std::move(connection_);
  }
  if (connection) connection->close();
  rpc_.fail_all(reason);
  reply_came(true);
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
        use(*called);
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

// ---- requests ----

std::shared_ptr<transport::Connection> RemoteDevice::current_connection() const {
  std::lock_guard lock(connection_mutex_);
  return connection_;
}

std::future<protocol::Message> RemoteDevice::request(std::uint64_t id, const protocol::Message& message,
                                                     const void* payload, std::size_t bytes,
                                                     transport::RpcClient::Destination dest, bool soon) {
  return rpc_.request(current_connection(), id, message, payload, bytes, dest, soon);
}

std::future<protocol::Message> RemoteDevice::request_run(const protocol::Run& run, bool soon) {
  auto header = protocol::encode(run);  // first: a run that cannot be encoded leaves nothing pending
  return rpc_.request_encoded(current_connection(), run.request, std::move(header), nullptr, 0, {}, soon);
}

protocol::Message RemoteDevice::await(std::future<protocol::Message>& reply, const char* what) {
  return rpc_.await(reply, what, current_connection().get());
}

void RemoteDevice::on_message(transport::Incoming& incoming) {
  heard_from();
  protocol::Message message;
  try {
    message = protocol::decode(incoming.header());
  } catch (const std::exception& e) {
    // Not Ferry's protocol, or another version of it: retrying will not help.
    const std::string why =
        fmt::format("ferryd at {} sent an undecodable message (another version of Ferry?): {}", options_.address, e.what());
    rpc_.fail_all(why);
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
          if (auto done = rpc_.complete(m.request, message, incoming); !done.broken.empty()) {
            refused_.store(true, std::memory_order_release);
            log().warn("remote {} is not used again: {}", options_.address, done.broken);
            return lost(done.broken);
          }
          if constexpr (std::is_same_v<M, protocol::Done>) reply_came(false);
        } else if constexpr (std::is_same_v<M, protocol::ErrorMessage>) {
          if (!rpc_.complete(0, message, incoming).matched)
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

// ---- bulk transfers ----

std::size_t RemoteDevice::chunk_for(std::size_t bytes) const noexcept {
  // Small enough that a transfer keeps the whole window busy (a single chunk
  // has nothing to overlap with), large enough to amortise per-chunk costs.
  constexpr std::size_t floor = std::size_t{256} << 10;
  const std::size_t limit = std::max<std::size_t>(1, std::min(options_.chunk_bytes, max_payload_));
  const std::size_t spread = (bytes + options_.window - 1) / options_.window;
  return std::min(limit, std::max(spread, std::min(floor, limit)));
}

template <typename Send, typename Check>
void RemoteDevice::in_chunks(std::size_t bytes, const char* what, Send send, Check check) {
  const std::size_t chunk = chunk_for(bytes);
  std::deque<std::future<protocol::Message>> window;
  const auto settle_one = [&] {
    protocol::Message reply = await(window.front(), what);
    window.pop_front();
    check(reply);
  };
  std::size_t offset = 0;
  do {  // at least once: an empty put still makes the replica
    const std::size_t len = std::min(chunk, bytes - offset);
    if (window.size() >= options_.window) settle_one();
    window.push_back(send(offset, len));
    offset += len;
  } while (offset < bytes);
  while (!window.empty()) settle_one();
}

void RemoteDevice::put_chunks(std::uint64_t id, const HostRegion& shape, const std::byte* data, std::size_t bytes) {
  in_chunks(
      bytes, "put",
      [&](std::size_t offset, std::size_t len) {
        const std::uint64_t req = next_request();
        return request(req, protocol::Put{req, id, wire(shape.dtype), shape.rows, shape.cols, offset},
                       data + offset, len);
      },
      [&](const protocol::Message& reply) {
        const auto* ack = std::get_if<protocol::PutAck>(&reply);
        if (ack != nullptr &&
            (ack->status == protocol::Status::quota_exceeded || ack->status == protocol::Status::out_of_memory))
          throw NoRoom(fmt::format("remote {} has no room: {}", options_.address, ack->message));
        if (ack == nullptr || ack->status != protocol::Status::ok)
          throw RemoteError(fmt::format("remote {} refused data: {}: {}", options_.address,
                                        ack ? protocol::to_string(ack->status) : "no acknowledgement",
                                        ack ? ack->message : ""));
      });
}

void RemoteDevice::get_chunks(std::uint64_t id, std::byte* dest, std::size_t bytes) {
  in_chunks(
      bytes, "get",
      [&](std::size_t offset, std::size_t len) {
        const std::uint64_t req = next_request();
        return request(req, protocol::Get{req, id, offset, len}, nullptr, 0, {dest + offset, len});
      },
      [&](const protocol::Message& reply) {
        const auto* data = std::get_if<protocol::Data>(&reply);
        if (data == nullptr || data->status != protocol::Status::ok)
          throw RemoteError(fmt::format("remote {} could not send data back: {}: {}", options_.address,
                                        data ? protocol::to_string(data->status) : "no data",
                                        data ? data->message : ""));
      });
}

std::uint64_t RemoteDevice::with_room(std::size_t bytes, const std::function<std::uint64_t()>& put) {
  try {
    return put();
  } catch (const NoRoom&) {
    // Make room the LRU way, then try once more; still no room is a failure.
    const std::size_t freed = evict_from_node(*this, held_.snapshot(), bytes);
    log().debug("remote {}: evicted {} to make room for {}", options_.address, format_bytes(freed), format_bytes(bytes));
    return put();
  }
}

std::uint64_t RemoteDevice::ship(const HostRegion& source) {
  return with_room(source.bytes(), [&] { return ship_now(source); });
}

std::uint64_t RemoteDevice::ship_now(const HostRegion& source) {
  const std::uint64_t id = next_copy_.fetch_add(1);
  const auto start = Clock::now();
  const std::int64_t start_ns = runtime_.trace() ? runtime_.trace()->now_ns() : 0;
  if (contiguous(source)) {
    put_chunks(id, source, static_cast<const std::byte*>(source.data), source.bytes());
  } else {
    // A tile of a larger matrix travels packed, row after row.
    std::vector<std::byte> packed(source.bytes());
    pack_rows(source, packed.data());
    put_chunks(id, source, packed.data(), packed.size());
  }
  record_transfer(runtime_, *this, bytes_shipped_,
                  {.from = host_node, .to = node(), .bytes = source.bytes(), .start = start,
                   .to_device = true, .lane = lane_out_, .trace_start_ns = start_ns});
  return id;
}

std::uint64_t RemoteDevice::allocate(const HostRegion& shape) {
  return with_room(shape.bytes(), [&] {
    const std::uint64_t id = next_copy_.fetch_add(1);
    put_chunks(id, shape, nullptr, 0);
    return id;
  });
}

void RemoteDevice::fetch(std::uint64_t id, const HostRegion& dest) {
  const auto start = Clock::now();
  const std::int64_t start_ns = runtime_.trace() ? runtime_.trace()->now_ns() : 0;
  if (contiguous(dest)) {
    get_chunks(id, static_cast<std::byte*>(dest.data), dest.bytes());
  } else {
    std::vector<std::byte> packed(dest.bytes());
    get_chunks(id, packed.data(), packed.size());
    unpack_rows(packed.data(), dest);
  }
  record_transfer(runtime_, *this, bytes_fetched_,
                  {.from = node(), .to = host_node, .bytes = dest.bytes(), .start = start,
                   .to_device = false, .lane = lane_in_, .trace_start_ns = start_ns});
}

void RemoteDevice::drop(std::uint64_t id) noexcept {
  std::shared_ptr<transport::Connection> connection;
  {
    std::lock_guard lock(connection_mutex_);
    connection = connection_;
  }
  if (connection) connection->send(protocol::encode(protocol::Free{id}));
}

void RemoteDevice::hold(const std::shared_ptr<BufferRoot>& root) {
  held_.hold(root);
}

protocol::StatsReply RemoteDevice::stats() {
  const std::uint64_t id = next_request();
  auto reply = request(id, protocol::StatsRequest{id}, nullptr, 0);
  protocol::Message m = await(reply, "stats");
  if (auto* s = std::get_if<protocol::StatsReply>(&m)) return *s;
  throw RemoteError(fmt::format("remote {}: no stats reply", options_.address));
}

// ---- tasks ----

bool RemoteDevice::can_run(const KernelDef& kernel) const {
  // CUDA source travels with its first task: any host with a GPU compiles it.
  if (kernel.cuda_source) return gpus_.load(std::memory_order_relaxed) > 0;
  // Otherwise only kernels known by name: built-ins and plugins (which
  // ferryd loads with --plugin), and of those only what this host said it has.
  // A runtime's own callables stay local.
  return KernelRegistry::global().find(kernel.name) == &kernel && offers(kernel.name);
}

std::string RemoteDevice::why_not(const KernelDef& kernel) const {
  if (kernel.cuda_source) return "ferryd there has no GPU to compile CUDA source for";
  if (KernelRegistry::global().find(kernel.name) != &kernel)
    return "a kernel defined in this program (a function or lambda) runs only on this machine; a FERRY_KERNEL "
           "plugin loaded by both sides runs anywhere";
  if (!offers(kernel.name)) return fmt::format("ferryd there has no kernel '{}' (start it with the --plugin that has it)", kernel.name);
  return "no implementation for it";
}

void RemoteDevice::define_kernel(const KernelDef& kernel) {
  const CudaSource& source = *kernel.cuda_source;
  // Held while waiting: a second task of the same kernel must not run before its definition is there.
  std::lock_guard lock(defined_mutex_);
  const std::uint64_t connection = epoch();
  if (defined_epoch_ != connection) {  // a new connection knows nothing yet
    defined_.clear();
    defined_epoch_ = connection;
  }
  if (defined_.contains(kernel.name)) return;
  if (source.source.size() > protocol::max_source_bytes)
    throw ProtocolError(fmt::format("the source of kernel '{}' is {}; at most {} can be sent", kernel.name,
                                    format_bytes(source.source.size()), format_bytes(protocol::max_source_bytes)));
  protocol::DefineKernel define;
  define.request = next_request();
  define.name = kernel.name;
  define.entry = source.entry;
  define.options = source.options;
  for (const Param& p : kernel.params)
    if (p.kind == ParamKind::buffer && p.mode == AccessMode::write) define.writes.push_back(p.name);
  define.source_bytes = static_cast<std::uint32_t>(source.source.size());
  auto future = request(define.request, define, source.source.data(), source.source.size());
  const protocol::Message reply = await(future, "define_kernel");
  const auto* done = std::get_if<protocol::Done>(&reply);
  if (done == nullptr) throw RemoteError("no define_kernel reply");
  if (done->status == protocol::Status::shutting_down)
    throw RemoteError(fmt::format("{}: {}", protocol::to_string(done->status), done->message));
  // Not a RemoteError: another host would refuse the same source, so the task fails.
  if (done->status != protocol::Status::ok)
    throw Error(fmt::format("ferryd refused kernel '{}': {}: {}", kernel.name, protocol::to_string(done->status),
                            done->message));
  if (epoch() == connection) defined_.insert(kernel.name);
}

bool RemoteDevice::fall_back(TaskRecord* task, const std::string& why) {
  if (task->kernel->cpu) {
    runtime_.reschedule(task, *this);
    return true;
  }
  task->error = std::make_exception_ptr(
      KernelError(fmt::format("{} could not run on {} ({}), and the kernel has no CPU implementation to run "
                              "instead",
                              task->label(), name(), why)));
  return false;
}

void RemoteDevice::enqueue(TaskRecord* task) {
  active_.fetch_add(1, std::memory_order_relaxed);
  std::shared_ptr<Forwarded> forwarded;
  {
    std::lock_guard lock(forward_mutex_);
    if (auto it = forwarded_.find(task->id); it != forwarded_.end()) forwarded = it->second;
  }
  bool wake = true;
  {
    std::lock_guard lock(queue_mutex_);
    const auto now = std::chrono::steady_clock::now();
    if (forwarded) ++queued_forwarded_;
    queue_.push_back({task, false, {}, std::move(forwarded), now});
    // Decided under the lock, after the push: a reply that comes meanwhile
    // finds the job queued (reply_came), one that came before is seen here.
    wake = takeable(queue_.back(), now);
  }
  if (wake) queue_cv_.notify_one();
}

// Longer than a reply takes on any link we serve; after it a proxy takes the
// job anyway and waits as before, so a reply that never comes still times out.
constexpr auto deferral_limit = std::chrono::milliseconds(500);

bool RemoteDevice::takeable(const Job& job, std::chrono::steady_clock::time_point now) {
  return !job.forwarded || now - job.since >= deferral_limit ||
         job.forwarded->reply.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

void RemoteDevice::reply_came(bool all) {
  std::lock_guard lock(queue_mutex_);
  if (queued_forwarded_ == 0) return;
  if (all) queue_cv_.notify_all();
  else queue_cv_.notify_one();
}

void RemoteDevice::prefetch(TaskRecord* task) {
  if (!available()) return;
  if (forward_or_hold(task)) return;  // its inputs are there already
  std::vector<std::shared_ptr<BufferState>> inputs;
  for (std::size_t i = 0; i < task->buffers.size(); ++i)
    if (reads(task->buffer_arg(i).mode)) inputs.push_back(task->buffers[i]);
  if (inputs.empty()) return;
  retain(task);
  active_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard lock(queue_mutex_);
    queue_.push_back({task, true, std::move(inputs), nullptr, {}});
  }
  queue_cv_.notify_one();
}

// The waiting thread takes its task from the queue before a proxy does and
// waits for the reply itself: the reply then wakes the waiter directly,
// instead of a proxy that settles it and wakes the waiter (one hand-off
// less on an empty task's round trip). Only a task already sent (forwarded),
// so what runs here is waiting and settling, as a proxy would. A waiter with
// a deadline waits for the reply first, driving the worker itself as
// Connection::wait_here does, and puts the job back if it has not come.
bool RemoteDevice::run_for_waiter(TaskRecord* task, std::chrono::steady_clock::time_point deadline) {
  {
    std::lock_guard lock(forward_mutex_);
    if (!forwarded_.contains(task->id)) return false;
  }
  Job job;
  {
    // Still queued: no proxy has claimed it (a claim takes the job first).
    std::lock_guard lock(queue_mutex_);
    auto it = std::find_if(queue_.begin(), queue_.end(), [&](const Job& j) { return !j.prefetch && j.task == task; });
    if (it == queue_.end()) return false;
    if (it->forwarded) --queued_forwarded_;
    job = std::move(*it);
    queue_.erase(it);
  }
  // Only a job whose reply had not come when it was queued has one to wait
  // for; out of the queue, no proxy touches its future meanwhile.
  if (job.forwarded && deadline != std::chrono::steady_clock::time_point::max()) {
    std::future<protocol::Message>& reply = job.forwarded->reply;
    const auto came = [&] { return reply.wait_for(std::chrono::seconds(0)) == std::future_status::ready; };
    if (auto connection = current_connection()) connection->wait_here(came);
    if (!came() && reply.wait_until(deadline) != std::future_status::ready) {
      {
        std::lock_guard lock(queue_mutex_);
        ++queued_forwarded_;
        queue_.push_front(std::move(job));
      }
      queue_cv_.notify_one();
      return false;
    }
  }
  if (run_here(task, options_.proxies)) runtime_.finish(task, nullptr);  // successors go to their devices
  if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::lock_guard lock(queue_mutex_);
    drained_cv_.notify_all();
  }
  return true;
}

void RemoteDevice::push() {
  std::shared_ptr<transport::Connection> connection;
  {
    std::lock_guard lock(connection_mutex_);
    connection = connection_;
  }
  if (connection) connection->push();
}

void RemoteDevice::drain() {
  std::unique_lock lock(queue_mutex_);
  drained_cv_.wait(lock, [&] { return active_.load() == 0; });
}

void RemoteDevice::proxy_loop(unsigned slot) {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(queue_mutex_);
      auto next = queue_.end();
      const auto found = [&] {
        const auto now = std::chrono::steady_clock::now();
        next = std::find_if(queue_.begin(), queue_.end(), [&](const Job& j) { return takeable(j, now); });
        return next != queue_.end();
      };
      for (;;) {
        if (found()) break;
        if (stopping_.load() && queue_.empty()) return;
        // Deferred jobs only: a reply wakes us; the timeout is the backstop.
        if (queue_.empty()) queue_cv_.wait(lock);
        else queue_cv_.wait_for(lock, deferral_limit / 5);
      }
      job = std::move(*next);
      if (job.forwarded) --queued_forwarded_;
      queue_.erase(next);
    }
    if (job.prefetch) {
      prefetch_inputs(job.task, job.inputs);
      release(job.task);
    } else {
      for (TaskRecord* task = job.task; task != nullptr;) task = run_here(task, slot) ? runtime_.finish(task, this) : nullptr;
    }
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(queue_mutex_);
      drained_cv_.notify_all();
    }
  }
}

void RemoteDevice::prefetch_inputs(TaskRecord* task, std::span<const std::shared_ptr<BufferState>> inputs) {
  const TaskLabelScope transfers_for(task->name);
  for (std::size_t i = 0; i < inputs.size() && available(); ++i) {
    if (task->done.load(std::memory_order_acquire)) return;  // too late to help
    const BufferState& view = *inputs[i];
    try {
      prefetch_on_node(view, *this, [&] { return prefetch_too_early(view, task); });
    } catch (const std::exception& e) {
      log().debug("remote {}: prefetch skipped: {}", options_.address, e.what());
    }
  }
}

void RemoteDevice::marshal(TaskRecord* task, std::span<const std::shared_ptr<BufferState>> views,
                           Marshalled& out) {
  const TaskLabelScope transfers_for(task->name);
  protocol::Run& run = out.run;
  run.request = next_request();
  run.kernel = task->kernel->name;
  run.task = task->name;
  out.ids.assign(task->buffers.size(), 0);
  run.args.clear();  // a reused run (try_forward's) keeps its capacity
  run.args.reserve(task->args.items.size());
  std::size_t b = 0;
  for (std::size_t i = 0; i < task->args.items.size(); ++i) {
    const Arg& arg = task->args.items[i];
    protocol::RunArg wire_arg;
    const auto* scalar = std::get_if<ScalarValue>(&arg);
    if (scalar == nullptr) {
      const AccessMode mode = std::get<BufferArg>(arg).mode;
      out.ids[b] = acquire_on_node(*views[b], mode, *this);
      wire_arg.kind = protocol::RunArg::Kind::buffer;
      wire_arg.buffer = out.ids[b];
      wire_arg.mode = wire(mode);
      ++b;
    } else if (const auto* d = std::get_if<double>(scalar)) {
      wire_arg.kind = protocol::RunArg::Kind::real;
      wire_arg.real = *d;
    } else if (const auto* n = std::get_if<std::int64_t>(scalar)) {
      wire_arg.kind = protocol::RunArg::Kind::integer;
      wire_arg.integer = *n;
    } else {
      wire_arg.kind = protocol::RunArg::Kind::text;
      wire_arg.text = std::get<std::string>(*scalar);
    }
    run.args.push_back(std::move(wire_arg));
  }
}

void RemoteDevice::unpin(std::span<const std::shared_ptr<BufferState>> views,
                         std::span<const std::uint64_t> ids) noexcept {
  for (std::size_t i = 0; i < ids.size() && i < views.size(); ++i)
    if (ids[i] != 0) release_on_node(*views[i], *this, ids[i]);
}

void RemoteDevice::settle(TaskRecord* task, const protocol::Done& done, std::span<const std::uint64_t> ids) {
  if (done.status == protocol::Status::kernel_failed) {
    task->error = std::make_exception_ptr(KernelError(
        fmt::format("{} failed on {}: {}", task->label(), name(), done.message)));
    return;
  }
  if (done.status != protocol::Status::ok)
    throw RemoteError(fmt::format("{}: {}", protocol::to_string(done.status), done.message));
  // What the task wrote now lives only there; its lineage recomputes it if the host is lost.
  // Made by the proxy, freed wherever the copy's lineage ends: a small object.
  auto lineage = std::allocate_shared<LineageEntry>(SmallObjectAllocator<LineageEntry>{});
  lineage->task_id = task->id;
  lineage->name = task->name;
  lineage->kernel = task->kernel;
  lineage->args = task->args;
  lineage->buffer_args.assign(task->buffer_args.begin(), task->buffer_args.end());
  for (const auto& view : task->buffers) {
    lineage->roots.push_back(view->root);
    lineage->regions.push_back(view->region);
  }
  for (std::size_t i = 0; i < task->buffers.size(); ++i)
    if (writes(task->buffer_arg(i).mode))
      written_on_node(*task->buffers[i], *this, ids[i], lineage);
  task->result = done.result;
}

void RemoteDevice::report_run(TaskRecord* task, unsigned slot, Clock::time_point start, std::int64_t start_ns,
                              std::optional<double> cost) {
  record_run(runtime_, *this, *task,
             {.start_ns = steady_ns(start),
              .end_ns = steady_ns(Clock::now()),
              .cost_seconds = cost,
              .lane = lanes_.empty() ? 0 : lanes_[slot % lanes_.size()],
              .trace_start_ns = start_ns});
}

bool RemoteDevice::run_here(TaskRecord* task, unsigned slot) {
  // Sent ahead behind its predecessors: only its reply is left to take.
  if (std::shared_ptr<Forwarded> forwarded = claim(task)) {
    if (finish_forwarded(task, *forwarded, slot)) return true;
  }
  if (!alive()) return !fall_back(task, "not connected");
  if (retired()) return !fall_back(task, "removed from the pool");
  const auto start = Clock::now();
  const std::int64_t start_ns = runtime_.trace() ? runtime_.trace()->now_ns() : 0;
  std::optional<double> cost;  // what the perf model learns, once the run is done
  Marshalled m;
  try {
    // Unpinned however the run ends, so the copies can be evicted again.
    struct Unpin {
      RemoteDevice& self;
      TaskRecord* task;
      Marshalled& m;
      ~Unpin() {
        self.sent_done(task);
        self.unpin(task->buffers, m.ids);
      }
    } unpin_at_exit{*this, task, m};
    if (task->kernel->cuda_source) define_kernel(*task->kernel);
    // Every earlier writer of what it writes is finished: a copy due for a
    // checkpoint comes home before this run adds to it.
    checkpoint_writes(task);
    marshal(task, task->buffers, m);
    const auto sent = Clock::now();
    auto future = send_run(task, m.run);
    protocol::Message reply = await(future, "run");
    const double round_trip = seconds_since(sent);
    const auto* done = std::get_if<protocol::Done>(&reply);
    if (done == nullptr) throw RemoteError("no run reply");
    settle(task, *done, m.ids);
    // What the run cost on the host (its kernel and ferryd's handling of it),
    // without the link's latency both ways: hosts of one kind share a model
    // (perf_key), and each one's link is weighed apart
    // (DeviceSnapshot::round_trip), so one host's slow link does not make its
    // twin on a fast one look slow.
    if (done->status == protocol::Status::ok) {
      const double link = runtime_.links().get(host_node, node()).latency_seconds +
                          runtime_.links().get(node(), host_node).latency_seconds;
      cost = std::max(done->seconds, round_trip - link);
    }
  } catch (const RemoteError& e) {
    if (task->kernel->cpu)  // before handing it over: the CPU may finish and free it at once
      log().warn("{}: {} failed ({}); running it on the CPU", task->label(), name(), e.what());
    if (fall_back(task, e.what())) return false;
  } catch (const ProtocolError& e) {  // e.g. arguments too large for one message
    if (task->kernel->cpu)
      log().warn("{} cannot be sent to {} ({}); running it on the CPU", task->label(), name(), e.what());
    if (fall_back(task, e.what())) return false;
  } catch (const std::exception& e) {
    task->error =
        std::make_exception_ptr(KernelError(fmt::format("{} failed on {}: {}", task->label(), name(), e.what())));
  }
  report_run(task, slot, start, start_ns, cost);
  return true;
}

}  // namespace ferry::detail
