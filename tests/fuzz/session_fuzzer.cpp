// libFuzzer target for ferryd's sessions past authentication: each input is
// a sequence of requests (puts, gets, runs, frees, kernel definitions,
// stats, pings, and raw headers) that a real client sends over a real UCX
// connection on loopback to a real ferryd server (Server, Session, a
// Runtime with one CPU worker) in this process. After the sequence the
// client pings; for any input, ferryd must answer (or have closed the
// connection with an error), and once the client is gone every byte it
// held must be given back (ServerState::memory_in_use returns to 0). A
// crash, a sanitizer report, a hang or a leak is a finding. Run through
// run_session_fuzzer.sh.
//
// It also plays a lying source for ferryd's fetches (PeerFetches, on, as
// main.cpp turns them on): an in-process BootstrapServer that admits
// ferryd as a capability peer and answers its gets as the input says (the
// data's size exact, one off or none, its status, a stray reply naming
// another request first, or a refusal). After each such fetch the fetching
// client reads its replica back: outside the fetched region it must hold
// what was put there, and inside each byte is what was put or what the
// source sent in a reply that was exactly right (ok, the request's id, the
// bytes asked for); a fetch that succeeded holds the latter only. Another
// client's buffer in the same ferryd must never change.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ferry/allocator/slab_pool.hpp"
#include "ferry/error.hpp"
#include "ferry/runtime/runtime.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/identity.hpp"
#include "fetch_sources.hpp"
#include "metrics.hpp"
#include "peer_fetch.hpp"
#include "server.hpp"
#include "server_state.hpp"
#include "test_client.hpp"

namespace {

using namespace ferry;
namespace proto = ferry::protocol;

constexpr const char* token = "the session fuzzer's token, long enough";

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "session_fuzzer: %s\n", what.c_str());
  std::abort();
}

// One ferryd for the whole run: starting one per input would cost more than the input.
struct Ferryd {
  Runtime runtime{[] {
    Runtime::Options o;
    o.workers = 1;
    o.gpus = "none";
    o.persist_perf_models = false;
    o.read_environment = false;
    return o;
  }()};
  ferryd::Metrics metrics;
  ferryd::ServerState state{transport::Worker::create({"fuzz-ferryd"}), runtime, metrics, "ferryd fuzz", 1,
                            ferryd::Limits{64u << 20, 256u << 20}};
  ferryd::Server server{state, nullptr};
  std::uint16_t port = [this] {
    transport::BootstrapServer::Options options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.token = token;
    // One connection per input, thousands a minute from one address: the
    // front door's flood limit is not what is being fuzzed here.
    options.per_address_rate = 1e6;
    options.per_address_burst = 1e6;
    return server.listen(std::move(options));
  }();
  // Fetches from other hosts on, as main.cpp turns them on (loopback is
  // among the default sources): without them every fetch is refused at once.
  bool fetching = [this] {
    state.fetches = std::make_shared<ferryd::PeerFetches>(
        state.worker, std::dynamic_pointer_cast<SlabPool>(runtime.host_memory()), state.host_key,
        ferryd::FetchSources::parse(ferryd::FetchSources::default_list));
    return true;
  }();

  std::uint64_t memory_in_use() { return state.worker->call([this] { return state.memory_in_use; }); }
};

Ferryd& ferryd_instance() {
  static Ferryd* instance = new Ferryd();  // never destroyed: libFuzzer exits without unwinding
  return *instance;
}

// How the fake source answers one get.
struct Answer {
  enum Size : std::uint8_t { exact, one_less, one_more, none, size_count };
  bool stray = false;  // first a reply naming another request (exact size)
  bool refuse = false;  // an error message instead of data
  proto::Status status = proto::Status::ok;
  Size size = exact;
  std::uint8_t seed = 0;  // the payload's bytes: seed ^ position
};

// A source ferryd fetches from: admits any capability peer that signs in
// with `secret` and ferryd's host key, and answers its gets from a script.
class FakeSource {
 public:
  static constexpr std::uint8_t secret_fill = 7;

