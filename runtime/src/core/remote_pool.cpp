#include "core/remote_pool.hpp"

#include <netdb.h>
#include <sys/socket.h>

#include <fmt/format.h>

#include <cstdlib>

#include "core/core.hpp"
#include "devices/remote/remote_device.hpp"
#include "devices/remote/remote_policy.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/transport/address.hpp"
#include "ferry/transport/auth.hpp"
#include "ferry/transport/identity.hpp"

namespace ferry::detail {

namespace {

constexpr std::string_view dns_prefix = "dns:";

bool is_dns(const std::string& entry) { return entry.starts_with(dns_prefix); }

// "NAME:PORT" after "dns:"; a UsageError naming the entry otherwise.
std::pair<std::string, std::uint16_t> dns_name(const std::string& entry) {
  try {
    auto [name, port] = transport::parse_address(entry.substr(dns_prefix.size()));
    if (name.empty() || port == 0) throw UsageError("no name or port");
    return {name, port};
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("remote '{}' is not dns:NAME:PORT ({})", entry, e.what()));
  }
}

std::string join_host(const std::string& ip, std::uint16_t port) {
  return ip.find(':') != std::string::npos ? fmt::format("[{}]:{}", ip, port) : fmt::format("{}:{}", ip, port);
}

std::vector<std::string> getaddrinfo_all(const std::string& name) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (const int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &list); rc != 0)
    throw Error(fmt::format("{} does not resolve: {}", name, gai_strerror(rc)));
  std::vector<std::string> out;
  for (auto* a = list; a != nullptr; a = a->ai_next) {
    char text[NI_MAXHOST] = {};
    if (::getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST) == 0)
      out.emplace_back(text);
  }
  ::freeaddrinfo(list);
  return out;
}

}  // namespace

RemotePool::RemotePool(RuntimeCore& core) : core_(core) {}

RemotePool::~RemotePool() { stop(); }

void RemotePool::start() {
  const auto& options = core_.options();
  for (const std::string& entry : options.remotes) {
    if (is_dns(entry)) {
      add(entry);
      continue;
    }
    std::string address;
    try {
      address = remote_address(entry);
    } catch (const UsageError& e) {
      if (options.remote_policy == RemotePolicy::require) throw;
      log().warn("{}; it is not used (FERRY_REMOTE_POLICY=prefer)", e.what());
      continue;
    }
    add_host(address, false);
  }
  if (!options.listen.empty()) listen();
  if (listener_ || !dns_.empty()) start_thread();
}

void RemotePool::start_thread() {
  // Only a pool that discovers or listens has work for it.
  std::call_once(thread_started_, [this] { thread_ = std::thread([this] { pool_loop(); }); });
}

