// libFuzzer target for the one place a peer's reply meets the request it
// names: transport::RpcClient::complete (docs/security.md, "What a peer's
// reply may carry"). The input plays a lying peer. It issues gets (of N
// bytes into a buffer with guard bytes on both sides) and pings, then
// delivers replies: raw header bytes, well-formed messages of its choosing
// (type, request id, status, payload size and bytes), or well-formed ones
// with a byte flipped, each decoded and dispatched exactly as ferryd's fetch
// (peer_fetch.cpp, on_reply) or the runtime's client (remote_device.cpp,
// RemoteDevice::on_message) does; a payload arrives at once or later, or
// fails; the connection fails everything at random points. Run through
// run_reply_fuzzer.sh.
//
// What must hold, whatever the peer sends (a violation aborts: a finding):
// - Incoming::into is only called with a destination a request gave, for a
//   data reply with status ok that names that request and carries exactly
//   the bytes it asked for; once per reply;
// - the guard bytes never change, and a destination holds its first bytes
//   or those of a payload that was let in, nothing else;
// - a get that completes with data received its bytes (none left stale),
//   and a value answers the request that waited for it;
// - every future becomes ready exactly once (a second answer throws in
//   std::promise), with a value or a RemoteError, and none is left waiting
//   after a last fail_all.
//
// FERRY_FUZZ_SEED_DIR=dir ./reply_fuzzer writes a few seed inputs into dir
// and exits, so the seeds always match this harness's reading of its input.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ferry/allocator/small_objects.hpp"
#include "ferry/error.hpp"
#include "ferry/transport/connection.hpp"
#include "ferry/transport/protocol.hpp"
#include "ferry/transport/rpc_client.hpp"

// The small-object pool (allocator/) is left out of this build: plain
// malloc, so ASan sees every request slot RpcClient makes and frees.
namespace ferry {
void* small_object_allocate(std::size_t bytes, std::size_t alignment) {
  if (alignment > alignof(std::max_align_t)) std::abort();  // none of RpcClient's objects
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void small_object_deallocate(void* ptr, std::size_t) noexcept { std::free(ptr); }
}  // namespace ferry

namespace {

using namespace ferry;
using transport::RpcClient;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "reply_fuzzer: %s\n", what);
  std::abort();
}

void check(bool ok, const char* what) {
  if (!ok) finding(what);
}

// The input, read from the front; zeros once it runs out, so every input
// is a complete sequence (seeds are written in the same order).
class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> in) : in_(in) {}
  bool empty() const { return at_ >= in_.size(); }
  std::uint8_t u8() { return at_ < in_.size() ? in_[at_++] : 0; }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= std::uint64_t{u8()} << (8 * i);
    return v;
  }
  std::vector<std::byte> bytes(std::size_t n) {
    std::vector<std::byte> out(n, std::byte{0x5a});
    for (auto& b : out) {
      if (empty()) break;
      b = std::byte{u8()};
    }
    return out;
  }

 private:
  std::span<const std::uint8_t> in_;
  std::size_t at_ = 0;
};

enum Op : std::uint8_t { get, ping, reply, raw, flipped, finish, fail_all, toggle, op_count };
enum Delivery : std::uint8_t { at_once, later, delivery_count };
constexpr std::size_t guard = 32;
constexpr std::size_t max_get = 300;
constexpr std::size_t max_payload = 600;
constexpr std::size_t max_requests = 64;
// FERRY_FUZZ_STRICT_LIFETIME=1: a payload that lands after its request's
// future is ready is a finding too. Off by default, because RpcClient does
// it by design: fail_all fails a request whose payload is still arriving
// (a peer that died mid-payload never completes that receive), so its
// caller must keep dest alive until the receive ends (PeerFetches holds the
// replica until its connection's flush). The seed get_late shows it.
const bool strict_lifetime = std::getenv("FERRY_FUZZ_STRICT_LIFETIME") != nullptr;

