// libFuzzer target for the wire protocol's decoder (docs/protocol.md).
// A peer controls every byte decode() sees, so for any input: decode either
// returns a message or throws ferry::ProtocolError (any other exception, a
// crash or a sanitizer report is a finding), and whatever it returns must
// re-encode to the very bytes it came from, because the encoding is
// canonical. Run through run_fuzzer.sh.
//
// FERRY_FUZZ_SEED_DIR=dir ./protocol_fuzzer writes a seed corpus of valid
// messages into dir and exits, so the seeds always match this build's layout.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/transport/protocol.hpp"

namespace {

using namespace ferry::protocol;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "protocol_fuzzer: %s\n", what);
  std::abort();
}

std::vector<Message> seeds() {
  RunArg buffer;
  buffer.kind = RunArg::Kind::buffer;
  buffer.buffer = 3;
  buffer.mode = Mode::readwrite;
  RunArg real;
  real.kind = RunArg::Kind::real;
  real.real = -2.5;
  RunArg integer;
  integer.kind = RunArg::Kind::integer;
  integer.integer = -7;
  RunArg text;
  text.kind = RunArg::Kind::text;
  text.text = std::string("a\0b", 3);
  Challenge challenge;
  challenge.nonce.fill(0xa5);
  Auth auth;
  auth.mac.fill(0x5a);
  Done with_result;
  with_result.seconds = 0.25;
  with_result.result = 1.0;
  Done failed;
  failed.status = Status::kernel_failed;
  failed.message = "boom";
  return {
      Hello{.min_version = 1, .max_version = 1, .client = "fuzz:1"},
      challenge,
      auth,
      Welcome{.server = "ferryd", .memory_quota = 1 << 30, .cpu_workers = 2, .gpus = 1, .max_payload = 1 << 20},
      Put{.request = 1, .buffer = 2, .dtype = DType::f64, .rows = 4, .cols = 4, .offset = 64},
      PutAck{.request = 1, .buffer = 2, .status = Status::ok, .message = ""},
      Get{.request = 2, .buffer = 2, .offset = 8, .length = 64},
      Data{.request = 2, .buffer = 2, .offset = 8, .status = Status::unknown_buffer, .message = "no"},
      Run{.request = 3, .kernel = "axpy", .task = "t", .args = {buffer, real, integer, text}},
      with_result,
      failed,
      Free{.buffer = 2},
      StatsRequest{.request = 4},
      StatsReply{.request = 4, .bytes_in = 1, .bytes_out = 2, .tasks = 3, .replicas = 4, .memory_in_use = 5},
      Ping{.request = 5},
      Pong{.request = 5},
      ErrorMessage{.status = Status::malformed, .message = "bad"},
      Bye{.status = Status::shutting_down, .message = std::string(max_string_bytes, 'x')},
      DefineKernel{.request = 6, .name = "scale", .entry = "scale", .options = {"-use_fast_math", ""},
                   .writes = {"y"}, .source_bytes = 4096},
      GrantRead{.request = 7, .capability = 8, .secret = {1, 2, 3}, .buffer = 2, .offset = 0, .length = 64,
                .lifetime_ms = 1000},
      Fetch{.request = 8, .buffer = 3, .dtype = DType::f64, .rows = 4, .cols = 4, .offset = 0, .length = 128,
            .source = "127.0.0.1:7070", .host_key = {9}, .capability = 8, .secret = {1, 2, 3}, .source_buffer = 2,
            .source_offset = 0},
  };
}

void write_seeds(const std::string& dir) {
  int n = 0;
  for (const Message& m : seeds()) {
    const std::vector<std::byte> bytes = encode(m);
    const std::string path = dir + "/seed-" + std::to_string(n++) + "-" + to_string(type_of(m));
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
      std::perror(path.c_str());
      std::exit(1);
    }
    std::fclose(f);
  }
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
  const std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);
  Message message;
  try {
    message = decode(input);
  } catch (const ferry::ProtocolError&) {
    return 0;  // refused: the expected outcome for most inputs
  }

  // From here on nothing may throw: a decoded message is valid, so encoding
  // it must succeed; an exception escaping is reported as a crash.
  const std::vector<std::byte> again = encode(message);
  if (again.size() != input.size()) finding("re-encoding changed the length");
  for (std::size_t i = 0; i < again.size(); ++i) {
    const bool version_field = i == 4 || i == 5;  // an older accepted version re-encodes as ours
    if (!version_field && again[i] != input[i]) finding("re-encoding changed a byte");
  }
  if (encode(decode(again)) != again) finding("encode(decode(encode(m))) differs from encode(m)");
  return 0;
}
