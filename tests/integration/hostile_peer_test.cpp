// Peers that lie to a real ferryd (docs/security.md, "What a peer's reply may
// carry"): a source that answers a host-to-host fetch's gets with more or
// fewer bytes than asked, and a client whose UCX worker address is garbage.
// Each is refused with a reason, and ferryd goes on serving everyone else
// with every other tenant's bytes as they were.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <ostream>
#include <thread>

#include "client_handshake.hpp"
#include "ferry/error.hpp"
#include "ferry/ferry.hpp"
#include "ferry/transport/auth.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/connection.hpp"
#include "ferry/transport/worker.hpp"
#include "ferryd_process.hpp"
#include "test_client.hpp"

namespace {

using ferry::test::FerrydProcess;
using ferry::test::TestClient;
namespace proto = ferry::protocol;
namespace transport = ferry::transport;
using namespace std::chrono_literals;

std::vector<std::uint8_t> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::uint8_t> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::uint8_t>(i * 131 + seed * 17 + 1);
  return data;
}

// A "ferryd" that serves the capability a test names and answers each get
// of n bytes with lie(n) bytes of 0xee: what a tenant who names its own
// fake source in a fetch can make ferryd receive.
class LyingSource {
 public:
  LyingSource(const transport::PublicKey& reader, std::string secret, std::function<std::size_t(std::size_t)> lie)
      : lie_(std::move(lie)) {
    worker_ = transport::Worker::create({"lying-source"});
    transport::BootstrapServer::Options options;
    options.host = "127.0.0.1";
    options.token = "nobody signs in with this";  // the bootstrap wants one; only the capability peer comes
    options.capability_keys = [reader, secret](std::uint64_t) {
      return std::optional<transport::CapabilityKeys>(transport::CapabilityKeys{secret, reader});
    };
    server_ = std::make_unique<transport::BootstrapServer>(
        worker_, options, [this](const transport::Peer&, std::shared_ptr<transport::Connection> connection) {
          connection->set_handlers([this](transport::Connection& c, transport::Incoming& in) { answer(c, in); }, {});
          std::lock_guard lock(mutex_);
          accepted_.push_back(std::move(connection));
          proto::Welcome welcome;
          welcome.server = "lying-source";
          welcome.max_payload = 1 << 20;
          return proto::Message(welcome);
        });
  }
  ~LyingSource() {
    server_.reset();
    std::lock_guard lock(mutex_);
    for (auto& c : accepted_) c->close();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  transport::PublicKey host_key() const { return server_->host_key(); }
  int gets() const { return gets_.load(); }
  std::size_t connections() {
    std::lock_guard lock(mutex_);
    return accepted_.size();
  }

 private:
  void answer(transport::Connection& connection, transport::Incoming& in) {
    const proto::Message m = proto::decode(in.header());
    if (const auto* claim = std::get_if<proto::Claim>(&m)) {  // any claim is welcome here
      connection.send(proto::encode(proto::PutAck{claim->request, claim->capability, proto::Status::ok, {}}), nullptr,
                      0, [](const std::string&) {});
      return;
    }
    const auto* get = std::get_if<proto::Get>(&m);
    if (get == nullptr) return;
    ++gets_;
    auto data = std::make_shared<std::vector<std::byte>>(lie_(get->length), std::byte{0xee});
    connection.send(proto::encode(proto::Data{get->request, get->buffer, get->offset, proto::Status::ok, {}}),
                    data->data(), data->size(), [data](const std::string&) {});
  }

  std::function<std::size_t(std::size_t)> lie_;
  std::shared_ptr<transport::Worker> worker_;
  std::unique_ptr<transport::BootstrapServer> server_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<transport::Connection>> accepted_;
  std::atomic<int> gets_{0};
};

proto::Secret secret_of(const std::string& text) {
  proto::Secret secret{};
  std::memcpy(secret.data(), text.data(), std::min(text.size(), secret.size()));
  return secret;
}

struct Lie {
  const char* name;
  std::size_t asked;
  std::size_t sent;
};

// Named in test lists by its name, not its bytes.
void PrintTo(const Lie& lie, std::ostream* os) { *os << lie.name; }

class LyingSourceFetch : public ::testing::TestWithParam<Lie> {};

// Two tenants on one ferryd. The attacker holds a replica and names its own
// source for a fetch into it; the victim's buffers sit beside it, and a
// freed one of the victim's held bytes the attacker's new replica may reuse.
TEST_P(LyingSourceFetch, FailsAndLeavesEveryOtherTenantsBytesAlone) {
  const Lie lie = GetParam();
  FerrydProcess host;
  TestClient attacker(host.port()), victim(host.port());
  attacker.authenticate(FerrydProcess::default_token);
  victim.authenticate(FerrydProcess::default_token);

  // The attacker's replica first, then the victim's buffers after it in memory.
  const auto mine = pattern(lie.asked, 99);
  attacker.put_all(7, proto::DType::u8, 1, lie.asked, mine.data(), lie.asked, 1 << 20);
  std::vector<std::vector<std::uint8_t>> theirs;
  for (unsigned i = 0; i < 24; ++i) {
    theirs.push_back(pattern(lie.asked, i));
    victim.put_all(100 + i, proto::DType::u8, 1, lie.asked, theirs.back().data(), lie.asked, 1 << 20);
  }
  // A buffer the victim frees: its bytes must never be read back by anyone.
  const auto secret_bytes = pattern(lie.asked, 1000);
  victim.put_all(99, proto::DType::u8, 1, lie.asked, secret_bytes.data(), lie.asked, 1 << 20);
  victim.send(proto::Free{99});
  (void)victim.stats();  // the free is done once a later reply comes

  const std::string secret = "a secret of the attacker's own!!";
  LyingSource source(attacker.host_key(), secret, [&](std::size_t) { return lie.sent; });
  // Into the replica it holds, and into a new one (where the freed bytes may lie).
  for (std::uint64_t buffer : {std::uint64_t{7}, std::uint64_t{8}}) {
    SCOPED_TRACE("fetch into buffer " + std::to_string(buffer));
    attacker.send(proto::Fetch{attacker.next_request(), buffer, proto::DType::u8, 1, lie.asked, 0, lie.asked,
                               source.address(), source.host_key(), 5, secret_of(secret), 1, 0});
    const auto ack = attacker.next_as<proto::PutAck>(60s);
    EXPECT_NE(ack.status, proto::Status::ok)
        << lie.name << ": ferryd took " << lie.sent << " bytes for a fetch of " << lie.asked;
    EXPECT_NE(ack.message.find("sent " + std::to_string(lie.sent) + " bytes for a get of " + std::to_string(lie.asked)),
              std::string::npos)
        << ack.message;
  }
  EXPECT_GT(source.gets(), 0) << "ferryd never asked the source";

  // The victim's bytes, byte for byte.
  for (unsigned i = 0; i < theirs.size(); ++i) {
    const auto got = victim.get(100 + i, 0, lie.asked);
    ASSERT_EQ(got.size(), lie.asked);
    EXPECT_EQ(std::memcmp(got.data(), theirs[i].data(), lie.asked), 0)
        << "the victim's buffer " << 100 + i << " changed";
  }
  // The attacker reads its own bytes back: what it put, and nothing of the
  // source's reply; a new replica reads as zeros, never the victim's old bytes.
  const auto own = attacker.get(7, 0, lie.asked);
  ASSERT_EQ(own.size(), lie.asked);
  EXPECT_EQ(std::memcmp(own.data(), mine.data(), lie.asked), 0) << "the failed fetch changed the attacker's replica";
  const auto fresh = attacker.get(8, 0, lie.asked);
  ASSERT_EQ(fresh.size(), lie.asked);
  std::size_t nonzero = 0;
  for (auto b : fresh) nonzero += b != std::byte{0};
  EXPECT_EQ(nonzero, 0u) << "the new replica reads " << nonzero << " bytes that no one wrote there";

  // ferryd still serves: a fresh client works.
  TestClient later(host.port());
  later.authenticate(FerrydProcess::default_token);
  const auto after = pattern(4096, 7);
  later.put_all(1, proto::DType::u8, 1, after.size(), after.data(), after.size(), 1 << 20);
  const auto back = later.get(1, 0, after.size());
  ASSERT_EQ(back.size(), after.size());
  EXPECT_EQ(std::memcmp(back.data(), after.data(), after.size()), 0);
}

INSTANTIATE_TEST_SUITE_P(Replies, LyingSourceFetch,
                         ::testing::Values(Lie{"more", 4096, 4096 + (64 << 10)}, Lie{"fewer", 4096, 100},
                                           Lie{"none", 4096, 0}),
                         [](const ::testing::TestParamInfo<Lie>& info) { return std::string(info.param.name); });

// ferryd keeps its connection to a source for the next fetch, but not to
// one that broke a request: after a lie, the next fetch dials anew.
TEST(LyingSourceConnection, IsKeptWhileHonestAndDroppedAfterALie) {
  FerrydProcess host;
  TestClient client(host.port());
  client.authenticate(FerrydProcess::default_token);
  const std::string secret = "a secret of the attacker's own!!";
  std::atomic<bool> lying = false;
  LyingSource source(client.host_key(), secret, [&](std::size_t n) { return lying ? n + 1 : n; });
  const auto fetch = [&](std::uint64_t capability) {
    client.send(proto::Fetch{client.next_request(), 7, proto::DType::u8, 1, 4096, 0, 4096, source.address(),
                             source.host_key(), capability, secret_of(secret), 1, 0});
    return client.next_as<proto::PutAck>(60s);
  };
  EXPECT_EQ(fetch(1).status, proto::Status::ok);
  EXPECT_EQ(fetch(2).status, proto::Status::ok);
  EXPECT_EQ(source.connections(), 1u) << "the second fetch dialled again";
  lying = true;
  EXPECT_NE(fetch(3).status, proto::Status::ok);
  lying = false;
  EXPECT_EQ(fetch(4).status, proto::Status::ok);
  EXPECT_EQ(source.connections(), 2u) << "the connection that carried a lie was used again";
}

// ---- a ferryd that lies to a client's runtime ----

// Keeps what is put, runs "copy" (its first buffer argument into its
// second), and answers gets honestly, except gets of `lie_about` bytes,
// which get `lie_about + extra` bytes: a malicious host, to a client.
class LyingFerryd {
 public:
  LyingFerryd(std::string token, std::size_t lie_about, std::size_t extra) : lie_about_(lie_about), extra_(extra) {
    worker_ = transport::Worker::create({"lying-ferryd"});
    transport::BootstrapServer::Options options;
    options.host = "127.0.0.1";
    options.token = std::move(token);
    server_ = std::make_unique<transport::BootstrapServer>(
        worker_, options, [this](const transport::Peer&, std::shared_ptr<transport::Connection> connection) {
          std::weak_ptr<transport::Connection> weak = connection;
          connection->set_handlers(
              [this, weak](transport::Connection&, transport::Incoming& in) {
                if (auto c = weak.lock()) answer(c, in);
              },
              {});
          std::lock_guard lock(mutex_);
          accepted_.push_back(std::move(connection));
          proto::Welcome welcome;
          welcome.server = "lying-ferryd";
          welcome.memory_quota = std::uint64_t{1} << 30;
          welcome.cpu_workers = 1;
          welcome.max_payload = 1 << 20;
          return proto::Message(welcome);
        });
  }
  ~LyingFerryd() {
    server_.reset();
    std::lock_guard lock(mutex_);
    for (auto& c : accepted_) c->close();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  int lies() const { return lies_.load(); }

 private:
  // Progress thread only, as the replicas are.
  void answer(const std::shared_ptr<transport::Connection>& c, transport::Incoming& in) {
    const proto::Message m = proto::decode(in.header());
    if (const auto* ping = std::get_if<proto::Ping>(&m)) return c->send(proto::encode(proto::Pong{ping->request}));
    if (const auto* stats = std::get_if<proto::StatsRequest>(&m))
      return c->send(proto::encode(proto::StatsReply{.request = stats->request}));
    if (const auto* free = std::get_if<proto::Free>(&m)) {
      replicas_.erase(free->buffer);
      return;
    }
    if (const auto* put = std::get_if<proto::Put>(&m)) {
      auto& replica = replicas_[put->buffer];
      if (replica.capacity() == 0) replica.reserve(std::size_t{16} << 20);  // never moves while a chunk lands
      replica.resize(std::max<std::size_t>(replica.size(), put->offset + in.payload_bytes()));
      const proto::PutAck ack{put->request, put->buffer, proto::Status::ok, {}};
      if (in.payload_bytes() == 0) return c->send(proto::encode(ack));
      return in.into(replica.data() + put->offset, [c, ack](const std::string&) { c->send(proto::encode(ack)); });
    }
    if (const auto* run = std::get_if<proto::Run>(&m)) {
      std::vector<std::uint64_t> buffers;
      for (const auto& arg : run->args)
        if (arg.kind == proto::RunArg::Kind::buffer) buffers.push_back(arg.buffer);
      if (run->kernel == "copy" && buffers.size() == 2) replicas_[buffers[1]] = replicas_[buffers[0]];
      return c->send(proto::encode(proto::Done{run->request, proto::Status::ok, 0.0, std::nullopt, {}}));
    }
    if (const auto* get = std::get_if<proto::Get>(&m)) {
      const auto& replica = replicas_[get->buffer];
      auto data = std::make_shared<std::vector<std::byte>>(get->length, std::byte{0});
      if (get->offset + get->length <= replica.size())
        std::memcpy(data->data(), replica.data() + get->offset, get->length);
      if (get->length == lie_about_) {
        data->resize(get->length + extra_, std::byte{0xee});
        ++lies_;
      }
      c->send(proto::encode(proto::Data{get->request, get->buffer, get->offset, proto::Status::ok, {}}), data->data(),
              data->size(), [data](const std::string&) {});
    }
  }

  std::size_t lie_about_, extra_;
  std::shared_ptr<transport::Worker> worker_;
  std::unique_ptr<transport::BootstrapServer> server_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<transport::Connection>> accepted_;
  std::map<std::uint64_t, std::vector<std::byte>> replicas_;
  std::atomic<int> lies_{0};
};

TEST(HostilePeer, ALyingHostIsDroppedAndItsBytesNeverLand) {
  const std::size_t bytes = 12345;  // no probe or chunk of the runtime's is this size
  const std::string token = "the lying host's token";
  LyingFerryd host(token, bytes, 64 << 10);
  const auto dir = std::filesystem::temp_directory_path() / ("ferry-lying-host-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "token") << token << '\n';
  std::filesystem::permissions(dir / "token", std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);

  ferry::Runtime::Options options;
  options.workers = 2;
  options.persist_perf_models = false;
  options.read_environment = false;
  options.gpus = "none";  // a test that wants a GPU asks for one
  options.remotes = {host.address()};
  options.token_file = dir / "token";
  {
    ferry::Runtime rt(options);
    auto x = rt.buffer<std::uint8_t>(bytes);
    auto y = rt.buffer<std::uint8_t>(bytes);
    const auto data = pattern(bytes, 5);
    std::ranges::copy(data, x.host().begin());
    rt.submit("copy", ferry::read(x), ferry::write(y), ferry::on(ferry::remote(host.address())));
    // y comes home from the host, which answers with 64 KiB too many.
    std::string failure;
    try {
      auto hy = y.host();
      EXPECT_TRUE(std::equal(hy.begin(), hy.end(), data.begin())) << "y holds bytes that are not x's";
    } catch (const std::exception& e) {
      failure = e.what();
    }
    EXPECT_GT(host.lies(), 0) << "the host was never asked for y";
    const auto stats = rt.remote_stats(host.address());
    EXPECT_FALSE(stats.connected) << "the runtime goes on using a host that lied";
    const std::string says =
        "sent " + std::to_string(bytes + (64 << 10)) + " bytes for a get of " + std::to_string(bytes);
    EXPECT_NE(stats.down_reason.find(says), std::string::npos) << stats.down_reason << " / " << failure;
  }
  std::filesystem::remove_all(dir);
}

// ---- a client's UCX worker address ----

// The bootstrap's framing (u32 little-endian length, then the body) on a
// blocking socket: enough to play a client that lies in its auth.
class Bootstrap {
 public:
  explicit Bootstrap(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("cannot connect to ferryd's bootstrap");
    timeval timeout{20, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  }
  ~Bootstrap() { ::close(fd_); }
  int fd() const { return fd_; }
  void write_frame(const std::vector<std::byte>& body) {
    const auto n = static_cast<std::uint32_t>(body.size());
    std::vector<std::byte> frame(4 + body.size());
    for (int i = 0; i < 4; ++i) frame[i] = static_cast<std::byte>(n >> (8 * i));
    std::memcpy(frame.data() + 4, body.data(), body.size());
    ASSERT_EQ(::send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frame.size()));
  }
  // Empty when ferryd hung up without a word.
  std::vector<std::byte> read_frame() {
    std::byte prefix[4];
    if (!read_exactly(prefix, 4)) return {};
    std::uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= std::to_integer<std::uint32_t>(prefix[i]) << (8 * i);
    std::vector<std::byte> body(n);
    if (!read_exactly(body.data(), n)) return {};
    return body;
  }

 private:
  bool read_exactly(std::byte* out, std::size_t bytes) {
    for (std::size_t done = 0; done < bytes;) {
      const ssize_t n = ::recv(fd_, out + done, bytes - done, 0);
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }
  int fd_ = -1;
};

// A client whose data was on the host before the hostile peer came: ferryd
// must go on serving it, its bytes untouched, and let a new client in.
struct Bystander {
  TestClient client;
  std::vector<std::uint8_t> kept;

  Bystander(FerrydProcess& host, unsigned seed) : client(host.port()), kept(pattern(8192, seed)) {
    client.authenticate(FerrydProcess::default_token);
    client.put_all(1, proto::DType::u8, 1, kept.size(), kept.data(), kept.size(), 1 << 20);
  }

  // A ferryd that died fails here with its log (FerrydProcess's destructor says so too).
  void expect_served(FerrydProcess& host) {
    const auto back = client.get(1, 0, kept.size());
    ASSERT_EQ(back.size(), kept.size());
    EXPECT_EQ(std::memcmp(back.data(), kept.data(), kept.size()), 0);
    TestClient later(host.port());
    EXPECT_NO_THROW(later.authenticate(FerrydProcess::default_token));
  }
};

TEST(HostilePeer, GarbageWorkerAddressIsRefusedAndFerrydServesOthers) {
  FerrydProcess host;
  Bystander bystander(host, 3);

  auto worker = transport::Worker::create({"garbage-address"});
  const auto real = worker->address();
  auto truncated = real;
  truncated.resize(real.size() / 2);
  auto wrong_version = real;
  wrong_version[0] = static_cast<std::uint8_t>((wrong_version[0] & 0xf0) | 0x0e);
  auto huge_lengths = real;  // every byte after the header a length at its largest
  for (std::size_t i = 9; i < huge_lengths.size(); ++i) huge_lengths[i] = 0xff;
  const std::vector<std::pair<const char*, std::vector<std::uint8_t>>> garbage = {
      {"sixteen 0xff", std::vector<std::uint8_t>(16, 0xff)},
      {"truncated", truncated},
      {"wrong version", wrong_version},
      {"huge lengths", huge_lengths},
  };
  // A dial whose auth carries `mine` (with `lane` offered): ferryd refuses
  // it as malformed, naming `what`.
  const auto refused = [&](const transport::Worker::Addresses& mine, proto::Lane lane, const std::string& what) {
    transport::DialOptions options;
    options.client = "garbage-address";
    options.token = FerrydProcess::default_token;
    const std::string where = "127.0.0.1:" + std::to_string(host.port());
    transport::ClientHandshake handshake(options, where, false, lane);
    Bootstrap socket(host.port());
    socket.write_frame(handshake.hello());
    socket.write_frame(handshake.on_challenge(socket.read_frame(), socket.fd(), mine));
    const auto answer = socket.read_frame();
    ASSERT_FALSE(answer.empty()) << "ferryd hung up without a word (or died): " << host.log();
    try {
      handshake.on_welcome(answer, worker, where, {}, {});
      ADD_FAILURE() << "ferryd welcomed a client with such a " << what;
    } catch (const transport::DialRefused& e) {
      EXPECT_EQ(e.status, proto::Status::malformed) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  for (const auto& [name, address] : garbage) {
    SCOPED_TRACE(name);
    refused({address, {}}, proto::Lane::none, "worker address");
  }
  // The same garbage as the network address beside a real worker address
  // (the control endpoint is made from it when a lane is offered).
  for (const auto& [name, address] : garbage) {
    SCOPED_TRACE(std::string("network address: ") + name);
    refused({real, address}, proto::Lane::bulk, "network address");
  }

  // ferryd is alive, the bystander's session and bytes untouched, and a new client gets in.
  bystander.expect_served(host);
  EXPECT_TRUE(host.wait_for_log("worker address is unusable"));
}

// A well-formed worker address whose owner is gone (its TCP port closed)
// between the handshake's messages: a client that died while connecting,
// or a tenant that hands ferryd a door to nowhere on purpose. ferryd's
// endpoint to it fails as it connects; ferryd must go on serving.
TEST(HostilePeer, AWorkerAddressThatLeadsNowhereLeavesFerrydServing) {
  FerrydProcess host;
  Bystander bystander(host, 5);

  auto worker = transport::Worker::create({"vanishing-client"});
  std::vector<std::uint8_t> nowhere;
  {
    auto gone = transport::Worker::create({"gone"});
    nowhere = gone->address();
  }  // its worker and TCP listener closed: the address now leads nowhere
  for (int attempt = 0; attempt < 3; ++attempt) {
    transport::DialOptions options;
    options.client = "vanishing-client";
    options.token = FerrydProcess::default_token;
    const std::string where = "127.0.0.1:" + std::to_string(host.port());
    transport::ClientHandshake handshake(options, where, false);
    Bootstrap socket(host.port());
    socket.write_frame(handshake.hello());
    socket.write_frame(handshake.on_challenge(socket.read_frame(), socket.fd(), {nowhere, {}}));
    (void)socket.read_frame();  // welcomed or refused: either is fine, dying is not
    std::this_thread::sleep_for(200ms);  // its endpoint's connect refused meanwhile
  }
  bystander.expect_served(host);
}

}  // namespace