struct Request {
  std::uint64_t id = 0;
  bool get = false;
  std::size_t bytes = 0;
  std::vector<std::byte> memory;    // guard, dest, guard
  std::vector<std::byte> expected;  // what dest must hold: its first bytes or a payload let in
  bool landed = false;
  std::future<protocol::Message> future;

  std::byte* dest() { return memory.data() + guard; }
  bool ready() const { return future.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
};

std::byte pattern(std::size_t i) { return std::byte(static_cast<std::uint8_t>(0xa5 ^ (i * 7))); }

// A payload that was let in and is still arriving (Incoming::into called,
// `done` not yet).
struct Arriving {
  Request* request;
  std::vector<std::byte> payload;
  std::function<void(const std::string&)> done;
};

class FakeConnection final : public transport::Connection {
 public:
  bool fail_sends = false;
  void send(std::vector<std::byte>, const void*, std::size_t, std::function<void(const std::string&)> done) override {
    if (!done) return;
    if (closed_) done("fuzz: the connection is closed");
    else if (fail_sends) done("fuzz: the send failed");
    else done("");
  }
  void set_handlers(MessageHandler, ErrorHandler) override {}
  void flush(std::function<void(const std::string&)> done) override { done(""); }
  void close() override { closed_ = true; }
  void close_after_goodbye() override { closed_ = true; }
  void abort() override { closed_ = true; }
  bool closed() const noexcept override { return closed_; }
  std::string peer() const override { return "fuzz-peer"; }
  bool encrypted() const noexcept override { return false; }

 private:
  bool closed_ = false;
};

class Harness;

// A reply as a transport hands it over. into() is where a lying peer would
// write: it checks that RpcClient let in only what the request asked for.
class FakeIncoming final : public transport::Incoming {
 public:
  FakeIncoming(Harness& h, std::vector<std::byte> header, std::vector<std::byte> payload, Delivery delivery)
      : h_(h), header_(std::move(header)), payload_(std::move(payload)), delivery_(delivery) {}
  std::span<const std::byte> header() const noexcept override { return header_; }
  std::size_t payload_bytes() const noexcept override { return payload_.size(); }
  void into(void* dest, std::function<void(const std::string& error)> done) override;

 private:
  Harness& h_;
  std::vector<std::byte> header_;
  std::vector<std::byte> payload_;
  Delivery delivery_;
  bool taken_ = false;
};

class Harness {
 public:
  explicit Harness(bool as_fetch) : as_fetch_(as_fetch) {}

  void run(Reader& in) {
    connection_->fail_sends = (in.u8() & 1) != 0;
    while (!in.empty()) step(in);
    rpc_.fail_all("fuzz: the end");
    for (auto& r : requests_) check(r.ready(), "a request is still waiting after fail_all");
    // Payloads still arriving complete now, after their requests failed:
    // their promises must not be answered a second time.
    while (!arriving_.empty()) land(0, true);
    for (auto& r : requests_) verify(r);
  }

  Request* request_at(void* dest) {
    for (auto& r : requests_)
      if (r.get && r.dest() == dest) return &r;
    return nullptr;
  }
  // The reply whose payload is being delivered, as decoded.
  const protocol::Message* current() const { return current_ ? &*current_ : nullptr; }
  void arrive(Request& r, std::vector<std::byte> payload, std::function<void(const std::string&)> done,
              Delivery delivery) {
    arriving_.push_back({&r, std::move(payload), std::move(done)});
    if (delivery == at_once) land(arriving_.size() - 1, true);
  }

 private:
  void step(Reader& in) {
    switch (static_cast<Op>(in.u8() % op_count)) {
      case get: return issue(in, true);
      case ping: return issue(in, false);
      case reply: return deliver(in, well_formed(in));
      case raw: {
        auto header = in.bytes(in.u8() % 80);
        return deliver(in, std::move(header));
      }
      case flipped: {
        auto header = well_formed(in);
        const std::uint8_t at = in.u8(), mask = in.u8();
        if (!header.empty()) header[at % header.size()] ^= std::byte(mask | 1);
        return deliver(in, std::move(header));
      }
      case finish: {
        const std::uint8_t which = in.u8();
        if (!arriving_.empty()) land((which >> 1) % arriving_.size(), (which & 1) == 0);
        return;
      }
      case fail_all: return rpc_.fail_all("fuzz: the connection failed");
      case toggle:
        if (in.u8() & 1) connection_->close();
        else connection_->fail_sends = !connection_->fail_sends;
        return;
      case op_count: break;
    }
  }

