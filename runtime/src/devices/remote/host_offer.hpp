// What a remote host said of itself in its last welcome (its kernels,
// devices, quota, measured peak), what seals the link to it, and the
// warnings about it said once: the facts a device answers questions from
// (can_run, Runtime::devices) without asking the host again.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ferry/transport/protocol.hpp"

namespace ferry::detail {

struct RemoteOffer {
  std::string server;
  std::vector<std::string> kernels, devices;
  std::uint64_t quota = 0;
  std::string device_key;
  double peak_flops = 0, peak_bytes = 0;  // the host's device probe
};

class HostOffer {
 public:
  // The host welcomed us; true the first time ever (to warn about kernels it lacks once).
  bool welcomed(const protocol::Welcome& welcome) {
    std::lock_guard lock(mutex_);
    offer_ = RemoteOffer{welcome.server,     welcome.kernels,    welcome.devices,   welcome.memory_quota,
                         welcome.device_key, welcome.peak_flops, welcome.peak_bytes};
    kernels_ = {welcome.kernels.begin(), welcome.kernels.end()};
    return !std::exchange(told_missing_, true);
  }
  RemoteOffer offer() const {
    std::lock_guard lock(mutex_);
    return offer_;
  }
  // Whether the host runs this kernel by name (true when it did not say).
  bool offers(const std::string& kernel) const {
    std::lock_guard lock(mutex_);
    return kernels_.empty() || kernels_.contains(kernel);
  }
  // Of `kernels`, those the host lacks; none when it did not say what it has.
  std::vector<std::string> lacks(const std::vector<std::string>& kernels) const {
    std::vector<std::string> missing;
    std::lock_guard lock(mutex_);
    for (const std::string& name : kernels)
      if (!kernels_.empty() && !kernels_.contains(name)) missing.push_back(name);
    return missing;
  }

  // Connected, over a link sealed with `cipher`: the next time it is down is worth a warning again.
  void connected(std::string cipher) {
    std::lock_guard lock(mutex_);
    warned_ = false;
    cipher_ = std::move(cipher);
  }
  // Back in the pool after leaving it: the same.
  void rejoined() {
    std::lock_guard lock(mutex_);
    warned_ = false;
  }
  // True the first time since it was last up: the caller warns.
  bool first_warning() {
    std::lock_guard lock(mutex_);
    return !std::exchange(warned_, true);
  }
  std::string cipher() const {
    std::lock_guard lock(mutex_);
    return cipher_;
  }

 private:
  mutable std::mutex mutex_;
  RemoteOffer offer_;
  std::set<std::string> kernels_;  // offer_.kernels, for lookups
  std::string cipher_;             // of the last connection; empty before the first
  bool warned_ = false;
  bool told_missing_ = false;
};

}  // namespace ferry::detail