  explicit FakeSource(const transport::PublicKey& reader) {
    transport::BootstrapServer::Options options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.host_key = key_;
    options.token = "a token the fake source gives nobody: it admits capability peers only";
    options.per_address_rate = 1e6;
    options.per_address_burst = 1e6;
    options.capability_keys = [reader](std::uint64_t) -> std::optional<transport::CapabilityKeys> {
      return transport::CapabilityKeys{std::string(proto::secret_bytes, char{secret_fill}), reader};
    };
    server_ = std::make_unique<transport::BootstrapServer>(
        worker_, std::move(options), [this](const transport::Peer&, std::shared_ptr<transport::Connection> c) {
          c->set_handlers([this](transport::Connection& c, transport::Incoming& in) { answer(c, in); },
                          [](transport::Connection&, const std::string&) {});
          proto::Welcome welcome;
          welcome.server = "fuzz source";
          std::lock_guard lock(mutex_);
          welcome.max_payload = max_payload_;
          // Held, as a session holds its connection: let go, it would close.
          std::erase_if(connections_, [](const auto& held) { return held->closed(); });
          connections_.push_back(std::move(c));
          return proto::Message(welcome);
        });
  }

  std::uint16_t port() const { return server_->port(); }
  const transport::PublicKey& key() const { return key_.public_key(); }

  // The next fetch: its gets' answers (past them, exact ones), the size the
  // welcome offers. Forgets what was sent before.
  void script(std::deque<Answer> answers, std::uint32_t max_payload) {
    std::lock_guard lock(mutex_);
    answers_ = std::move(answers);
    max_payload_ = max_payload;
    right_.clear();
  }
  // What was sent in exactly right replies, by source offset.
  std::map<std::uint64_t, std::vector<std::byte>> right() {
    std::lock_guard lock(mutex_);
    return right_;
  }

 private:
  void answer(transport::Connection& c, transport::Incoming& in) {
    proto::Message message;
    try {
      message = proto::decode(in.header());
    } catch (const ProtocolError&) {
      return;
    }
    const auto* get = std::get_if<proto::Get>(&message);
    if (get == nullptr) return;  // pings and the like: ferryd sends none
    Answer a;
    {
      std::lock_guard lock(mutex_);
      if (!answers_.empty()) {
        a = answers_.front();
        answers_.pop_front();
      }
    }
    auto send = [&c](const proto::Message& m, std::vector<std::byte> bytes) {
      auto payload = std::make_shared<std::vector<std::byte>>(std::move(bytes));
      c.send(proto::encode(m), payload->empty() ? nullptr : payload->data(), payload->size(),
             [payload](const std::string&) {});
    };
    auto bytes = [&a](std::size_t n) {
      std::vector<std::byte> out(n);
      for (std::size_t i = 0; i < n; ++i) out[i] = std::byte(static_cast<std::uint8_t>(a.seed ^ (i * 13)));
      return out;
    };
    if (a.stray) send(proto::Data{get->request + 1000, get->buffer, get->offset, proto::Status::ok, {}}, bytes(get->length));
    if (a.refuse) return send(proto::ErrorMessage{proto::Status::unknown_buffer, "fuzz source refuses"}, {});
    std::size_t n = get->length;
    if (a.size == Answer::one_less) n = n == 0 ? 0 : n - 1;
    if (a.size == Answer::one_more) n = n + 1;
    if (a.size == Answer::none) n = 0;
    auto payload = bytes(n);
    if (a.status == proto::Status::ok && n == get->length) {
      std::lock_guard lock(mutex_);
      right_[get->offset] = payload;
    }
    send(proto::Data{get->request, get->buffer, get->offset, a.status, {}}, std::move(payload));
  }

  transport::KeyPair key_ = transport::KeyPair::generate();
  std::shared_ptr<transport::Worker> worker_ = transport::Worker::create({"fuzz-source"});
  std::mutex mutex_;
  std::deque<Answer> answers_;
  std::uint32_t max_payload_ = 64;
  std::map<std::uint64_t, std::vector<std::byte>> right_;
  std::vector<std::shared_ptr<transport::Connection>> connections_;
  std::unique_ptr<transport::BootstrapServer> server_;  // last: stopped first
};