  void issue(Reader& in, bool is_get) {
    if (requests_.size() == max_requests) return;
    auto& r = requests_.emplace_back();
    r.id = rpc_.next_id();
    r.get = is_get;
    r.bytes = is_get ? in.u16() % (max_get + 1) : 0;
    r.memory.resize(guard + r.bytes + guard);
    for (std::size_t i = 0; i < r.memory.size(); ++i) r.memory[i] = pattern(i);
    r.expected.assign(r.dest(), r.dest() + r.bytes);
    if (is_get)
      r.future = rpc_.request(connection_, r.id, protocol::Get{.request = r.id, .buffer = 1, .offset = 0, .length = r.bytes},
                              nullptr, 0, RpcClient::Destination{r.dest(), r.bytes});
    else
      r.future = rpc_.request(connection_, r.id, protocol::Ping{.request = r.id});
  }

  // The request id a reply names: mostly one that was issued.
  std::uint64_t target(Reader& in, std::size_t* asked) {
    const std::uint8_t pick = in.u8();
    if (pick < 0xf0 && !requests_.empty()) {
      auto& r = requests_[pick % requests_.size()];
      *asked = r.bytes;
      return r.id;
    }
    *asked = in.u8() % (max_get + 1);
    return in.u8() % 8;  // 0 included: never issued
  }

  std::vector<std::byte> well_formed(Reader& in) {
    std::size_t asked = 0;
    const std::uint64_t id = target(in, &asked);
    const std::uint8_t s = in.u8();
    const auto status = s < 0x80 ? protocol::Status::ok : static_cast<protocol::Status>(s % 14);
    std::string text(in.u8() % 4, 'm');
    protocol::Message m;
    switch (in.u8() % 9) {
      case 0: m = protocol::Data{.request = id, .buffer = 1, .offset = 0, .status = status, .message = text}; break;
      case 1: m = protocol::Pong{.request = id}; break;
      case 2: m = protocol::Done{.request = id, .status = status, .seconds = 0, .result = {}, .message = text}; break;
      case 3: m = protocol::PutAck{.request = id, .buffer = 1, .status = status, .message = text}; break;
      case 4: m = protocol::StatsReply{.request = id}; break;
      case 5: m = protocol::ErrorMessage{.status = status, .message = text}; break;
      case 6: m = protocol::Bye{.status = status, .message = text}; break;
      case 7: m = protocol::Ping{.request = id}; break;
      default: m = protocol::Get{.request = id, .buffer = 1, .offset = 0, .length = asked}; break;
    }
    // The payload's size: what the named request asked for, one off either
    // way, none, or anything.
    switch (in.u8() % 5) {
      case 0: payload_bytes_ = asked; break;
      case 1: payload_bytes_ = asked == 0 ? 0 : asked - 1; break;
      case 2: payload_bytes_ = asked + 1; break;
      case 3: payload_bytes_ = 0; break;
      default: payload_bytes_ = in.u16() % (max_payload + 1); break;
    }
    sized_ = true;
    return protocol::encode(m);
  }

  void deliver(Reader& in, std::vector<std::byte> header) {
    const std::size_t bytes = sized_ ? payload_bytes_ : in.u16() % (max_payload + 1);
    sized_ = false;
    auto payload = in.bytes(bytes);
    const auto delivery = static_cast<Delivery>(in.u8() % delivery_count);
    FakeIncoming incoming(*this, std::move(header), std::move(payload), delivery);
    dispatch(incoming);
    current_.reset();
  }

