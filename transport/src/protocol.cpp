// The wire encoding of docs/protocol.md. One field list per message,
// fields(io, message), drives both the encoder and the decoder, so the two
// cannot disagree on layout; the checks that span fields (shapes, ranges)
// run on both sides, so whatever encode() produces decode() accepts.
#include <bit>
#include <concepts>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "ferry/error.hpp"
#include "ferry/transport/protocol.hpp"

namespace ferry::protocol {
namespace {

constexpr std::size_t frame_bytes = 4 + 2 + 2 + 4;  // magic, version, type, body_length
constexpr std::uint16_t last_type = static_cast<std::uint16_t>(Type::claim);

template <class E>
constexpr E last_value() noexcept;
template <>
constexpr Status last_value<Status>() noexcept { return Status::busy; }
template <>
constexpr DType last_value<DType>() noexcept { return DType::c128; }
template <>
constexpr Mode last_value<Mode>() noexcept { return Mode::readwrite; }
template <>
constexpr RunArg::Kind last_value<RunArg::Kind>() noexcept { return RunArg::Kind::text; }
template <>
constexpr Privacy last_value<Privacy>() noexcept { return Privacy::plaintext; }
template <>
constexpr Lane last_value<Lane>() noexcept { return Lane::bulk; }

template <class E>
constexpr bool in_range(E value) noexcept {
  return static_cast<std::underlying_type_t<E>>(value) <= static_cast<std::underlying_type_t<E>>(last_value<E>());
}


// Where a problem is, as "type.field" or "run.args[3].field", so a log line
// alone says what the peer got wrong.
class Location {
 public:
  explicit Location(Type type) : type_(type) {}
  void enter_arg(std::size_t index, const char* list = "args") noexcept {
    arg_ = index;
    list_ = list;
  }
  void leave_arg() noexcept { arg_ = no_arg; }

  [[noreturn]] void fail(const char* field, const std::string& what) const {
    std::string text = prefix_;
    text += to_string(type_);
    if (arg_ != no_arg) text += std::string(".") + list_ + "[" + std::to_string(arg_) + "]";
    if (*field != '\0') {
      text += '.';
      text += field;
    }
    text += ": ";
    text += what;
    throw ProtocolError(text);
  }

 protected:
  explicit Location(Type type, const char* prefix) : type_(type), prefix_(prefix) {}

