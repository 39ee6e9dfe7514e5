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
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/runtime/runtime.hpp"
#include "metrics.hpp"
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

  std::uint64_t memory_in_use() { return state.worker->call([this] { return state.memory_in_use; }); }
};

Ferryd& ferryd_instance() {
  static Ferryd* instance = new Ferryd();  // never destroyed: libFuzzer exits without unwinding
  return *instance;
}

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
bool send_one(test::TestClient& client, Input& in, std::vector<std::string>& payloads) {
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
      switch (in.byte() % 3) {
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Ferryd& server = ferryd_instance();
  {
    std::vector<std::string> payloads;  // outlive the client: sends may still read them
    payloads.reserve(64);
    test::TestClient client(server.port, "fuzz");
    client.authenticate(token);
    Input in(data, size);
    try {
      for (int n = 0; n < 32 && !in.empty(); ++n) {
        try {
          send_one(client, in, payloads);
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