  // As on_reply (ferryd's fetch) or RemoteDevice::on_message (the client)
  // do it; what they do besides (logging, reconnecting) is left out.
  void dispatch(transport::Incoming& incoming) {
    protocol::Message message;
    try {
      message = protocol::decode(incoming.header());
    } catch (const ProtocolError&) {
      return lost();
    }
    current_ = message;
    if (as_fetch_) {
      if (const auto* data = std::get_if<protocol::Data>(&message)) {
        if (!rpc_.complete(data->request, message, incoming).broken.empty()) connection_->close();
      } else if (std::holds_alternative<protocol::ErrorMessage>(message) ||
                 std::holds_alternative<protocol::Bye>(message)) {
        rpc_.fail_all("fuzz: it refused or closed");
      }
      return;
    }
    std::visit(
        [&](auto& m) {
          using M = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<M, protocol::Data> || std::is_same_v<M, protocol::PutAck> ||
                        std::is_same_v<M, protocol::Done> || std::is_same_v<M, protocol::Pong> ||
                        std::is_same_v<M, protocol::StatsReply>) {
            if (!rpc_.complete(m.request, message, incoming).broken.empty()) lost();
          } else if constexpr (std::is_same_v<M, protocol::ErrorMessage>) {
            if (!rpc_.complete(0, message, incoming).matched) lost();
          } else if constexpr (std::is_same_v<M, protocol::Bye>) {
            lost();
          }
        },
        message);
  }

  void lost() {
    connection_->close();
    rpc_.fail_all("fuzz: the peer is lost");
  }

  // The arriving payload at `index` completes: its bytes land and `done`
  // says so, or the receive fails (nothing lands).
  void land(std::size_t index, bool ok) {
    Arriving a = std::move(arriving_[index]);
    arriving_.erase(arriving_.begin() + static_cast<std::ptrdiff_t>(index));
    if (ok) {
      // Landing after its request failed (fail_all does not wait for a
      // payload under way): the caller may have let go of dest by now.
      if (strict_lifetime && a.request->ready()) finding("a payload lands after its request failed");
      std::memcpy(a.request->dest(), a.payload.data(), a.payload.size());
      a.request->expected = a.payload;
      a.request->landed = true;
      a.done("");
    } else {
      a.done("fuzz: the receive failed");
    }
  }

  void verify(Request& r) {
    for (std::size_t i = 0; i < guard; ++i) {
      check(r.memory[i] == pattern(i), "a guard byte before a destination changed");
      const std::size_t after = guard + r.bytes + i;
      check(r.memory[after] == pattern(after), "a guard byte after a destination changed");
    }
    check(r.bytes == 0 || std::memcmp(r.dest(), r.expected.data(), r.bytes) == 0,
          "a destination holds bytes no reply was let in with");
    protocol::Message value;
    try {
      value = r.future.get();
    } catch (const RemoteError&) {
      return;
    } catch (...) {
      finding("a request failed with something other than RemoteError (its slot dropped unanswered?)");
    }
    std::visit(
        [&](auto& m) {
          if constexpr (requires { m.request; }) check(m.request == r.id, "a request completed with another's reply");
          else finding("a request completed with a reply that names no request");
        },
        value);
    // A get may complete with a refusal (any reply without a payload: its
    // caller reads why); data with status ok only once its bytes landed.
    const auto* data = std::get_if<protocol::Data>(&value);
    if (r.get && data != nullptr && data->status == protocol::Status::ok)
      check(r.bytes == 0 || r.landed, "a get completed with data without its bytes (stale bytes counted as data)");
    else
      check(!r.landed, "a request that took a payload completed with a reply that carries none");
  }

  const bool as_fetch_;
  RpcClient rpc_{"fuzz-peer"};
  std::shared_ptr<FakeConnection> connection_ = std::make_shared<FakeConnection>();
  std::deque<Request> requests_;  // a deque: a request's address stays put
  std::vector<Arriving> arriving_;
  std::optional<protocol::Message> current_;
  std::size_t payload_bytes_ = 0;
  bool sized_ = false;
};