 private:
  static constexpr std::size_t no_arg = std::numeric_limits<std::size_t>::max();
  Type type_;
  const char* prefix_ = "";
  const char* list_ = "args";
  std::size_t arg_ = no_arg;
};

// ---- checks that span fields, shared by encode and decode ----

template <class M>
void check(const M&, const Location&) {}

void check(const Hello& m, const Location& at) {
  if (m.min_version > m.max_version)
    at.fail("min_version", std::to_string(m.min_version) + " above max_version " + std::to_string(m.max_version));
  if (m.aes_gcm > 1) at.fail("aes_gcm", std::to_string(m.aes_gcm) + " (must be 0 or 1)");
}

// The bytes of a rows x cols replica of dtype; fails when that overflows
// or exceeds max_buffer_bytes.
std::uint64_t shape_bytes(DType dtype, std::uint64_t rows, std::uint64_t cols, const Location& at) {
  // A shape whose size wraps around would let a small allocation be indexed
  // as a huge one, so the product is checked before anyone multiplies it.
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  if (cols != 0 && rows > max / cols)
    at.fail("rows*cols", std::to_string(rows) + " x " + std::to_string(cols) + " overflows");
  const std::uint64_t elements = rows * cols;
  const std::uint64_t elem = size_of(dtype);
  if (elements > max / elem)
    at.fail("rows*cols", std::to_string(elements) + " elements of " + std::to_string(elem) + " bytes overflows");
  const std::uint64_t bytes = elements * elem;
  if (bytes > max_buffer_bytes)
    at.fail("rows*cols", std::to_string(bytes) + " bytes (at most " + std::to_string(max_buffer_bytes) + ")");
  return bytes;
}

// A non-empty range [offset, offset + length) that does not wrap.
void check_range(std::uint64_t offset, std::uint64_t length, const char* field, const Location& at) {
  if (length == 0) at.fail(field, "an empty range");
  if (length > max_buffer_bytes)
    at.fail(field, std::to_string(length) + " bytes (at most " + std::to_string(max_buffer_bytes) + ")");
  if (offset > max_buffer_bytes - length)
    at.fail(field, std::to_string(offset) + " + " + std::to_string(length) + " lies beyond " +
                       std::to_string(max_buffer_bytes) + " bytes");
}

void check(const GrantRead& m, const Location& at) {
  check_range(m.offset, m.length, "offset+length", at);
  if (m.lifetime_ms == 0 || m.lifetime_ms > max_grant_ms)
    at.fail("lifetime_ms", std::to_string(m.lifetime_ms) + " (1 to " + std::to_string(max_grant_ms) + ")");
}

void check(const Fetch& m, const Location& at) {
  const std::uint64_t bytes = shape_bytes(m.dtype, m.rows, m.cols, at);
  check_range(m.offset, m.length, "offset+length", at);
  if (m.offset + m.length > bytes)
    at.fail("offset+length", std::to_string(m.offset) + " + " + std::to_string(m.length) + " beyond the replica's " +
                                 std::to_string(bytes) + " bytes");
  check_range(m.source_offset, m.length, "source_offset+length", at);
  if (m.source.empty()) at.fail("source", "empty (host:port)");
}

void check(const Put& m, const Location& at) {
  const std::uint64_t bytes = shape_bytes(m.dtype, m.rows, m.cols, at);
  if (m.offset > bytes)
    at.fail("offset", std::to_string(m.offset) + " beyond the replica's " + std::to_string(bytes) + " bytes");
}

void check(const Get& m, const Location& at) {
  if (m.length > std::numeric_limits<std::uint64_t>::max() - m.offset)
    at.fail("offset+length", std::to_string(m.offset) + " + " + std::to_string(m.length) + " overflows");
  if (m.length > max_buffer_bytes)
    at.fail("length", std::to_string(m.length) + " bytes (at most " + std::to_string(max_buffer_bytes) + ")");
}

void check(const Challenge& m, const Location& at) {
  if (m.cipher > 1) at.fail("cipher", std::to_string(m.cipher) + " (0 or 1)");
}

void check(const Welcome& m, const Location& at) {
  if (m.encrypted > 1) at.fail("encrypted", std::to_string(m.encrypted) + " (must be 0 or 1)");
}

void check(const DefineKernel& m, const Location& at) {
  if (m.source_bytes > max_source_bytes)
    at.fail("source_bytes", std::to_string(m.source_bytes) + " bytes (at most " + std::to_string(max_source_bytes) + ")");
}

// ---- the field lists ----

template <class T, class U>
concept Is = std::same_as<std::remove_const_t<T>, U>;

template <class IO, Is<Hello> M>
void fields(IO& io, M& m) {
  io("min_version", m.min_version);
  io("max_version", m.max_version);
  io("client", m.client);
  io("privacy", m.privacy);
  io("exchange", m.exchange);
  io("identity", m.identity);
  io("aes_gcm", m.aes_gcm);
  io("lane", m.lane);
  io("pid", m.pid);
}
template <class IO, Is<Challenge> M>
void fields(IO& io, M& m) {
  io("version", m.version);
  io("nonce", m.nonce);
  io("exchange", m.exchange);
  io("host_key", m.host_key);
  io("cipher", m.cipher);
  io("signature", m.signature);
  io("pid", m.pid);
}
template <class IO, Is<Auth> M>
void fields(IO& io, M& m) {
  io("mac", m.mac);
  io("signature", m.signature);
  io("worker_address", m.worker_address);
  io("network_address", m.network_address);
}
template <class IO, Is<Welcome> M>
void fields(IO& io, M& m) {
  io("server", m.server);
  io("memory_quota", m.memory_quota);
  io("cpu_workers", m.cpu_workers);
  io("gpus", m.gpus);
  io("max_payload", m.max_payload);
  io("mac", m.mac);
  io("encrypted", m.encrypted);
  io("worker_address", m.worker_address);
  io("kernels", m.kernels, max_names);
  io("devices", m.devices, max_names);
  io("device_key", m.device_key);
  io("peak_flops", m.peak_flops);
  io("peak_bytes", m.peak_bytes);
  io("lane", m.lane);
  io("network_address", m.network_address);
}
template <class IO, Is<Put> M>
void fields(IO& io, M& m) {
  io("request", m.request);
  io("buffer", m.buffer);
  io("dtype", m.dtype);
  io("rows", m.rows);
  io("cols", m.cols);
  io("offset", m.offset);
}
template <class IO, Is<PutAck> M>
void fields(IO& io, M& m) {
  io("request", m.request);
  io("buffer", m.buffer);
  io("status", m.status);
  io("message", m.message);
}
template <class IO, Is<Get> M>
void fields(IO& io, M& m) {
  io("request", m.request);
  io("buffer", m.buffer);
  io("offset", m.offset);
  io("length", m.length);
  io("capability", m.under);
}
template <class IO, Is<Data> M>
void fields(IO& io, M& m) {
  io("request", m.request);
  io("buffer", m.buffer);
  io("offset", m.offset);
  io("status", m.status);
  io("message", m.message);
}
// Only the kind's own fields travel: the others would be noise a decoder
// has to ignore, and a canonical encoding keeps re-encoding byte-exact.
template <class IO, Is<RunArg> M>
void fields(IO& io, M& m) {
  io("kind", m.kind);
  switch (m.kind) {
    case RunArg::Kind::buffer:
      io("buffer", m.buffer);
      io("mode", m.mode);
      break;
    case RunArg::Kind::real: io("real", m.real); break;
    case RunArg::Kind::integer: io("integer", m.integer); break;
    case RunArg::Kind::text: io("text", m.text); break;
  }
}
template <class IO, Is<Run> M>
void fields(IO& io, M& m) {
  io("request", m.request);
  io("kernel", m.kernel);
  io("task", m.task);
  io("args", m.args);
  io("after", m.after);
}
template <class IO, Is<Done> M>
void fields(IO& io, M& m) {
  io("request", m.request);
  io("status", m.status);
  io("seconds", m.seconds);
  io("result", m.result);
  io("message", m.message);
}
template <class IO, Is<Free> M>
void fields(IO& io, M& m) {
  io("buffer", m.buffer);
}
template <class IO, Is<StatsRequest> M>
void fields(IO& io, M& m) {
  io("request", m.request);
}
template <class IO, Is<StatsReply> M>
void fields(IO& io, M& m) {
  io("request", m.request);
  io("bytes_in", m.bytes_in);
  io("bytes_out", m.bytes_out);
  io("tasks", m.tasks);
  io("replicas", m.replicas);
  io("memory_in_use", m.memory_in_use);
}
template <class IO, Is<Ping> M>
void fields(IO& io, M& m) {
  io("request", m.request);
}
template <class IO, Is<Pong> M>
void fields(IO& io, M& m) {
  io("request", m.request);
}
template <class IO, Is<ErrorMessage> M>
void fields(IO& io, M& m) {
  io("status", m.status);
  io("message", m.message);
}
template <class IO, Is<Bye> M>
void fields(IO& io, M& m) {
  io("status", m.status);
  io("message", m.message);
}
template <class IO, Is<DefineKernel> M>
void fields(IO& io, M& m) {
  io("request", m.request);
  io("name", m.name);
  io("entry", m.entry);
  io("options", m.options);
  io("writes", m.writes);
  io("source_bytes", m.source_bytes);
}
template <class IO, Is<GrantRead> M>
void fields(IO& io, M& m) {
  io("request", m.request);
  io("capability", m.capability);
  io("secret", m.secret);
  io("reader", m.reader);
  io("buffer", m.buffer);
  io("offset", m.offset);
  io("length", m.length);
  io("lifetime_ms", m.lifetime_ms);
}
template <class IO, Is<Fetch> M>
void fields(IO& io, M& m) {
  io("request", m.request);
  io("buffer", m.buffer);
  io("dtype", m.dtype);
  io("rows", m.rows);
  io("cols", m.cols);
  io("offset", m.offset);
  io("length", m.length);
  io("source", m.source);
  io("host_key", m.host_key);
  io("capability", m.capability);
  io("secret", m.secret);
  io("source_buffer", m.source_buffer);
  io("source_offset", m.source_offset);
}
template <class IO, Is<Claim> M>
void fields(IO& io, M& m) {
  io("request", m.request);
  io("capability", m.capability);
  io("mac", m.mac);
}

// ---- encoding ----

// Byte by byte, so the layout is little-endian on any host; compilers fold
// the shifts into one store where the host is little-endian already.
template <std::unsigned_integral T>
void append_le(std::vector<std::byte>& out, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<std::byte>(value >> (8 * i)));
}

// Refuses to produce what a decoder would reject, so a bug on the sending
// side shows up at the sender with the field named, not as a fatal
// "malformed" from the peer.
class Writer : public Location {
 public:
  explicit Writer(Type type) : Location(type, "cannot encode ") {
    out_.reserve(128);  // a run of a few arguments: one allocation
    append_le(out_, magic);
    append_le(out_, version);
    append_le(out_, static_cast<std::uint16_t>(type));
    append_le(out_, std::uint32_t{0});  // body_length, patched by finish()
  }

