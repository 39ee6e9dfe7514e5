// The session's state machine: which message is allowed when, the
// handshake, and how a session ends.
#include "session.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <type_traits>

#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/printable.hpp"
#include "ferry/units.hpp"

namespace ferry::ferryd {

using protocol::Status;
using protocol::Type;

Session::Session(ServerState& server, std::shared_ptr<transport::Connection> connection, const transport::Peer& peer,
                 Grant grant, ClosedHandler on_closed, std::uint64_t capability_serial)
    : server_(server),
      connection_(std::move(connection)),
      on_closed_(std::move(on_closed)),
      peer_(peer.address),
      client_(peer.client),
      grant_(std::move(grant)),
      share_key_(peer.key ? grant_.name : "token:" + (client_.empty() ? peer_ : client_)),
      key_(peer.key) {
  if (peer.capability)
    capability_peer_ = CapabilityPeer{
        {{*peer.capability, capability_serial}}, peer.reader.value_or(transport::PublicKey{}), peer.binding};
  server_.metrics.client_connected();
}

Session::~Session() {
  server_.capabilities->drop_owner(this);
  release_memory();
}

// The client's name is its own choice, and logged before it authenticates: printable() only.
std::string Session::describe() const {
  return client_.empty() ? fmt::format("{} ({})", peer_, grant_.name)
                         : fmt::format("{} ({}, {})", peer_, printable(client_), grant_.name);
}

void Session::regrant(Grant grant) {
  if (grant == grant_) return;
  log().info("client {}: its key's options changed (quota {}, weight {}, gpus {}, source-kernels {}, plugins {})",
             describe(), grant.quota ? format_bytes(*grant.quota) : std::string("default"), grant.weight,
             grant.gpus ? "yes" : "no", grant.source_kernels ? "yes" : "no", grant.plugins ? "yes" : "no");
  audit("regrant", {{"quota", grant.quota.value_or(server_.limits.client_quota)},
                    {"weight", grant.weight},
                    {"gpus", grant.gpus},
                    {"source_kernels", grant.source_kernels},
                    {"plugins", grant.plugins}});
  grant_ = std::move(grant);
}

void Session::audit(std::string_view event, nlohmann::json fields) const {
  if (!server_.audit->enabled()) return;
  fields["peer"] = peer_;
  if (!client_.empty()) fields["client"] = client_;
  if (!grant_.name.empty()) fields["key"] = grant_.name;
  server_.audit->record(event, std::move(fields));
}

void Session::start() {
  audit("connect", nlohmann::json::object());
  // Weak: the connection holds its handlers, and must not keep its session alive.
  std::weak_ptr<Session> weak = weak_from_this();
  connection_->set_handlers(
      [weak](transport::Connection&, transport::Incoming& incoming) {
        if (auto self = weak.lock()) self->on_message(incoming);
      },
      [weak](transport::Connection&, const std::string& reason) {
        if (auto self = weak.lock()) {
          if (self->state_ == State::closed) return;
          log().info("client {} went away: {}", self->describe(), printable(reason));
          self->close(reason);
        }
      });
}

void Session::on_message(transport::Incoming& incoming) {
  if (state_ == State::closed) return;
  const auto header = incoming.header();
  if (header.size() > protocol::max_header_bytes)
    return fail(Status::malformed, fmt::format("header of {} bytes exceeds the limit of {}", header.size(),
                                               protocol::max_header_bytes));
  protocol::Message message;
  try {
    message = protocol::decode(header);
  } catch (const ProtocolError& e) {
    return fail(Status::malformed, e.what());
  }
  const Type type = protocol::type_of(message);
  if (incoming.payload_bytes() > 0 && type != Type::put && type != Type::define_kernel)
    return fail(Status::malformed, fmt::format("a {} message carries no payload, but {} bytes came with it",
                                               protocol::to_string(type), incoming.payload_bytes()));
  dispatch(message, incoming);
}

void Session::dispatch(protocol::Message& message, transport::Incoming& incoming) {
  const Type type = protocol::type_of(message);
  if (type == Type::bye) {
    log().info("client {} said bye", describe());
    return close("the client said bye", /*goodbye=*/true);
  }
  if (type == Type::error) {
    const auto& error = std::get<protocol::ErrorMessage>(message);
    log().warn("client {} reported an error ({}): {}", describe(), protocol::to_string(error.status),
               printable(error.message, 1024));
    return close("the client reported an error");
  }
  if (capability_peer_) return dispatch_capability(message);
  // The handshake's messages belong on the bootstrap socket, never here.
  const bool allowed = type == Type::put || type == Type::get || type == Type::run || type == Type::free ||
                       type == Type::stats || type == Type::ping || type == Type::define_kernel ||
                       type == Type::grant || type == Type::fetch;
  if (!allowed)
    return fail(Status::out_of_order,
                fmt::format("unexpected {} message: expected a request", protocol::to_string(type)));
  if (server_.shutting_down && state_ == State::ready) return refuse_while_shutting_down(message);

  std::visit(
      [&](auto& m) {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, protocol::Put>) on_put(m, incoming);
        else if constexpr (std::is_same_v<M, protocol::Get>) on_get(m);
        else if constexpr (std::is_same_v<M, protocol::Run>) on_run(std::move(m));  // decoded for this call only
        else if constexpr (std::is_same_v<M, protocol::Free>) on_free(m);
        else if constexpr (std::is_same_v<M, protocol::StatsRequest>) on_stats(m);
        else if constexpr (std::is_same_v<M, protocol::Ping>) send(protocol::Pong{m.request});
        else if constexpr (std::is_same_v<M, protocol::DefineKernel>) on_define_kernel(m, incoming);
        else if constexpr (std::is_same_v<M, protocol::GrantRead>) on_grant(m);
        else if constexpr (std::is_same_v<M, protocol::Fetch>) on_fetch(m);
      },
      message);
}

