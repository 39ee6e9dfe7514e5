// The runtime's set of remote GPU hosts, which may change while a program
// runs: hosts named at start, hosts added and removed (Runtime::add_remote,
// remove_remote), hosts found by DNS ("dns:NAME:PORT", re-resolved every
// discovery interval) and hosts that dial in (Options::listen, ferryd
// --connect) through a bootstrap playing the client's part.
//
// Devices are never taken out of the runtime's table (task masks index it):
// a removed host is retired (drained, disconnected) and revived if it
// comes back. Membership changes happen on the caller's thread or on the
// pool's own thread, never on the UCX progress thread, which dial() needs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ferry/runtime/runtime.hpp"
#include "ferry/transport/bootstrap.hpp"

namespace ferry::detail {

class RuntimeCore;
class RemoteDevice;

class RemotePool {
 public:
  explicit RemotePool(RuntimeCore& core);
  ~RemotePool();  // stop()
  RemotePool(const RemotePool&) = delete;
  RemotePool& operator=(const RemotePool&) = delete;

  // Options::remotes and Options::listen. Under RemotePolicy::require, a
  // named host that cannot be used throws RemoteError naming it.
  void start();
  // Stops listening and discovering; before the devices go.
  void stop();

  // "host:port" or "ucx://host:port" (a retired one rejoins), or
  // "dns:NAME:PORT" (every address of NAME, re-resolved). A host already in
  // the pool is a UsageError.
  void add(const std::string& entry);
  // Drains and retires the host (or every host of a "dns:" entry, which is
  // no longer re-resolved); a host not in the pool is a UsageError.
  void remove(const std::string& entry);
  // The port Options::listen bound; 0 when not listening.
  std::uint16_t listen_port() const noexcept;

 private:
  struct DnsEntry {
    std::string name;
    std::uint16_t port = 0;
    std::set<std::string> hosts;  // "ip:port" as last resolved
  };

  transport::DialOptions dial_options();
  // Adds one "host:port"; `discovered`: never throws (warned instead).
  void add_host(const std::string& address, bool discovered);
  RemoteDevice* find(const std::string& address) const;
  // The addresses a dns: entry names now (the resolver of Options).
  std::set<std::string> resolve(const DnsEntry& entry) const;
  void reconcile(DnsEntry& entry);
  void listen();
  void dialled_in(transport::Dialed dialed);  // progress thread: queued for the pool thread
  void welcome_host(transport::Dialed dialed);
  void pool_loop();
  void start_thread();

  RuntimeCore& core_;
  std::mutex membership_mutex_;  // add, remove, discovery, arrivals: one at a time
  bool dial_ready_ = false;
  transport::DialOptions dial_;
  std::map<std::string, DnsEntry> dns_;  // by "NAME:PORT"

  std::unique_ptr<transport::BootstrapServer> listener_;
  // Fingerprints of hosts that dialled in and were removed: the listener
  // turns them away before their connection is made (its own thread asks).
  std::mutex turned_away_mutex_;
  std::set<std::string> turned_away_;

  // The pool thread: hosts that dialled in, and the discovery clock.
  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<transport::Dialed> arrivals_;
  bool stopping_ = false;
  std::once_flag thread_started_;
  std::thread thread_;
};

}  // namespace ferry::detail