  template <std::unsigned_integral T>
  void operator()(const char*, T value) { append_le(out_, value); }
  void operator()(const char*, std::int64_t value) { append_le(out_, static_cast<std::uint64_t>(value)); }
  void operator()(const char*, double value) { append_le(out_, std::bit_cast<std::uint64_t>(value)); }

  template <class E>
    requires std::is_enum_v<E>
  void operator()(const char* field, E value) {
    if (!in_range(value))
      fail(field, "unknown value " + std::to_string(static_cast<std::underlying_type_t<E>>(value)));
    append_le(out_, static_cast<std::underlying_type_t<E>>(value));
  }

  void operator()(const char* field, const std::string& text) {
    if (text.size() > max_string_bytes)
      fail(field, std::to_string(text.size()) + " bytes (at most " + std::to_string(max_string_bytes) + ")");
    append_le(out_, static_cast<std::uint32_t>(text.size()));
    const auto* bytes = reinterpret_cast<const std::byte*>(text.data());
    out_.insert(out_.end(), bytes, bytes + text.size());
  }

  template <std::size_t N>
  void operator()(const char*, const std::array<std::uint8_t, N>& raw) {
    for (std::uint8_t b : raw) out_.push_back(static_cast<std::byte>(b));
  }

  void operator()(const char* field, const Bytes& raw) {
    if (raw.size() > max_address_bytes)
      fail(field, std::to_string(raw.size()) + " bytes (at most " + std::to_string(max_address_bytes) + ")");
    append_le(out_, static_cast<std::uint32_t>(raw.size()));
    for (std::uint8_t b : raw) out_.push_back(static_cast<std::byte>(b));
  }