FakeSource& source_instance() {
  static FakeSource* instance = new FakeSource(ferryd_instance().state.host_key->public_key());
  return *instance;
}

// The reply to `request` (a put ack, data, ...); the replies to earlier
// fire-and-forget requests before it are passed over. Throws when the
// connection closed or none came in time.
test::Received reply_to(test::TestClient& client, std::uint64_t request,
                        std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    test::Received r;
    try {
      r = client.next(std::chrono::milliseconds(100));
    } catch (const std::runtime_error&) {
      if (client.wait_closed(std::chrono::milliseconds(0))) throw;
      continue;
    }
    bool match = false;
    std::visit(
        [&](const auto& m) {
          if constexpr (requires { m.request; }) match = m.request == request;
        },
        r.message);
    if (match) return r;
  }
  finding("ferryd did not answer request " + std::to_string(request) + " in time");
}

// Another client's buffer beside the fetches: it must never change.
struct Bystander {
  static constexpr std::uint64_t buffer = 1;
  static constexpr std::size_t bytes = 4096;
  test::TestClient client{ferryd_instance().port, "fuzz-bystander"};
  std::vector<std::byte> held = std::vector<std::byte>(bytes, std::byte{0xc3});

  Bystander() {
    client.authenticate(token);
    if (client.put(buffer, proto::DType::u8, 1, bytes, held.data(), held.size()).status != proto::Status::ok)
      finding("the bystander's put was refused");
  }
  void check() {
    if (client.get(buffer, 0, bytes) != held) finding("a fetch changed another client's buffer");
  }
};

// Reads the input front to back; past its end, zeros.
class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return at_ >= size_; }
  std::uint64_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  std::uint64_t u16() { return byte() | (std::uint64_t{byte()} << 8); }
  std::string bytes(std::size_t n) {
    n = std::min(n, size_ - std::min(at_, size_));
    std::string out(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

const char* const kernels[] = {"axpy", "dot", "sum", "fill", "scale", "copy", "gemm", "k", "nope", ""};
const proto::DType dtypes[] = {proto::DType::f32, proto::DType::f64, proto::DType::i32, proto::DType::i64,
                               proto::DType::u8};

const std::string kernel_source = R"(
extern "C" __global__ void k(const float* x, float* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i];
}
)";

// Sends one request the input describes; false once the connection is gone.
void fetch_from_source(test::TestClient& client, Input& in, std::unique_ptr<Bystander>& bystander);

