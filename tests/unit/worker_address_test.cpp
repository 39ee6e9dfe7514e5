// A peer's UCX worker address is judged before UCX sees it: every address
// that UCX 1.13 itself makes passes (whatever transports, address version or
// debug info), and garbage is refused with the byte that gave it away,
// never handed to ucp_ep_create (which asserts on it: SIGABRT).
#include "worker_address.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/transport/connection.hpp"
#include "ferry/transport/worker.hpp"
#include "transport/transport_test_support.hpp"

namespace ferry::transport {
namespace {

std::string hex(const std::vector<std::uint8_t>& bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string text;
  for (auto b : bytes) {
    text += digits[b >> 4];
    text += digits[b & 15];
  }
  return text;
}

// Sets UCX environment variables for the workers made meanwhile; puts them back after.
using Settings = std::vector<std::pair<const char*, const char*>>;  // null: unset

class UcxEnvironment {
 public:
  explicit UcxEnvironment(const Settings& values) {
    for (auto [name, value] : values) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      if (value != nullptr)
        setenv(name, value, 1);
      else
        unsetenv(name);
    }
  }
  ~UcxEnvironment() {
    for (auto& [name, old] : saved_) {
      if (old)
        setenv(name.c_str(), old->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

std::vector<std::uint8_t> real_address(const Settings& environment) {
  UcxEnvironment set(environment);
  return Worker::create({"address-test"})->address();
}

// The configurations whose addresses must pass: the transports Ferry uses
// between hosts and on one host, both address versions, and debug info
// (the worker's name inside the address).
const std::vector<Settings>& configurations() {
  static const std::vector<Settings> all = {
      {{"UCX_TLS", nullptr}},
      {{"UCX_TLS", "tcp"}},
      {{"UCX_TLS", "tcp,self"}},
      {{"UCX_TLS", "posix,sysv,self,cma"}},
      {{"UCX_TLS", "all"}},
      {{"UCX_TLS", "tcp"}, {"UCX_ADDRESS_VERSION", "v2"}},
      {{"UCX_TLS", nullptr}, {"UCX_ADDRESS_VERSION", "v2"}},
      {{"UCX_TLS", nullptr}, {"UCX_ADDRESS_DEBUG_INFO", "y"}},
      {{"UCX_TLS", "tcp"}, {"UCX_ADDRESS_VERSION", "v2"}, {"UCX_ADDRESS_DEBUG_INFO", "y"}},
  };
  return all;
}

TEST(WorkerAddress, EveryAddressUcxMakesPasses) {
  for (const auto& environment : configurations()) {
    std::vector<std::uint8_t> address;
    try {
      UcxEnvironment set(environment);
      address = Worker::create({"address-test"})->address();
    } catch (const std::exception& e) {
      GTEST_LOG_(INFO) << "configuration " << environment.front().second << " not available here: " << e.what();
      continue;
    }
    std::string described;
    for (auto [name, value] : environment) described += std::string(name) + "=" + (value ? value : "(unset)") + " ";
    EXPECT_EQ(worker_address::check(address), "") << described << "address " << hex(address);
    // The setting took: the address is of the version asked for.
    const bool v2 = described.find("UCX_ADDRESS_VERSION=v2") != std::string::npos;
    EXPECT_EQ(address.at(0) & 0x0f, v2 ? 1 : 0) << described << "address " << hex(address);
  }
}

// Each of these would reach ucp_ep_create as it is.
TEST(WorkerAddress, GarbageIsRefusedNamingTheByte) {
  const auto real = real_address({{"UCX_TLS", "tcp"}});
  const auto real_v2 = real_address({{"UCX_TLS", "tcp"}, {"UCX_ADDRESS_VERSION", "v2"}});
  ASSERT_EQ(worker_address::check(real), "") << hex(real);
  ASSERT_EQ(worker_address::check(real_v2), "") << hex(real_v2);

  const auto refused = [](const std::vector<std::uint8_t>& address, const std::string& because) {
    const std::string why = worker_address::check(address);
    EXPECT_NE(why.find(because), std::string::npos) << "address " << hex(address) << ": " << why;
  };
  refused({}, "empty");
  refused(std::vector<std::uint8_t>(16, 0xff), "at byte 0: address version 15");
  auto wrong_version = real;
  wrong_version[0] = (wrong_version[0] & 0xf0) | 0x02;
  refused(wrong_version, "address version 2");
  for (const auto* address : {&real, &real_v2})
    for (std::size_t n = 1; n < address->size(); ++n)
      refused({address->begin(), address->begin() + static_cast<std::ptrdiff_t>(n)}, "left");
  auto trailing = real;
  trailing.push_back(0);
  refused(trailing, "1 bytes past the last device");

  // Every length field at its largest: the walk would leave the buffer.
  // In a v2 address the first device sits after the 2-byte header and the
  // 8-byte uuid (tcp's addresses carry no client id or name unless asked).
  auto huge = real_v2;
  const std::size_t device = 2 + 8 + ((huge[1] & 0x04) ? 8 : 0);
  ASSERT_LT(device + 2, huge.size());
  huge[device + 1] = 0x1f | (huge[device + 1] & 0xe0);  // extended: the next byte is the length
  huge.insert(huge.begin() + static_cast<std::ptrdiff_t>(device + 2), 0xff);
  refused(huge, "device 0's address needs");
  auto no_transports = real;
  no_transports.resize(1 + 8 + ((real[0] >> 4) & 0x04 ? 8 : 0));
  no_transports.push_back(0xff);
  refused(no_transports, "names no transports");
}

TEST(WorkerAddress, NoEndpointIsMadeFromGarbage) {
  auto worker = Worker::create({"address-test"});
  for (const auto& garbage : {std::vector<std::uint8_t>(16, 0xff), std::vector<std::uint8_t>{0x00, 0x01}}) {
    try {
      Connection::to_worker(worker, garbage, "garbage-peer", nullptr, {}, {});
      ADD_FAILURE() << "an endpoint was made from " << hex(garbage);
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find("garbage-peer"), std::string::npos) << e.what();
    }
  }
  // The worker still makes endpoints from a real address, and they carry a
  // message. Both ends are joined as the bootstrap joins them: an endpoint
  // made to a peer that never makes its own, and closed at once, left UCX
  // 1.13 destroying a worker with its wireup reply pending (an abort in
  // ucp_worker_destroy, about 1 run in 100).
  auto other = Worker::create({"address-test-peer"});
  test_support::Inbox<test_support::Message> inbox;
  auto theirs = Connection::to_worker(other, worker->address(), "address-test", nullptr, test_support::collect(inbox), {});
  auto ours = Connection::to_worker(worker, other->address(), "real-peer", nullptr, {}, {});
  EXPECT_EQ(test_support::send_and_wait(*ours, test_support::text_bytes("still here"), nullptr, 0), "");
  const auto got = inbox.wait(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].header, "still here");
  ours->close();
  theirs->close();
}

}  // namespace
}  // namespace ferry::transport