  void operator()(const char* field, const std::optional<double>& value) {
    out_.push_back(static_cast<std::byte>(value.has_value() ? 1 : 0));
    if (value) (*this)(field, *value);
  }

  void operator()(const char* field, const std::vector<RunArg>& args) {
    if (args.size() > max_args)
      fail(field, std::to_string(args.size()) + " arguments (at most " + std::to_string(max_args) + ")");
    append_le(out_, static_cast<std::uint32_t>(args.size()));
    for (std::size_t i = 0; i < args.size(); ++i) {
      enter_arg(i);
      fields(*this, args[i]);
    }
    leave_arg();
  }

  void operator()(const char* field, const std::vector<std::string>& items, std::size_t bound = max_args) {
    if (items.size() > bound)
      fail(field, std::to_string(items.size()) + " items (at most " + std::to_string(bound) + ")");
    append_le(out_, static_cast<std::uint32_t>(items.size()));
    for (std::size_t i = 0; i < items.size(); ++i) {
      enter_arg(i, field);
      (*this)("", items[i]);
    }
    leave_arg();
  }

  // A trailing byte added after version 1 shipped: left out when none, so
  // an older peer still reads the message.
  void operator()(const char* field, Lane lane) {
    if (!in_range(lane)) fail(field, std::to_string(static_cast<unsigned>(lane)) + " is not a lane");
    if (lane != Lane::none) append_le(out_, static_cast<std::uint8_t>(lane));
    lane_left_out_ = lane == Lane::none;
  }

