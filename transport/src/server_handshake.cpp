#include "server_handshake.hpp"

#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/transport/auth.hpp"
#include "handshake.hpp"
#include "pull.hpp"
#include "same_host.hpp"
#include "worker_address.hpp"

namespace ferry::transport {

using protocol::Status;

namespace {

bool all_zero(const protocol::Key& key) {
  return std::all_of(key.begin(), key.end(), [](std::uint8_t b) { return b == 0; });
}

}  // namespace

ServerHandshake::ServerHandshake(std::shared_ptr<Worker> worker, const BootstrapServer::Options& options,
                                 BootstrapServer::AcceptHandler on_accept, std::optional<DialOptions> client,
                                 BootstrapServer::DialedHandler on_dialed, BootstrapAdmission& admission,
                                 std::shared_ptr<const BootstrapWaker> waker)
    : worker_(std::move(worker)),
      options_(options),
      on_accept_(std::move(on_accept)),
      client_(std::move(client)),
      on_dialed_(std::move(on_dialed)),
      admission_(admission),
      waker_(std::move(waker)),
      host_key_(options_.host_key ? *options_.host_key : KeyPair::generate()),
      aes_(preferred_cipher() == Cipher::aes256gcm) {
  if (client_) {
    if (client_->token.empty() && !client_->identity)
      throw UsageError("listening for ferryd hosts needs a token or a key (ferry keygen)");
  } else if (options_.token.empty() && !options_.authorize) {
    throw UsageError("the bootstrap needs a token, authorized keys, or both");
  }
}

bool ServerHandshake::start(BootstrapPeer& peer) {
  if (!client_) return true;
  try {
    peer.client = std::make_unique<ClientHandshake>(*client_, peer.address, true,
                                                    lane_to_offer(peer.fd, worker_->transports(), true));
  } catch (const std::exception& e) {
    log().error("bootstrap: {}", e.what());
    return false;
  }
  peer.stage = Stage::challenge;
  send(peer, peer.client->hello());
  return true;
}

void ServerHandshake::tell_and_close(BootstrapPeer& peer, Status status, const std::string& why) {
  peer.done = true;
  if (peer.client || peer.outcome) return;  // not a client of ours: it has its own reasons
  const auto message = protocol::encode(protocol::ErrorMessage{status, why});
  std::vector<std::byte> frame;
  if (peer.stage == Stage::hello) {
    frame = handshake::frame(message);
  } else if (peer.stage == Stage::auth && peer.exchange) {
    const Cipher cipher = peer.challenge.cipher == 0 ? Cipher::aes256gcm : Cipher::xchacha20poly1305;
    if (!peer.channel) peer.channel = handshake::server_channel(*peer.exchange, peer.hello.exchange, cipher);
    if (!peer.channel) return;
    frame = handshake::frame(peer.channel->seal(message, {}, nullptr));
  } else {
    return;
  }
  if (peer.out_done < peer.out.size()) return;  // something is still on its way: a frame would cut into it
  [[maybe_unused]] auto n = ::send(peer.fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

void ServerHandshake::receive(BootstrapPeer& peer) {
  std::byte chunk[4096];
  bool hung_up = false;
  for (;;) {
    const ssize_t n = ::recv(peer.fd, chunk, sizeof chunk, 0);
    if (n > 0) {
      peer.in.insert(peer.in.end(), chunk, chunk + n);
      // A peer cannot make us hold more than one frame and a bit.
      if (peer.in.size() > 4 + handshake::max_frame_bytes + sizeof chunk) break;
      continue;
    }
    if (n == 0) {
      // ferryd's welcome comes with its end of the socket closing: read what came first.
      hung_up = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    admission_.closed(peer, Refusal::hung_up, fmt::format("the connection failed: {}", std::strerror(errno)));
    peer.done = true;
    return;
  }
  while (!peer.done && peer.stage != Stage::flushing && peer.in.size() >= 4) {
    const auto length = handshake::frame_length(peer.in.data());
    if (length == 0 || length > handshake::max_frame_bytes)
      return garbage(peer, fmt::format("a frame of {} bytes (at most {})", length, handshake::max_frame_bytes));
    if (peer.in.size() < 4 + length) break;
    std::vector<std::byte> body(peer.in.begin() + 4, peer.in.begin() + 4 + length);
    peer.in.erase(peer.in.begin(), peer.in.begin() + 4 + length);
    try {
      switch (peer.stage) {
        case Stage::hello: on_hello(peer, std::move(body)); break;
        case Stage::auth: on_auth(peer, body); break;
        case Stage::challenge:
          peer.stage = Stage::welcome;
          send(peer, peer.client->on_challenge(std::move(body), peer.fd, worker_->addresses()));
          break;
        case Stage::welcome: on_welcome(peer, body); break;
        case Stage::wiring:
        case Stage::flushing: break;  // not read from in these stages
      }
    } catch (const ProtocolError& e) {
      return garbage(peer, e.what());
    } catch (const std::exception& e) {
      // The client's part: ferryd refused us, or we it (DialRefused names which and why).
      if (!peer.client) throw;
      const auto* refusal = dynamic_cast<const DialRefused*>(&e);
      const Refusal reason = refusal == nullptr                                        ? Refusal::malformed
                             : refusal->status == Status::version_mismatch             ? Refusal::version_mismatch
                             : refusal->status == Status::auth_failed                  ? Refusal::unknown_key
                                                                                       : Refusal::malformed;
      admission_.closed(peer, reason, e.what());  // names the peer
      if (dynamic_cast<const TurnedAway*>(&e) != nullptr) {
        // Said to ferryd in place of auth, so its log names the reason.
        send_error(peer, Status::auth_failed, e.what());
        return;
      }
      peer.done = true;
      return;
    }
  }
  if (hung_up && !peer.done) {
    admission_.closed(peer, Refusal::hung_up, "hung up during the handshake");
    peer.done = true;
  }
}

void ServerHandshake::garbage(BootstrapPeer& peer, const std::string& what) {
  admission_.closed(peer, Refusal::malformed, what);
  peer.done = true;
}

void ServerHandshake::send(BootstrapPeer& peer, std::span<const std::byte> body) {
  auto frame = handshake::frame(body);
  peer.out.insert(peer.out.end(), frame.begin(), frame.end());
  flush(peer);
}

void ServerHandshake::flush(BootstrapPeer& peer) {
  while (peer.out_done < peer.out.size()) {
    const ssize_t n = ::send(peer.fd, peer.out.data() + peer.out_done, peer.out.size() - peer.out_done,
                             MSG_NOSIGNAL);
    if (n > 0) {
      peer.out_done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    peer.done = true;
    return;
  }
  if (peer.stage == Stage::flushing) peer.done = true;  // everything said: the socket's work is over
}

void ServerHandshake::refuse(BootstrapPeer& peer, Refusal reason, Status status, const std::string& why) {
  admission_.closed(peer, reason, why);
  send_error(peer, status, why);
}

void ServerHandshake::send_error(BootstrapPeer& peer, Status status, const std::string& why) {
  const auto message = protocol::encode(protocol::ErrorMessage{status, why});
  peer.stage = Stage::flushing;
  if (peer.channel) {
    send(peer, peer.channel->seal(message, {}, nullptr));
  } else {
    send(peer, message);
  }
}

void ServerHandshake::on_hello(BootstrapPeer& peer, std::vector<std::byte> body) {
  auto message = protocol::decode(body);
  auto* hello = std::get_if<protocol::Hello>(&message);
  if (hello == nullptr)
    return garbage(peer, fmt::format("a {} message where a hello belongs", protocol::to_string(protocol::type_of(message))));
  peer.hello = std::move(*hello);
  const std::uint16_t lowest = std::max(peer.hello.min_version, protocol::oldest_version);
  const std::uint16_t highest = std::min(peer.hello.max_version, protocol::version);
  if (highest < lowest)
    return refuse(peer, Refusal::version_mismatch, Status::version_mismatch,
                  fmt::format("ferryd speaks protocol versions {}-{}, the client {}-{}", protocol::oldest_version,
                              protocol::version, peer.hello.min_version, peer.hello.max_version));
  peer.hello_body = std::move(body);
  peer.exchange = std::make_unique<handshake::Exchange>();
  auto& challenge = peer.challenge;
  challenge.version = highest;
  challenge.nonce = random_nonce();
  challenge.exchange = peer.exchange->public_key;
  challenge.host_key = host_key_.public_key();
  challenge.cipher = aes_ && peer.hello.aes_gcm != 0 ? 0 : 1;
  // What the client may check against this socket while it is open: the
  // process it may pull payloads out of, once the lane is agreed.
  if (peer.hello.lane == protocol::Lane::shared_memory && pull::enabled() &&
      shared_memory_lane_possible(peer.fd, worker_->transports()))
    challenge.pid.value = static_cast<std::uint32_t>(::getpid());
  const auto digest = handshake::challenge_digest(peer.hello_body, challenge);
  challenge.signature = host_key_.sign(digest);
  peer.challenge_body = protocol::encode(challenge);
  peer.stage = Stage::auth;
  send(peer, peer.challenge_body);
}

void ServerHandshake::on_auth(BootstrapPeer& peer, std::span<const std::byte> body) {
  auto message = protocol::decode(body);
  if (const auto* error = std::get_if<protocol::ErrorMessage>(&message); error != nullptr && peer.outcome) {
    // The listening client this ferryd dialled turned it away, and said why.
    peer.failure = "refused: " + handshake::printable(error->message, protocol::max_string_bytes);
    peer.done = true;
    return;
  }
  auto* auth = std::get_if<protocol::Auth>(&message);
  if (auth == nullptr)
    return garbage(peer, fmt::format("a {} message where an auth belongs", protocol::to_string(protocol::type_of(message))));
  const Cipher cipher = peer.challenge.cipher == 0 ? Cipher::aes256gcm : Cipher::xchacha20poly1305;
  peer.channel = handshake::server_channel(*peer.exchange, peer.hello.exchange, cipher);
  if (!peer.channel) return refuse(peer, Refusal::malformed, Status::auth_failed, "the client's key exchange is unusable");
  if (auth->worker_address.empty()) return refuse(peer, Refusal::malformed, Status::malformed, "auth carries no worker address");
  // Refused here, with a reason the client reads, before it could reach
  // UCX (Connection::to_worker would refuse it too, saying nothing to it).
  if (const std::string why = worker_address::check(auth->worker_address); !why.empty())
    return refuse(peer, Refusal::malformed, Status::malformed, "auth's UCX worker address is unusable: " + why);
  const auto& network = auth->network_address.bytes;
  if (!network.empty()) {
    if (peer.hello.lane == protocol::Lane::none)
      return refuse(peer, Refusal::malformed, Status::malformed, "auth carries a network address without a lane offered");
    if (const std::string why = worker_address::check(network); !why.empty())
      return refuse(peer, Refusal::malformed, Status::malformed, "auth's UCX network address is unusable: " + why);
  }
  const auto digest = handshake::auth_digest(peer.hello_body, peer.challenge_body, auth->worker_address, network);

  Peer who;
  who.address = peer.address;
  who.dialled_out = static_cast<bool>(peer.outcome);
  who.client = handshake::printable(peer.hello.client);
  if (const auto capability = capability_of(peer.hello.client)) {
    // Another ferryd fetching what a client granted: it proves it knows
    // the capability's secret (its token, so it never crosses the wire
    // either) and that it is the host the client named (a signature by
    // that host key): the secret alone, were it to leak, lets no one in.
    // One answer whether the id is unknown or its secret wrong: a stranger
    // learns nothing of which ids are live.
    auto keys = options_.capability_keys ? options_.capability_keys(*capability) : std::nullopt;
    if (!keys || !verify_mac(keys->secret, digest, "client", auth->mac))
      return refuse(peer, Refusal::wrong_token, Status::auth_failed,
                    fmt::format("capability {} is unknown, expired or used, or its secret is wrong", *capability));
    const PublicKey key = peer.hello.identity;
    if (all_zero(key) || key != keys->reader)
      return refuse(peer, Refusal::unknown_key, Status::auth_failed,
                    fmt::format("capability {} was granted to host key {}, and this peer {}", *capability,
                                fingerprint(keys->reader),
                                all_zero(key) ? std::string("presents none") : "presents " + fingerprint(key)));
    if (!verify(key, digest, auth->signature))
      return refuse(peer, Refusal::unknown_key, Status::auth_failed,
                    fmt::format("the signature by host key {} does not verify", fingerprint(key)));
    who.key_name = "capability";  // not an authorized key: `key` stays empty
    who.capability = capability;
    who.reader = key;
    peer.secret = std::move(keys->secret);
  } else if (!all_zero(peer.hello.identity)) {
    const PublicKey key = peer.hello.identity;
    if (!options_.authorize)
      return refuse(peer, Refusal::unknown_key, Status::auth_failed, "this ferryd takes the shared token, not keys");
    auto name = options_.authorize(key);
    if (!name) return refuse(peer, Refusal::unknown_key, Status::auth_failed, fmt::format("key {} is not authorized", fingerprint(key)));
    if (!verify(key, digest, auth->signature))
      return refuse(peer, Refusal::unknown_key, Status::auth_failed, fmt::format("the signature by key {} ({}) does not verify",
                                                           *name, fingerprint(key)));
    who.key_name = std::move(*name);
    who.key = key;
  } else {
    if (options_.token.empty())
      return refuse(peer, Refusal::wrong_token, Status::auth_failed, "this ferryd takes authorized keys only; the client sent no key");
    if (!verify_mac(options_.token, digest, "client", auth->mac))
      return refuse(peer, Refusal::wrong_token, Status::auth_failed, "authentication failed: the client's token is not ferryd's");
    who.key_name = "token";
    peer.secret = options_.token;
  }
  const std::string ip = peer.address.substr(0, peer.address.rfind(':'));
  const bool loopback = is_loopback(ip.size() >= 2 && ip.front() == '[' ? ip.substr(1, ip.size() - 2) : ip);
  const bool client_allows = peer.hello.privacy == protocol::Privacy::plaintext ||
                             (peer.hello.privacy == protocol::Privacy::automatic && loopback);
  const bool server_allows = options_.allow_plaintext || (loopback && !options_.encrypt_loopback);
  who.encrypted = !(client_allows && server_allows);
  who.cipher = cipher;
  if (!who.encrypted && !loopback)
    log().warn("bootstrap: {} ({}) gets a plaintext link, as both ends chose (--plaintext)", who.address,
               who.client);
  who.binding = digest;
  admit(peer, who, auth->worker_address, network, digest);
}

void ServerHandshake::on_welcome(BootstrapPeer& peer, std::span<const std::byte> sealed) {
  worker_->call([&] {
    on_dialed_(peer.client->on_welcome(sealed, worker_, peer.address, {}, {}));
    return 0;
  });
  log().debug("bootstrap: ferryd dialled in from {}", peer.address);
  peer.admitted = true;
  peer.done = true;
}

void ServerHandshake::admit(BootstrapPeer& peer, const Peer& who, const protocol::Bytes& client_address,
                            const protocol::Bytes& client_network,
           const handshake::Digest& digest) {
  SecureChannel* seal = peer.channel.get();
  std::vector<std::byte> reply;
  std::shared_ptr<Connection> made;
  try {
    // On the progress thread at once: the connection's first sealed
    // message must follow the welcome's number, and nothing the session
    // sends can slip in between inside one posted function.
    reply = worker_->call([&] {
      // The client's offer where this end can take it: bulk lanes always.
      const protocol::Lane offer = peer.hello.lane;
      const protocol::Lane lane =
          offer == protocol::Lane::bulk ||
                  (offer == protocol::Lane::shared_memory && shared_memory_lane_possible(peer.fd, worker_->transports()))
              ? offer
              : protocol::Lane::none;
      // The client's payloads are pulled out of its process only once
      // that process is proven to be the one this socket talks to.
      const auto pid = static_cast<pid_t>(peer.hello.pid.value);
      const pid_t peer_pid =
          lane == protocol::Lane::shared_memory && pid > 0 && loopback_peer_is_process(peer.fd, pid) ? pid : 0;
      // The client's network address only beside a lane: with none, the
      // welcome cannot carry this end's, and both ends make theirs alike.
      const protocol::Bytes no_address;
      const auto& network = lane != protocol::Lane::none ? client_network : no_address;
      auto connection = Connection::to_worker(worker_, client_address, who.address,
                                              who.encrypted ? std::move(peer.channel) : nullptr, {}, {}, lane, true,
                                              peer_pid, {}, network);
      Peer admitted = who;
      admitted.shared_memory = lane == protocol::Lane::shared_memory;
      admitted.bulk_lanes = lane == protocol::Lane::bulk;
      protocol::Message answer = on_accept_(admitted, connection);
      if (auto* welcome = std::get_if<protocol::Welcome>(&answer)) {
        if (!who.key) welcome->mac = auth_mac(peer.secret, digest, "server");
        welcome->encrypted = who.encrypted ? 1 : 0;
        const auto local = connection->local_addresses();
        welcome->worker_address = local.whole;
        if (!network.empty()) welcome->network_address.bytes = local.network;
        welcome->lane = lane;
        peer.admitted = true;
        made = connection;
      } else {
        connection->close();
      }
      return seal->seal(protocol::encode(answer), {}, nullptr);
    });
  } catch (const std::exception& e) {
    const auto why = fmt::format("this end could not admit it: {}", e.what());
    admission_.closed(peer, Refusal::internal, why);
    // Its keys are still here unless the connection took them: then
    // nothing the peer could open can be said.
    if (peer.channel) send_error(peer, Status::internal, why);
    else peer.done = true;
    return;
  }
  log().debug("bootstrap: {} ({}) in as {}, {}", who.address, who.client, who.key_name,
              who.encrypted ? to_string(who.cipher) : "plaintext");
  if (peer.outcome && made) {
    // We dialled out: the client may not be able to reach our UCX worker
    // (NAT), only answer on the connection ours opens to it. Its endpoint,
    // made when the welcome comes, takes that connection over once our
    // endpoint's wireup is done: so the welcome waits for it.
    peer.stage = Stage::wiring;
    peer.welcome = std::move(reply);
    peer.wired = std::make_shared<std::atomic<int>>(0);
    made->flush([wired = peer.wired, waker = waker_](const std::string& error) {
      wired->store(error.empty() ? 1 : 2);
      waker->poke();
    });
    return;
  }
  peer.stage = Stage::flushing;
  send(peer, reply);
}

void ServerHandshake::wired(BootstrapPeer& peer) {
  const int state = peer.wired->load();
  if (state == 0) return;
  if (state == 2) {
    peer.admitted = false;
    admission_.closed(peer, Refusal::internal, "the UCX endpoint to it did not connect");
    peer.done = true;
    return;
  }
  peer.stage = Stage::flushing;
  send(peer, peer.welcome);
}

}  // namespace ferry::transport