bool send_one(test::TestClient& client, Input& in, std::vector<std::string>& payloads,
              std::unique_ptr<Bystander>& bystander) {
  std::uint64_t request = client.next_request();
  switch (in.byte() % 8) {
    case 0: {  // raw header bytes: whatever decode makes of them
      payloads.push_back(in.bytes(in.byte()));
      client.send_raw(std::vector<std::byte>(reinterpret_cast<const std::byte*>(payloads.back().data()),
                                             reinterpret_cast<const std::byte*>(payloads.back().data()) +
                                                 payloads.back().size()));
      return true;
    }
    case 1: {
      proto::Put put{request, in.byte() % 4, dtypes[in.byte() % 5], 1 + in.byte() % 4, 1 + in.u16(), in.u16()};
      payloads.push_back(in.bytes(in.u16() % 4096));
      client.send_async(put, payloads.back().data(), payloads.back().size());
      return true;
    }
    case 2: client.send(proto::Get{request, in.byte() % 4, in.u16(), in.u16()}); return true;
    case 3: {
      proto::Run run{request, kernels[in.byte() % 10], "fuzz", {}};
      for (std::size_t n = in.byte() % 6; n > 0; --n) {
        proto::RunArg arg;
        switch (in.byte() % 3) {
          case 0:
            arg.kind = proto::RunArg::Kind::buffer;
            arg.buffer = in.byte() % 4;
            arg.mode = static_cast<proto::Mode>(in.byte() % 3);
            break;
          case 1:
            arg.kind = proto::RunArg::Kind::real;
            arg.real = static_cast<double>(in.u16()) - 100.0;
            break;
          default:
            arg.kind = proto::RunArg::Kind::integer;
            arg.integer = static_cast<std::int64_t>(in.u16()) - 100;
        }
        run.args.push_back(arg);
      }
      client.send(run);
      return true;
    }
    case 4: {
      proto::Secret secret{};
      const auto which = in.byte();
      if (which >= 0xf0) return fetch_from_source(client, in, bystander), true;  // above the older ops' range
      switch (which % 3) {
        case 0: client.send(proto::Free{in.byte() % 4}); return true;
        case 1:  // a grant (few ids and secrets, so fetches below find some)
          secret.fill(static_cast<std::uint8_t>(in.byte() % 2));
          // For this very ferryd (so its fetches from itself get in), or for nobody.
          client.send(proto::GrantRead{request, in.byte() % 4, secret,
                                       in.byte() % 2 == 0 ? client.host_key() : proto::Key{}, in.byte() % 4,
                                       in.u16(), 1 + in.u16(), static_cast<std::uint32_t>(1 + in.u16())});
          return true;
        default: {  // a fetch from this very ferryd: it dials itself with whatever capability
          secret.fill(static_cast<std::uint8_t>(in.byte() % 2));
          proto::Fetch fetch{request, in.byte() % 4, dtypes[in.byte() % 5], 1 + in.byte() % 4, 1 + in.u16(), in.u16(),
                             1 + in.u16(), "127.0.0.1:" + std::to_string(ferryd_instance().port), client.host_key(),
                             in.byte() % 4, secret, in.byte() % 4, in.u16()};
          client.send(fetch);
          return true;
        }
      }
    }
    case 5: {
      // The kernel above with bytes of the input spliced in somewhere.
      std::string source = kernel_source;
      const std::size_t at = in.u16() % (source.size() + 1);
      source.insert(at, in.bytes(in.byte()));
      payloads.push_back(std::move(source));
      proto::DefineKernel define{request, in.byte() % 2 ? "k" : "k2", "k", {}, {},
                                 static_cast<std::uint32_t>(payloads.back().size())};
      if (in.byte() % 4 == 0) define.options.push_back(in.bytes(in.byte() % 32));
      client.send_async(define, payloads.back().data(), payloads.back().size());
      return true;
    }
    case 6: client.send(proto::StatsRequest{request}); return true;
    default: client.send(proto::Ping{request}); return true;
  }
}