  // A trailing u32 (a hello's after its lane, a challenge's after its
  // signature): left out when 0. In a hello it cannot follow a lane that was
  // left out, whose byte it would be read as.
  void operator()(const char* field, ProcessId pid) {
    if (pid.value == 0) return;
    if (lane_left_out_) fail(field, "a process id needs a lane before it");
    append_le(out_, pid.value);
  }

  // A trailing address (an auth's, a welcome's after its lane): left out
  // when empty. In a welcome it cannot follow a lane that was left out.
  void operator()(const char* field, const NetworkAddress& address) {
    if (address.bytes.empty()) return;
    if (lane_left_out_) fail(field, "a network address needs a lane before it");
    (*this)(field, address.bytes);
  }

  // A trailing u64 (a get's last field): left out when none, so an older
  // peer still reads the message. Any id, 0 included, is written.
  void operator()(const char*, const Under& under) {
    if (under.capability) append_le(out_, *under.capability);
  }

  // A trailing list added after version 1 shipped: left out when empty, so
  // an older peer still reads the message.
  void operator()(const char* field, const std::vector<std::uint64_t>& ids) {
    if (ids.empty()) return;
    if (ids.size() > max_after)
      fail(field, std::to_string(ids.size()) + " ids (at most " + std::to_string(max_after) + ")");
    append_le(out_, static_cast<std::uint32_t>(ids.size()));
    for (std::uint64_t id : ids) append_le(out_, id);
  }

  std::vector<std::byte> finish() && {
    if (out_.size() > max_header_bytes)
      fail("header", std::to_string(out_.size()) + " bytes (at most " + std::to_string(max_header_bytes) + ")");
    const auto body = static_cast<std::uint32_t>(out_.size() - frame_bytes);
    for (std::size_t i = 0; i < 4; ++i) out_[8 + i] = static_cast<std::byte>(body >> (8 * i));
    return std::move(out_);
  }

 private:
  std::vector<std::byte> out_;
  bool lane_left_out_ = false;  // the message's lane byte was left out (none)
};

// ---- decoding ----

// Every read states how many bytes it needs and fails, naming the field,
// when fewer are left; nothing is read past the end of the input.
class Reader : public Location {
 public:
  Reader(Type type, std::span<const std::byte> body) : Location(type), in_(body) {}

  template <std::unsigned_integral T>
  void operator()(const char* field, T& value) { value = uint<T>(field); }
  void operator()(const char* field, std::int64_t& value) {
    value = static_cast<std::int64_t>(uint<std::uint64_t>(field));
  }
  void operator()(const char* field, double& value) { value = std::bit_cast<double>(uint<std::uint64_t>(field)); }

  template <class E>
    requires std::is_enum_v<E>
  void operator()(const char* field, E& value) {
    const auto raw = uint<std::underlying_type_t<E>>(field);
    value = static_cast<E>(raw);
    if (!in_range(value)) fail(field, "unknown value " + std::to_string(raw));
  }

  void operator()(const char* field, std::string& text) {
    const auto size = uint<std::uint32_t>(field);
    if (size > max_string_bytes)
      fail(field, std::to_string(size) + " bytes (at most " + std::to_string(max_string_bytes) + ")");
    const std::byte* bytes = take(field, size);
    text.assign(reinterpret_cast<const char*>(bytes), size);
  }

  template <std::size_t N>
  void operator()(const char* field, std::array<std::uint8_t, N>& raw) {
    std::memcpy(raw.data(), take(field, N), N);
  }

  void operator()(const char* field, Bytes& raw) {
    const auto size = uint<std::uint32_t>(field);
    if (size > max_address_bytes)
      fail(field, std::to_string(size) + " bytes (at most " + std::to_string(max_address_bytes) + ")");
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(take(field, size));
    raw.assign(bytes, bytes + size);
  }