void FakeIncoming::into(void* dest, std::function<void(const std::string& error)> done) {
  check(!taken_, "into() called twice for one reply");
  taken_ = true;
  Request* r = h_.request_at(dest);
  check(r != nullptr, "into() with a destination no get gave");
  check(r->bytes == payload_.size(), "into() with a destination that does not hold exactly the payload");
  const protocol::Message* m = h_.current();
  const auto* data = m ? std::get_if<protocol::Data>(m) : nullptr;
  check(data != nullptr && data->status == protocol::Status::ok, "into() for a reply that is not data with status ok");
  check(data->request == r->id, "into() with the destination of another request");
  check(!r->landed, "into() twice for one request");
  h_.arrive(*r, std::move(payload_), std::move(done), delivery_);
}

// Seeds, in the Reader's order.
struct Writer {
  std::vector<std::uint8_t> out;
  Writer& u8(std::uint8_t v) { return out.push_back(v), *this; }
  Writer& u16(std::uint16_t v) { return u8(v & 0xff).u8(v >> 8); }
  Writer& fill(std::size_t n, std::uint8_t v) { return out.insert(out.end(), n, v), *this; }
  // op reply: target request `pick`, status byte, text length, type, size rule.
  Writer& reply(std::uint8_t pick, std::uint8_t status, std::uint8_t type, std::uint8_t size_rule) {
    return u8(reply_op).u8(pick).u8(status).u8(0).u8(type).u8(size_rule);
  }
  static constexpr std::uint8_t reply_op = Op::reply;
};

void write_seeds(const std::string& dir) {
  std::vector<std::pair<std::string, std::vector<std::uint8_t>>> seeds;
  {  // a get of 16 bytes answered right, at once (client side)
    Writer w;
    w.u8(0).u8(0).u8(get).u16(16).reply(0, 0, 0, 0).fill(16, 0x11).u8(at_once);
    seeds.emplace_back("get_exact", w.out);
  }
  {  // one byte too many, then one too few (fetch side)
    Writer w;
    w.u8(1).u8(0).u8(get).u16(16).u8(get).u16(8).reply(0, 0, 0, 2).fill(17, 0x22).u8(at_once);
    w.reply(1, 0, 0, 1).fill(7, 0x33).u8(at_once);
    seeds.emplace_back("get_off_by_one", w.out);
  }
  {  // a payload arriving when everything fails, then landing
    Writer w;
    w.u8(0).u8(0).u8(get).u16(32).reply(0, 0, 0, 0).fill(32, 0x44).u8(later).u8(fail_all).u8(finish).u8(0);
    seeds.emplace_back("get_late", w.out);
  }
  {  // a ping answered by a pong with a payload, and by data; a refusal
    Writer w;
    w.u8(0).u8(0).u8(ping).reply(0, 0, 1, 4).u16(5).fill(5, 0x55).u8(at_once);
    w.u8(ping).reply(1, 0, 0, 0).u8(at_once).reply(1, 0x80, 5, 3).u8(at_once);
    seeds.emplace_back("ping_payload", w.out);
  }
  {  // a refused get (status not ok) carrying the bytes anyway; raw garbage
    Writer w;
    w.u8(1).u8(0).u8(get).u16(4).reply(0, 0x84, 0, 0).fill(4, 0x66).u8(at_once);
    w.u8(raw).u8(4).fill(4, 0xff).u16(0).u8(at_once);
    seeds.emplace_back("refused_with_bytes", w.out);
  }
  for (const auto& [name, bytes] : seeds) {
    const std::string path = dir + "/" + name;
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
      std::perror(path.c_str());
      std::exit(1);
    }
    std::fclose(f);
  }
  std::printf("wrote %zu seeds\n", seeds.size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("FERRY_FUZZ_SEED_DIR")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Reader in({data, size});
  Harness harness((in.u8() & 1) != 0);
  harness.run(in);
  return 0;
}
