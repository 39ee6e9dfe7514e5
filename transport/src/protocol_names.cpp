#include <cstddef>
#include <type_traits>
#include <utility>
#include <variant>

#include "ferry/transport/protocol.hpp"

namespace ferry::protocol {

// Values arrive from the wire before validation and from casts in tests, so
// every switch has a fallback instead of assuming the value is an enumerator.
const char* to_string(Type type) noexcept {
  switch (type) {
    case Type::hello: return "hello";
    case Type::challenge: return "challenge";
    case Type::auth: return "auth";
    case Type::welcome: return "welcome";
    case Type::put: return "put";
    case Type::put_ack: return "put_ack";
    case Type::get: return "get";
    case Type::data: return "data";
    case Type::run: return "run";
    case Type::done: return "done";
    case Type::free: return "free";
    case Type::stats: return "stats";
    case Type::stats_reply: return "stats_reply";
    case Type::ping: return "ping";
    case Type::pong: return "pong";
    case Type::error: return "error";
    case Type::bye: return "bye";
    case Type::define_kernel: return "define_kernel";
    case Type::grant: return "grant";
    case Type::fetch: return "fetch";
    case Type::claim:
      return "claim";
  }
  return "unknown";
}

const char* to_string(Status status) noexcept {
  switch (status) {
    case Status::ok: return "ok";
    case Status::kernel_failed: return "kernel_failed";
    case Status::unknown_kernel: return "unknown_kernel";
    case Status::bad_arguments: return "bad_arguments";
    case Status::unknown_buffer: return "unknown_buffer";
    case Status::quota_exceeded: return "quota_exceeded";
    case Status::out_of_memory: return "out_of_memory";
    case Status::shutting_down: return "shutting_down";
    case Status::auth_failed: return "auth_failed";
    case Status::version_mismatch: return "version_mismatch";
    case Status::malformed: return "malformed";
    case Status::out_of_order: return "out_of_order";
    case Status::internal: return "internal";
    case Status::busy: return "busy";
  }
  return "unknown";
}

namespace {

template <class T>
constexpr Type type_for() noexcept {
  if constexpr (std::is_same_v<T, Hello>) return Type::hello;
  else if constexpr (std::is_same_v<T, Challenge>) return Type::challenge;
  else if constexpr (std::is_same_v<T, Auth>) return Type::auth;
  else if constexpr (std::is_same_v<T, Welcome>) return Type::welcome;
  else if constexpr (std::is_same_v<T, Put>) return Type::put;
  else if constexpr (std::is_same_v<T, PutAck>) return Type::put_ack;
  else if constexpr (std::is_same_v<T, Get>) return Type::get;
  else if constexpr (std::is_same_v<T, Data>) return Type::data;
  else if constexpr (std::is_same_v<T, Run>) return Type::run;
  else if constexpr (std::is_same_v<T, Done>) return Type::done;
  else if constexpr (std::is_same_v<T, Free>) return Type::free;
  else if constexpr (std::is_same_v<T, StatsRequest>) return Type::stats;
  else if constexpr (std::is_same_v<T, StatsReply>) return Type::stats_reply;
  else if constexpr (std::is_same_v<T, Ping>) return Type::ping;
  else if constexpr (std::is_same_v<T, Pong>) return Type::pong;
  else if constexpr (std::is_same_v<T, ErrorMessage>) return Type::error;
  else if constexpr (std::is_same_v<T, Bye>) return Type::bye;
  else if constexpr (std::is_same_v<T, DefineKernel>) return Type::define_kernel;
  else if constexpr (std::is_same_v<T, GrantRead>) return Type::grant;
  else if constexpr (std::is_same_v<T, Fetch>)
    return Type::fetch;
  else {
    static_assert(std::is_same_v<T, Claim>, "a Message alternative without a Type");
    return Type::claim;
  }
}

// Type's values follow the variant's alternatives (index + 1), so a Type
// added or moved on one side only fails to compile instead of mislabelling.
template <std::size_t... I>
constexpr bool alternatives_in_type_order(std::index_sequence<I...>) {
  return ((static_cast<std::size_t>(type_for<std::variant_alternative_t<I, Message>>()) == I + 1) && ...);
}
static_assert(alternatives_in_type_order(std::make_index_sequence<std::variant_size_v<Message>>{}));

}  // namespace

Type type_of(const Message& message) noexcept {
  return std::visit([](const auto& m) { return type_for<std::decay_t<decltype(m)>>(); }, message);
}

}  // namespace ferry::protocol