void Session::refuse_while_shutting_down(const protocol::Message& message) {
  const std::string why = "ferryd is shutting down";
  std::visit(
      [&](const auto& m) {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, protocol::Put>)
          send(protocol::PutAck{m.request, m.buffer, Status::shutting_down, why});
        else if constexpr (std::is_same_v<M, protocol::Get>)
          send(protocol::Data{m.request, m.buffer, m.offset, Status::shutting_down, why});
        else if constexpr (std::is_same_v<M, protocol::GrantRead> || std::is_same_v<M, protocol::Fetch>)
          send(protocol::PutAck{m.request, m.buffer, Status::shutting_down, why});
        else if constexpr (std::is_same_v<M, protocol::Run> || std::is_same_v<M, protocol::DefineKernel>)
          send(protocol::Done{m.request, Status::shutting_down, 0.0, std::nullopt, why});
        else if constexpr (std::is_same_v<M, protocol::StatsRequest>) on_stats(m);
        else if constexpr (std::is_same_v<M, protocol::Ping>) send(protocol::Pong{m.request});
      },
      message);
}

void Session::send(const protocol::Message& message) {
  if (state_ == State::closed) return;
  connection_->send(protocol::encode(message));
}

void Session::fail(Status status, const std::string& message) {
  server_.metrics.protocol_error();
  log().warn("closing the connection from {}: {} ({})", describe(), printable(message, 1024),
             protocol::to_string(status));
  send(protocol::ErrorMessage{status, message});
  close(message);
}

void Session::shut_down(const std::string& why) {
  if (state_ == State::closed) return;
  for (auto& [seq, run] : runs_) send(protocol::Done{run.request, Status::shutting_down, 0.0, std::nullopt, why});
  runs_.clear();
  send(protocol::Bye{Status::shutting_down, why});
  close(why);
}

void Session::close(const std::string& why, bool goodbye) {
  if (state_ == State::closed) return;
  server_.metrics.client_gone();
  state_ = State::closed;
  log().debug("session {} closed: {}", describe(), printable(why, 1024));
  audit("disconnect", {{"reason", why},
                       {"bytes_in", counters_.bytes_in},
                       {"bytes_out", counters_.bytes_out},
                       {"tasks", counters_.tasks}});
  // A client that said bye reads nothing more: its endpoints can go at once.
  if (goodbye) connection_->close_after_goodbye();
  else connection_->close();
  runs_.clear();
  server_.capabilities->drop_owner(this);
  release_memory();
  // Last: the handler may drop the server's reference to this session.
  if (auto handler = std::exchange(on_closed_, nullptr)) handler(*this);
}

void Session::release_memory() {
  // Sends and receives still in flight hold their own references to the
  // replica; tasks hold the kernels they run.
  replicas_.clear();
  kernels_.clear();
  if (memory_in_use_ == 0) return;
  server_.memory_in_use -= memory_in_use_;
  server_.metrics.memory_in_use(server_.memory_in_use);
  memory_in_use_ = 0;
}

std::optional<std::pair<Status, std::string>> Session::admit(std::uint64_t bytes, std::string_view what,
                                                             std::string_view request) {
  if (memory_in_use_ + bytes > quota()) {
    server_.metrics.quota_refused();
    audit("quota_refused", {{"request", request},
                            {"what", what},
                            {"bytes", bytes},
                            {"held", memory_in_use_},
                            {"quota", quota()}});
    return std::pair{Status::quota_exceeded,
                     fmt::format("{} needs {}; this client holds {} of its {} quota", what, format_bytes(bytes),
                                 format_bytes(memory_in_use_), format_bytes(quota()))};
  }
  if (server_.memory_in_use + bytes > server_.limits.memory_limit)
    return std::pair{Status::out_of_memory,
                     fmt::format("{} needs {}; ferryd holds {} of its {} limit", what, format_bytes(bytes),
                                 format_bytes(server_.memory_in_use), format_bytes(server_.limits.memory_limit))};
  return std::nullopt;
}

void Session::charge(std::uint64_t bytes) {
  memory_in_use_ += bytes;
  server_.memory_in_use += bytes;
  server_.metrics.memory_in_use(server_.memory_in_use);
}

void Session::uncharge(std::uint64_t bytes) {
  memory_in_use_ -= bytes;
  server_.memory_in_use -= bytes;
  server_.metrics.memory_in_use(server_.memory_in_use);
}

}  // namespace ferry::ferryd