void RemotePool::stop() {
  if (listener_) listener_->stop();
  {
    std::lock_guard lock(queue_mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  listener_.reset();
  // Hosts that dialled in and were never welcomed: their connections close.
  for (auto& dialed : arrivals_)
    if (dialed.connection) dialed.connection->close();
  arrivals_.clear();
}

transport::DialOptions RemotePool::dial_options() {
  if (dial_ready_) return dial_;
  const auto& options = core_.options();
  transport::DialOptions dial;
  dial.token = options.token;
  if (dial.token.empty() && !options.token_file.empty()) dial.token = transport::read_token_file(options.token_file);
  if (!options.identity.empty()) dial.identity = transport::KeyPair::read(options.identity);
  if (dial.token.empty() && !dial.identity)
    throw UsageError("remotes need a key or a token: set Options::identity (FERRY_IDENTITY), Options::token_file "
                     "(FERRY_TOKEN_FILE) or Options::token (FERRY_TOKEN)");
  dial.known_hosts = options.known_hosts;
  if (dial.known_hosts.empty() && dial.identity) {
    const char* home = std::getenv("HOME");
    if (home != nullptr) dial.known_hosts = std::filesystem::path(home) / ".config" / "ferry" / "known_hosts";
  }
  dial.pinning = options.strict_host_keys ? transport::Pinning::strict : transport::Pinning::trust_on_first_use;
  dial.privacy = options.plaintext          ? protocol::Privacy::plaintext
                 : options.encrypt_loopback ? protocol::Privacy::encrypt
                                            : protocol::Privacy::automatic;
  if (options.plaintext) log().warn("FERRY_PLAINTEXT: links to ferryd may go unencrypted; trusted networks only");
  dial_ = std::move(dial);
  dial_ready_ = true;
  return dial_;
}

RemoteDevice* RemotePool::find(const std::string& address) const {
  for (const auto& device : core_.devices())
    if (auto* remote = dynamic_cast<RemoteDevice*>(device.get()); remote != nullptr && remote->address() == address)
      return remote;
  return nullptr;
}

void RemotePool::add(const std::string& entry) {
  std::lock_guard lock(membership_mutex_);
  if (!is_dns(entry)) {
    // A host that dialled in, removed before: back in at its next call.
    if (RemoteDevice* known = find(entry); known != nullptr && known->reverse()) {
      if (!known->retired()) throw UsageError(fmt::format("remote {} is in the pool already", entry));
      {
        std::lock_guard lock(turned_away_mutex_);
        turned_away_.erase(known->address());
      }
      return known->rejoin();
    }
    return add_host(remote_address(entry), false);
  }
  auto [name, port] = dns_name(entry);
  const std::string key = fmt::format("{}:{}", name, port);
  if (dns_.contains(key)) throw UsageError(fmt::format("remote {} is in the pool already", entry));
  DnsEntry& added = dns_[key];
  added.name = name;
  added.port = port;
  reconcile(added);
  start_thread();
}

void RemotePool::add_host(const std::string& address, bool discovered) {
  const auto& options = core_.options();
  if (RemoteDevice* known = find(address)) {
    if (known->retired()) return known->rejoin();
    if (discovered) return;
    throw UsageError(fmt::format("remote {} is in the pool already", address));
  }
  RemoteOptions remote;
  remote.address = address;
  remote.dial = dial_options();
  remote.chunk_bytes = options.chunk_bytes;
  remote.window = options.chunk_window;
  remote.host_to_host = options.host_to_host;
  // Discovered hosts come and go with the name: never fatal.
  remote.policy = discovered ? RemotePolicy::prefer : options.remote_policy;
  remote.timeout = options.remote_timeout;
  remote.liveness = options.remote_liveness;
  try {
    core_.add_device([&](DeviceId id) {
      auto device = std::make_unique<RemoteDevice>(core_, id, static_cast<MemoryNodeId>(id), remote,
                                                   [this] { return core_.new_worker(); });
      device->start();  // under require, throws naming the host and why it cannot be used
      return device;
    });
  } catch (const std::exception& e) {
    if (!discovered) throw;
    log().warn("remote {} (discovered) is not used: {}", address, e.what());
  }
}

void RemotePool::remove(const std::string& entry) {
  std::lock_guard lock(membership_mutex_);
  if (is_dns(entry)) {
    auto [name, port] = dns_name(entry);
    auto it = dns_.find(fmt::format("{}:{}", name, port));
    if (it == dns_.end()) throw UsageError(fmt::format("remote {} is not in the pool", entry));
    for (const std::string& host : it->second.hosts)
      if (RemoteDevice* device = find(host)) device->retire();
    dns_.erase(it);
    return;
  }
  // A host that dialled in goes by its key's fingerprint, which is no host:port.
  RemoteDevice* device = find(entry);
  if (device == nullptr) device = find(remote_address(entry));
  if (device == nullptr || device->retired())
    throw UsageError(fmt::format("remote {} is not in the pool", entry));
  if (device->reverse()) {
    std::lock_guard lock(turned_away_mutex_);
    turned_away_.insert(device->address());
  }
  device->retire();
}

std::set<std::string> RemotePool::resolve(const DnsEntry& entry) const {
  const auto& resolver = core_.options().resolve;
  const std::vector<std::string> ips = resolver ? resolver(entry.name) : getaddrinfo_all(entry.name);
  std::set<std::string> hosts;
  for (const std::string& ip : ips) hosts.insert(join_host(ip, entry.port));
  return hosts;
}

void RemotePool::reconcile(DnsEntry& entry) {
  std::set<std::string> now;
  try {
    now = resolve(entry);
  } catch (const std::exception& e) {
    // A name that does not resolve for a moment keeps the hosts it had.
    log().warn("remote discovery: dns:{}:{}: {}; keeping its {} hosts", entry.name, entry.port, e.what(),
               entry.hosts.size());
    return;
  }
  for (const std::string& host : entry.hosts)
    if (!now.contains(host)) {
      log().info("remote discovery: {} left dns:{}:{}", host, entry.name, entry.port);
      if (RemoteDevice* device = find(host)) device->retire();
    }
  for (const std::string& host : now)
    if (!entry.hosts.contains(host)) {
      log().info("remote discovery: {} joined dns:{}:{}", host, entry.name, entry.port);
      add_host(host, true);
    }
  entry.hosts = std::move(now);
}

std::uint16_t RemotePool::listen_port() const noexcept { return listener_ ? listener_->port() : 0; }

void RemotePool::listen() {
  const auto& options = core_.options();
  transport::BootstrapServer::Options bootstrap;
  std::tie(bootstrap.host, bootstrap.port) = transport::parse_address(options.listen);
  bootstrap.deadline = options.remote_timeout;
  auto dial = dial_options();
  dial.client = fmt::format("listening runtime {}", core_.id());
  dial.turn_away = [this](const transport::PublicKey& host_key) {
    std::lock_guard lock(turned_away_mutex_);
    return turned_away_.contains(transport::fingerprint(host_key))
               ? std::string("removed from this runtime's pool (add_remote takes it back)")
               : std::string();
  };
  listener_ = std::make_unique<transport::BootstrapServer>(
      core_.worker(), std::move(bootstrap), std::move(dial),
      [this](transport::Dialed dialed) { dialled_in(std::move(dialed)); });
  log().info("listening for ferryd hosts (ferryd --connect) on {}:{}", transport::parse_address(options.listen).first,
             listener_->port());
}

void RemotePool::dialled_in(transport::Dialed dialed) {
  {
    std::lock_guard lock(queue_mutex_);
    if (stopping_) {
      dialed.connection->close();
      return;
    }
    arrivals_.push_back(std::move(dialed));
  }
  queue_cv_.notify_all();
}

void RemotePool::welcome_host(transport::Dialed dialed) {
  // A host is its host key: the address it dials from changes every time.
  const std::string key = transport::fingerprint(dialed.host_key);
  RemoteDevice* device = find(key);
  if (device == nullptr) {
    const auto& options = core_.options();
    RemoteOptions remote;
    remote.address = key;
    remote.reverse = true;
    remote.dial = dial_options();
    remote.chunk_bytes = options.chunk_bytes;
    remote.window = options.chunk_window;
    remote.policy = RemotePolicy::prefer;
    remote.timeout = options.remote_timeout;
    remote.liveness = options.remote_liveness;
    try {
      device = static_cast<RemoteDevice*>(&core_.add_device([&](DeviceId id) {
        auto made = std::make_unique<RemoteDevice>(core_, id, static_cast<MemoryNodeId>(id), remote,
                                                   [this] { return core_.worker(); });
        made->start();
        return made;
      }));
    } catch (const std::exception& e) {
      log().warn("ferryd {} ({}) dialled in and is not used: {}", dialed.welcome.server, key, e.what());
      dialed.connection->close();
      return;
    }
    log().info("ferryd {} dialled in: remote {}", dialed.welcome.server, key);
  }
  if (device->retired()) {
    // Removed by the program: it stays out until add_remote names it. The
    // listener turns it away before its connection is made (turned_away_);
    // this is one whose handshake was under way when it was removed.
    log().debug("ferryd {} ({}) dialled in, but was removed from the pool: closed", dialed.welcome.server, key);
    dialed.connection->close();
    return;
  }
  core_.worker()->call([&] {
    device->adopt(std::move(dialed));
    return 0;
  });
}

void RemotePool::pool_loop() {
  const auto interval = core_.options().discovery_interval;
  auto next = std::chrono::steady_clock::now() + interval;
  std::unique_lock lock(queue_mutex_);
  while (!stopping_) {
    queue_cv_.wait_until(lock, next, [&] { return stopping_ || !arrivals_.empty(); });
    if (stopping_) break;
    std::deque<transport::Dialed> arrived;
    arrived.swap(arrivals_);
    const bool tick = std::chrono::steady_clock::now() >= next;
    lock.unlock();
    {
      std::lock_guard membership(membership_mutex_);
      for (auto& dialed : arrived) welcome_host(std::move(dialed));
      if (tick)
        for (auto& [key, entry] : dns_) reconcile(entry);
    }
    if (tick) next = std::chrono::steady_clock::now() + interval;
    lock.lock();
  }
}

}  // namespace ferry::detail
