#include "capabilities.hpp"

#include <algorithm>

namespace ferry::ferryd {

void Capabilities::expire(std::chrono::steady_clock::time_point now) {
  std::erase_if(by_id_, [&](const auto& entry) { return entry.second.deadline <= now; });
}

bool Capabilities::add(Capability capability, std::string& why) {
  std::lock_guard lock(mutex_);
  expire(std::chrono::steady_clock::now());
  if (auto it = by_id_.find(capability.id); it != by_id_.end()) {
    // The same owner granting the same id again replaces it (a retry);
    // another owner's id is not to be taken over.
    if (it->second.owner != capability.owner) {
      why = "capability " + std::to_string(capability.id) + " is in use";
      return false;
    }
    // A peer signed in with it: what it may read stays what it claimed.
    if (it->second.claimed) {
      why = "capability " + std::to_string(capability.id) +
            " was claimed by the host it was granted to; a new grant needs a new id";
      return false;
    }
    capability.claimed = false;
    capability.serial = next_serial_++;
    it->second = std::move(capability);
    return true;
  }
  const auto held = std::count_if(by_id_.begin(), by_id_.end(),
                                  [&](const auto& entry) { return entry.second.owner == capability.owner; });
  if (static_cast<std::size_t>(held) >= max_per_owner) {
    why = "this client holds " + std::to_string(held) + " grants already (at most " + std::to_string(max_per_owner) +
          ")";
    return false;
  }
  const auto id = capability.id;
  capability.claimed = false;
  capability.serial = next_serial_++;
  by_id_.emplace(id, std::move(capability));
  return true;
}

std::optional<transport::CapabilityKeys> Capabilities::keys(std::uint64_t id) {
  auto found = find(id);
  if (!found || found->claimed) return std::nullopt;
  return transport::CapabilityKeys{std::move(found->secret), found->reader};
}

std::optional<std::uint64_t> Capabilities::claim(std::uint64_t id, std::optional<std::uint64_t> serial) {
  std::lock_guard lock(mutex_);
  expire(std::chrono::steady_clock::now());
  auto it = by_id_.find(id);
  if (it == by_id_.end() || it->second.claimed || (serial && it->second.serial != *serial)) return std::nullopt;
  it->second.claimed = true;
  return it->second.serial;
}

std::optional<Capability> Capabilities::find(std::uint64_t id, std::optional<std::uint64_t> serial) {
  std::lock_guard lock(mutex_);
  expire(std::chrono::steady_clock::now());
  auto it = by_id_.find(id);
  if (it == by_id_.end() || (serial && it->second.serial != *serial)) return std::nullopt;
  return it->second;
}

void Capabilities::drop_owner(const Session* owner) {
  std::lock_guard lock(mutex_);
  std::erase_if(by_id_, [&](const auto& entry) { return entry.second.owner == owner; });
}

void Capabilities::drop_buffer(const Session* owner, std::uint64_t buffer) {
  std::lock_guard lock(mutex_);
  std::erase_if(by_id_, [&](const auto& entry) { return entry.second.owner == owner && entry.second.buffer == buffer; });
}

std::size_t Capabilities::size() {
  std::lock_guard lock(mutex_);
  return by_id_.size();
}

}  // namespace ferry::ferryd