  void operator()(const char* field, std::optional<double>& value) {
    const auto present = uint<std::uint8_t>(field);
    if (present > 1) fail(field, "presence byte " + std::to_string(present) + " (must be 0 or 1)");
    value.reset();
    if (present) {
      double v = 0;
      (*this)(field, v);
      value = v;
    }
  }

  void operator()(const char* field, std::vector<RunArg>& args) {
    const auto count = uint<std::uint32_t>(field);
    if (count > max_args)
      fail(field, std::to_string(count) + " arguments (at most " + std::to_string(max_args) + ")");
    args.assign(count, RunArg{});
    for (std::size_t i = 0; i < count; ++i) {
      enter_arg(i);
      fields(*this, args[i]);
    }
    leave_arg();
  }

  void operator()(const char* field, std::vector<std::string>& items, std::size_t bound = max_args) {
    const auto count = uint<std::uint32_t>(field);
    if (count > bound) fail(field, std::to_string(count) + " items (at most " + std::to_string(bound) + ")");
    items.assign(count, std::string{});
    for (std::size_t i = 0; i < count; ++i) {
      enter_arg(i, field);
      (*this)("", items[i]);
    }
    leave_arg();
  }

  // A trailing byte added after version 1 shipped: a header that ends
  // before it (an older peer) means none.
  void operator()(const char* field, Lane& lane) {
    lane = Lane::none;
    if (left() == 0) return;
    const auto value = uint<std::uint8_t>(field);
    lane = static_cast<Lane>(value);
    // One encoding per message: none is written by leaving the byte out.
    if (lane == Lane::none) fail(field, "0 is written by leaving the field out");
    if (!in_range(lane)) fail(field, std::to_string(value) + " is not a lane");
  }

  // A trailing u32 (a hello's after its lane, a challenge's after its
  // signature): a header that ends before it means none.
  void operator()(const char* field, ProcessId& pid) {
    pid = {};
    if (left() == 0) return;
    pid.value = uint<std::uint32_t>(field);
    if (pid.value == 0) fail(field, "0 is written by leaving the field out");
  }

  // A trailing address (an auth's, a welcome's after its lane): a header
  // that ends before it (an older peer) carries none.
  void operator()(const char* field, NetworkAddress& address) {
    address.bytes.clear();
    if (left() == 0) return;
    (*this)(field, address.bytes);
    if (address.bytes.empty()) fail(field, "an empty address is written by leaving it out");
  }

  // A trailing u64 (a get's last field): a header that ends before it
  // (an older peer, or a client's get) names none.
  void operator()(const char* field, Under& under) {
    under = {};
    if (left() == 0) return;
    under.capability = uint<std::uint64_t>(field);
  }

  // A trailing list added after version 1 shipped: a header that ends
  // before it (an older peer, or an empty list) means none.
  void operator()(const char* field, std::vector<std::uint64_t>& ids) {
    ids.clear();
    if (left() == 0) return;
    const auto count = uint<std::uint32_t>(field);
    // One encoding per message: an empty list is written by leaving it out.
    if (count == 0) fail(field, "an empty list is written by leaving it out");
    if (count > max_after) fail(field, std::to_string(count) + " ids (at most " + std::to_string(max_after) + ")");
    ids.reserve(count);
    for (std::size_t i = 0; i < count; ++i) ids.push_back(uint<std::uint64_t>(field));
  }

  std::size_t left() const noexcept { return in_.size() - pos_; }

 private:
  const std::byte* take(const char* field, std::size_t n) {
    if (n > left())
      fail(field, "truncated (" + std::to_string(n) + " bytes needed, " + std::to_string(left()) + " left)");
    const std::byte* p = in_.data() + pos_;
    pos_ += n;
    return p;
  }