// A put of a pattern into a buffer only this op uses, a fetch of part of it
// from the fake source, then the buffer read back (see the top).
void fetch_from_source(test::TestClient& client, Input& in, std::unique_ptr<Bystander>& bystander) {
  if (!bystander) bystander = std::make_unique<Bystander>();
  FakeSource& source = source_instance();
  const std::uint64_t buffer = 100 + in.byte() % 2;
  const std::uint64_t offset = in.byte() % 64, length = 1 + in.u16() % 512;
  const std::uint64_t total = offset + length + in.byte() % 32;
  const std::uint32_t max_payload = 16u << (in.byte() % 5);
  std::deque<Answer> answers;
  for (std::uint64_t n = (length + max_payload - 1) / max_payload; n > 0; --n) {
    const std::uint64_t how = in.byte();
    Answer a;
    a.seed = static_cast<std::uint8_t>(in.byte());
    if (how >= 0xa0) {  // most answers right, so fetches get far
      a.stray = (how & 1) != 0;
      a.refuse = (how & 0x1e) == 0x1e;
      a.status = (how & 2) != 0 ? proto::Status::ok : proto::Status::unknown_buffer;
      a.size = static_cast<Answer::Size>((how >> 2) % Answer::size_count);
    }
    answers.push_back(a);
  }
  source.script(std::move(answers), max_payload);

  std::vector<std::byte> before(total);
  for (std::size_t i = 0; i < total; ++i) before[i] = std::byte(static_cast<std::uint8_t>(0x5a + i));
  const std::uint64_t put = client.next_request();
  client.send(proto::Put{put, buffer, proto::DType::u8, 1, total, 0}, before.data(), before.size());
  const test::Received put_reply = reply_to(client, put);
  const auto* ack = std::get_if<proto::PutAck>(&put_reply.message);
  if (ack == nullptr || ack->status != proto::Status::ok) return;  // a quota, say: nothing to fetch into

  proto::Secret secret;
  secret.fill(FakeSource::secret_fill);
  const std::uint64_t request = client.next_request();
  client.send(proto::Fetch{request, buffer, proto::DType::u8, 1, total, offset, length,
                           "127.0.0.1:" + std::to_string(source.port()), source.key(), 1 + in.byte() % 4, secret, 7, 0});
  const test::Received fetch_reply = reply_to(client, request, std::chrono::seconds(60));
  const auto* fetched = std::get_if<proto::PutAck>(&fetch_reply.message);
  if (fetched == nullptr) finding("a fetch was answered with something other than a put ack");
  const bool ok = fetched->status == proto::Status::ok;

  const std::uint64_t get = client.next_request();
  client.send(proto::Get{get, buffer, 0, total});
  const test::Received back = reply_to(client, get);
  const auto* data = std::get_if<proto::Data>(&back.message);
  if (data == nullptr || data->status != proto::Status::ok || back.payload.size() != total)
    finding("a replica after a fetch cannot be read back");
  const auto right = source.right();
  for (std::uint64_t i = 0; i < total; ++i) {
    const std::byte b = back.payload[i];
    if (i < offset || i >= offset + length) {
      if (b != before[i]) finding("a fetch changed bytes outside its region");
      continue;
    }
    // The right reply that covers this byte, if any.
    const std::uint64_t at = i - offset;
    const std::byte* sent = nullptr;
    if (auto it = right.upper_bound(at); it != right.begin()) {
      --it;
      if (at - it->first < it->second.size()) sent = &it->second[at - it->first];
    }
    if (sent != nullptr && b == *sent) continue;
    if (!ok && b == before[i]) continue;
    finding(ok ? "a fetch that succeeded holds bytes the source did not send right"
               : "a failed fetch left bytes no right reply carried");
  }
  bystander->check();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Ferryd& server = ferryd_instance();
  {
    std::unique_ptr<Bystander> bystander;  // made by the first fetch from the fake source
    std::vector<std::string> payloads;  // outlive the client: sends may still read them
    payloads.reserve(64);
    test::TestClient client(server.port, "fuzz");
    client.authenticate(token);
    Input in(data, size);
    try {
      for (int n = 0; n < 32 && !in.empty(); ++n) {
        try {
          send_one(client, in, payloads, bystander);
        } catch (const ProtocolError&) {
          // The client's encoder refused it (an offset past the buffer, ...): ferryd never sees it.
        }
      }
      // Everything sent has been answered, or the connection was closed with an error.
      constexpr std::uint64_t last = ~std::uint64_t{0};
      client.send(proto::Ping{last});
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      for (bool answered = false; !answered;) {
        if (std::chrono::steady_clock::now() > deadline) finding("ferryd did not answer the last ping in 20 s");
        try {
          const auto r = client.next(std::chrono::milliseconds(100));
          const auto* pong = std::get_if<proto::Pong>(&r.message);
          answered = (pong != nullptr && pong->request == last) || std::holds_alternative<proto::ErrorMessage>(r.message);
        } catch (const std::runtime_error&) {
          answered = client.wait_closed(std::chrono::milliseconds(0));  // closed, and nothing more queued
        }
      }
      // A reply's payload may still be arriving behind the answer: the
      // client closing under it would leave that receive (and its buffer)
      // with UCX, a leak of this harness, not of ferryd.
      if (!client.wait_payloads(std::chrono::seconds(20))) finding("a reply's payload never arrived");
    } catch (const std::runtime_error& e) {
      // A send to, or a wait on, a connection ferryd closed is fine when it said why.
      if (!client.wait_closed(std::chrono::seconds(5))) finding(std::string("ferryd stopped answering: ") + e.what());
    }
  }
  // The client is gone: so must be every byte it held (replicas, kernel sources).
  for (int i = 0; server.memory_in_use() != 0; ++i) {
    if (i == 500) finding("a client went away and ferryd still counts " + std::to_string(server.memory_in_use()) +
                          " bytes for it");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}
