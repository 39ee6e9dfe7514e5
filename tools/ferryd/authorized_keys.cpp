#include "authorized_keys.hpp"

#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <sstream>

#include "ferry/error.hpp"
#include "ferry/units.hpp"

namespace ferry::ferryd {
namespace {

bool yes_no(const std::string& option, const std::string& value) {
  if (value == "yes") return true;
  if (value == "no") return false;
  throw UsageError(fmt::format("option {}={}: expected yes or no", option, value));
}

constexpr std::uint32_t max_weight = 1000;

std::uint32_t parse_weight(const std::string& value) {
  std::uint32_t weight = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), weight);
  if (error != std::errc{} || end != value.data() + value.size() || weight < 1 || weight > max_weight)
    throw UsageError(fmt::format("option weight={}: expected a whole number from 1 to {}", value, max_weight));
  return weight;
}

std::pair<transport::PublicKey, Grant> parse_line(std::istringstream& words) {
  std::string type, base64;
  Grant grant;
  words >> type >> base64 >> grant.name;
  if (type != transport::public_key_type)
    throw UsageError(fmt::format("key type '{}', expected {}", type, transport::public_key_type));
  const auto key = transport::parse_public_key(base64);
  if (grant.name.empty()) throw UsageError("the key has no name (ferry-ed25519 BASE64 NAME [options])");
  // Without a name the first option would be taken for it, and silently not apply.
  if (grant.name.find('=') != std::string::npos)
    throw UsageError(fmt::format("the key has no name: '{}' is an option, and a name may not contain '=' "
                                 "(ferry-ed25519 BASE64 NAME [options])",
                                 grant.name));
  // "token:" names the shared token's clients (fair share, metrics): no key takes their place.
  if (grant.name.starts_with("token:"))
    throw UsageError(fmt::format("key name '{}': names beginning with 'token:' are for clients of the shared token",
                                 grant.name));
  for (std::string option; words >> option;) {
    const auto equals = option.find('=');
    if (equals == std::string::npos) throw UsageError(fmt::format("option '{}': expected NAME=VALUE", option));
    const auto key = option.substr(0, equals), value = option.substr(equals + 1);
    if (key == "quota") {
      grant.quota = parse_bytes(value);
      if (*grant.quota == 0) throw UsageError("option quota: must be more than 0 bytes");
    } else if (key == "weight") {
      grant.weight = parse_weight(value);
    } else if (key == "gpus") {
      grant.gpus = yes_no(key, value);
    } else if (key == "source-kernels") {
      grant.source_kernels = yes_no(key, value);
    } else if (key == "plugins") {
      grant.plugins = yes_no(key, value);
    } else {
      throw UsageError(fmt::format("unknown option '{}' (quota, weight, gpus, source-kernels, plugins)", key));
    }
  }
  return {key, std::move(grant)};
}

}  // namespace

AuthorizedKeys AuthorizedKeys::load(const std::filesystem::path& path) {
  // A directory opens as a stream that reads nothing: it would load as no keys at all.
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (!error && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
    throw UsageError(fmt::format("authorized keys {}: not a regular file ({})", path.string(),
                                 std::filesystem::is_directory(status) ? "a directory" : "a device, socket or pipe"));
  std::ifstream in(path);
  if (!in) throw UsageError(fmt::format("authorized keys {}: cannot be read", path.string()));
  AuthorizedKeys keys;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream words(line);
    std::string first;
    if (!(words >> first) || first.front() == '#') continue;
    words.seekg(0);
    try {
      auto [key, grant] = parse_line(words);
      if (keys.grants_.contains(key)) throw UsageError("the key is listed twice");
      keys.grants_.emplace(key, std::move(grant));
    } catch (const UsageError& e) {
      throw UsageError(fmt::format("authorized keys {}:{}: {}", path.string(), number, e.what()));
    }
  }
  return keys;
}

const Grant* AuthorizedKeys::find(const transport::PublicKey& key) const {
  auto it = grants_.find(key);
  return it == grants_.end() ? nullptr : &it->second;
}

KeyRing::KeyRing(std::filesystem::path path)
    : path_(std::move(path)), keys_(std::make_shared<const AuthorizedKeys>(AuthorizedKeys::load(path_))) {}

void KeyRing::reload() {
  auto fresh = std::make_shared<const AuthorizedKeys>(AuthorizedKeys::load(path_));
  std::lock_guard lock(mutex_);
  keys_ = std::move(fresh);
}

std::size_t KeyRing::size() const {
  std::lock_guard lock(mutex_);
  return keys_->size();
}

std::optional<Grant> KeyRing::find(const transport::PublicKey& key) const {
  std::shared_ptr<const AuthorizedKeys> keys;
  {
    std::lock_guard lock(mutex_);
    keys = keys_;
  }
  if (const Grant* grant = keys->find(key)) return *grant;
  return std::nullopt;
}

}  // namespace ferry::ferryd