  template <std::unsigned_integral T>
  T uint(const char* field) {
    const std::byte* p = take(field, sizeof(T));
    T value = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(std::to_integer<T>(p[i]) << (8 * i));
    return value;
  }

  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

template <class M>
Message read(Type type, std::span<const std::byte> body) {
  Reader reader(type, body);
  M message;
  fields(reader, message);
  if (reader.left() != 0) reader.fail("body", std::to_string(reader.left()) + " trailing bytes after the last field");
  check(message, reader);
  return message;
}

std::uint64_t load_le(std::span<const std::byte> bytes, std::size_t at, std::size_t size) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < size; ++i) value |= std::to_integer<std::uint64_t>(bytes[at + i]) << (8 * i);
  return value;
}

std::string hex(std::uint64_t value) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string text;
  do {
    text.insert(text.begin(), digits[value & 0xf]);
    value >>= 4;
  } while (value != 0);
  return "0x" + text;
}

[[noreturn]] void frame_error(const std::string& what) { throw ProtocolError("frame." + what); }

}  // namespace

namespace {

template <class M>
std::vector<std::byte> encode_as(Type type, const M& m) {
  Writer writer(type);
  fields(writer, m);  // first, so check() sees only valid enum values
  check(m, writer);
  return std::move(writer).finish();
}

}  // namespace

std::vector<std::byte> encode(const Message& message) {
  return std::visit([&](const auto& m) { return encode_as(type_of(message), m); }, message);
}

std::vector<std::byte> encode(const Run& run) { return encode_as(Type::run, run); }

Message decode(std::span<const std::byte> header) {
  if (header.size() > max_header_bytes)
    frame_error("length: " + std::to_string(header.size()) + " bytes (at most " + std::to_string(max_header_bytes) +
                ")");
  if (header.size() < frame_bytes)
    frame_error("length: " + std::to_string(header.size()) + " bytes, shorter than the " +
                std::to_string(frame_bytes) + "-byte frame");

  const auto got_magic = load_le(header, 0, 4);
  if (got_magic != magic)
    frame_error("magic: " + hex(got_magic) + " is not Ferry's " + hex(magic) + " (\"FRRY\")");
  const auto got_version = load_le(header, 4, 2);
  if (got_version < oldest_version || got_version > version)
    frame_error("version: " + std::to_string(got_version) + ", but this build speaks versions " +
                std::to_string(oldest_version) + " to " + std::to_string(version));
  const auto raw_type = load_le(header, 6, 2);
  if (raw_type < 1 || raw_type > last_type) frame_error("type: unknown message type " + std::to_string(raw_type));
  const auto type = static_cast<Type>(raw_type);
  const auto body_length = load_le(header, 8, 4);
  if (body_length != header.size() - frame_bytes)
    frame_error("body_length: " + std::string(to_string(type)) + " says " + std::to_string(body_length) +
                " bytes, but " + std::to_string(header.size() - frame_bytes) + " follow the frame");

  const auto body = header.subspan(frame_bytes);
  switch (type) {
    case Type::hello: return read<Hello>(type, body);
    case Type::challenge: return read<Challenge>(type, body);
    case Type::auth: return read<Auth>(type, body);
    case Type::welcome: return read<Welcome>(type, body);
    case Type::put: return read<Put>(type, body);
    case Type::put_ack: return read<PutAck>(type, body);
    case Type::get: return read<Get>(type, body);
    case Type::data: return read<Data>(type, body);
    case Type::run: return read<Run>(type, body);
    case Type::done: return read<Done>(type, body);
    case Type::free: return read<Free>(type, body);
    case Type::stats: return read<StatsRequest>(type, body);
    case Type::stats_reply: return read<StatsReply>(type, body);
    case Type::ping: return read<Ping>(type, body);
    case Type::pong: return read<Pong>(type, body);
    case Type::error: return read<ErrorMessage>(type, body);
    case Type::bye: return read<Bye>(type, body);
    case Type::define_kernel: return read<DefineKernel>(type, body);
    case Type::grant: return read<GrantRead>(type, body);
    case Type::fetch: return read<Fetch>(type, body);
    case Type::claim:
      return read<Claim>(type, body);
  }
  frame_error("type: unknown message type " + std::to_string(raw_type));  // unreachable: checked above
}

}  // namespace ferry::protocol
