#include "client_handshake.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include "ferry/log.hpp"
#include "ferry/transport/auth.hpp"
#include "ferry/transport/worker.hpp"
#include "pull.hpp"
#include "same_host.hpp"
#include "worker_address.hpp"

namespace ferry::transport {
namespace {

[[noreturn]] void refused(const std::string& where, const protocol::ErrorMessage& error) {
  throw DialRefused(error.status, fmt::format("ferryd at {} refused this client: {}: {}", where,
                                              protocol::to_string(error.status),
                                              handshake::printable(error.message, protocol::max_string_bytes)));
}

}  // namespace

ClientHandshake::ClientHandshake(const DialOptions& options, std::string where, bool reverse, protocol::Lane lane)
    : options_(options), where_(std::move(where)), reverse_(reverse) {
  if (!options.identity && options.token.empty())
    throw UsageError("connecting to ferryd needs a token or a key (ferry keygen)");
  hello_.client = options.client;
  hello_.privacy = options.privacy;
  hello_.exchange = exchange_.public_key;
  if (options.identity) hello_.identity = options.identity->public_key();
  hello_.aes_gcm = preferred_cipher() == Cipher::aes256gcm ? 1 : 0;
  hello_.lane = lane;
  if (lane == protocol::Lane::shared_memory && pull::enabled()) hello_.pid.value = static_cast<std::uint32_t>(::getpid());
  hello_body_ = protocol::encode(hello_);
}

std::vector<std::byte> ClientHandshake::on_challenge(std::vector<std::byte> challenge_body, int socket_fd,
                                                     const Worker::Addresses& mine) {
  const auto& my_address = mine.whole;
  challenge_body_ = std::move(challenge_body);
  auto message = protocol::decode(challenge_body_);
  if (auto* error = std::get_if<protocol::ErrorMessage>(&message)) refused(where_, *error);
  auto* challenge = std::get_if<protocol::Challenge>(&message);
  if (challenge == nullptr)
    throw DialRefused(protocol::Status::auth_failed,
                      fmt::format("ferryd at {} answered hello with {}, not a challenge", where_,
                                  protocol::to_string(protocol::type_of(message))));
  challenge_ = std::move(*challenge);
  if (!verify(challenge_.host_key, handshake::challenge_digest(hello_body_, challenge_), challenge_.signature))
    throw DialRefused(protocol::Status::auth_failed,
                      fmt::format("ferryd at {}: its challenge is not signed by the host key it presents ({}): "
                                  "refused",
                                  where_, fingerprint(challenge_.host_key)));
  if (reverse_) {
    // Anyone may dial a listening client: with keys, only a host whose key
    // the operator listed gets in; with the token, ferryd proves it below.
    if (options_.identity && (options_.known_hosts.empty() || !host_key_listed(options_.known_hosts, challenge_.host_key)))
      throw DialRefused(protocol::Status::auth_failed,
                        fmt::format("ferryd dialling in from {} presents host key {}, which {} does not list: "
                                    "refused (add its line to accept it)",
                                    where_, fingerprint(challenge_.host_key),
                                    options_.known_hosts.empty() ? "no known hosts file" : options_.known_hosts.string()));
    if (options_.turn_away)
      if (std::string why = options_.turn_away(challenge_.host_key); !why.empty())
        throw TurnedAway(protocol::Status::auth_failed, fmt::format("ferryd dialling in from {} ({}) turned away: {}",
                                                                    where_, fingerprint(challenge_.host_key), why));
  } else if (!options_.known_hosts.empty()) {
    // A key that is not the pinned one (or no pin, under strict checking)
    // will be the same key on the next try: a refusal, so that callers do
    // not retry it (and ferryd does not log a hang-up per try).
    try {
      check_host_key(options_.known_hosts, where_, challenge_.host_key, options_.pinning);
    } catch (const RemoteError& e) {
      throw DialRefused(protocol::Status::auth_failed, e.what());
    }
  }
  if (challenge_.cipher == 0 && hello_.aes_gcm == 0)
    throw DialRefused(protocol::Status::auth_failed,
                      fmt::format("ferryd at {} chose AES-256-GCM, which this CPU cannot do", where_));
  // ferryd's payloads are pulled out of its process only once that process
  // is proven to be the one this socket talks to (it is open now: ferryd
  // waits for the auth).
  if (const auto pid = static_cast<pid_t>(challenge_.pid.value);
      hello_.lane == protocol::Lane::shared_memory && pid > 0 && loopback_peer_is_process(socket_fd, pid))
    server_pid_ = pid;
  cipher_ = challenge_.cipher == 0 ? Cipher::aes256gcm : Cipher::xchacha20poly1305;
  channel_ = handshake::client_channel(exchange_, challenge_.exchange, cipher_);
  if (!channel_)
    throw DialRefused(protocol::Status::auth_failed,
                      fmt::format("ferryd at {} sent an unusable key exchange: refused", where_));

  const std::span<const std::uint8_t> network =
      hello_.lane != protocol::Lane::none ? std::span<const std::uint8_t>(mine.network) : std::span<const std::uint8_t>();
  digest_ = handshake::auth_digest(hello_body_, challenge_body_, my_address, network);
  protocol::Auth auth;
  if (options_.identity) auth.signature = options_.identity->sign(digest_);
  if (!options_.identity || capability_of(options_.client)) auth.mac = auth_mac(options_.token, digest_, "client");
  auth.worker_address = my_address;
  // For the control endpoint, with a lane beside it (protocol.md).
  auth.network_address.bytes.assign(network.begin(), network.end());
  mine_ = mine;
  return protocol::encode(auth);
}

Dialed ClientHandshake::on_welcome(std::span<const std::byte> sealed, const std::shared_ptr<Worker>& worker,
                                   const std::string& socket_name, Connection::MessageHandler on_message,
                                   Connection::ErrorHandler on_error) {
  std::vector<std::byte> plain;
  std::uint64_t number = 0;
  if (!channel_ || !channel_->open_header(sealed, 0, plain, number))
    throw DialRefused(protocol::Status::auth_failed,
                      fmt::format("ferryd at {}: its answer to auth is not sealed with the agreed keys: refused", where_));
  auto message = protocol::decode(plain);
  if (auto* error = std::get_if<protocol::ErrorMessage>(&message)) refused(where_, *error);
  auto* welcome = std::get_if<protocol::Welcome>(&message);
  if (welcome == nullptr)
    throw DialRefused(protocol::Status::auth_failed,
                      fmt::format("ferryd at {} answered auth with {}, not a welcome", where_,
                                  protocol::to_string(protocol::type_of(message))));
  if (!options_.identity && !verify_mac(options_.token, digest_, "server", welcome->mac))
    throw DialRefused(protocol::Status::auth_failed,
                      fmt::format("ferryd at {} does not prove it knows the token: refused", where_));
  const std::string ip = socket_name.substr(0, socket_name.rfind(':'));
  const bool loopback = is_loopback(ip.size() >= 2 && ip.front() == '[' ? ip.substr(1, ip.size() - 2) : ip);
  const bool may_be_plain = options_.privacy == protocol::Privacy::plaintext ||
                            (options_.privacy == protocol::Privacy::automatic && loopback);
  if (welcome->encrypted == 0 && !may_be_plain)
    throw DialRefused(protocol::Status::auth_failed,
                      fmt::format("ferryd at {} offers an unencrypted link: refused (FERRY_PLAINTEXT=1 allows one "
                                  "on a trusted network)",
                                  where_));
  if (welcome->encrypted == 0 && !loopback) log().warn("link to ferryd at {} is not encrypted (FERRY_PLAINTEXT)", where_);

  Dialed dialed;
  dialed.host_key = challenge_.host_key;
  dialed.cipher = cipher_;
  dialed.binding = digest_;
  if (welcome->lane != protocol::Lane::none && welcome->lane != hello_.lane)
    throw DialRefused(protocol::Status::malformed,
                      fmt::format("ferryd at {} chose a lane this client did not offer", where_));
  if (const std::string why = worker_address::check(welcome->worker_address); !why.empty())
    throw DialRefused(protocol::Status::malformed,
                      fmt::format("ferryd at {} sent an unusable UCX worker address: {}", where_, why));
  const pid_t peer_pid = welcome->lane == protocol::Lane::shared_memory ? server_pid_ : 0;
  // Sent only to a client that sent its own, and only with a lane.
  const auto& network = welcome->network_address.bytes;
  if (!network.empty() && (welcome->lane == protocol::Lane::none || mine_.network.empty() || hello_.lane == protocol::Lane::none))
    throw DialRefused(protocol::Status::malformed,
                      fmt::format("ferryd at {} sent a network address this client did not ask for", where_));
  if (!network.empty())
    if (const std::string why = worker_address::check(network); !why.empty())
      throw DialRefused(protocol::Status::malformed,
                        fmt::format("ferryd at {} sent an unusable UCX network address: {}", where_, why));
  dialed.connection = Connection::to_worker(worker, welcome->worker_address, socket_name,
                                            welcome->encrypted != 0 ? std::move(channel_) : nullptr,
                                            std::move(on_message), std::move(on_error), welcome->lane, false, peer_pid,
                                            mine_.whole, network);
  dialed.welcome = std::move(*welcome);
  return dialed;
}

}  // namespace ferry::transport
