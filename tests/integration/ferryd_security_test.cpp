// ferryd against a client that attacks it or the other clients: each test
// reproduces a hole that a ferryd before these fixes had, through a real
// ferryd and the raw protocol. Isolation between clients, a kernel
// definition's cost and what it may touch, the log a client can write into,
// the token file, and the audit log.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "ferryd_process.hpp"
#include "test_client.hpp"

namespace ferry::test {
namespace {

using proto::Mode;
using proto::Status;

constexpr std::byte marker{0xA5};

// ---- a client reads only what it wrote, or zeros ----

enum class Leaves { by_free, by_disconnect };

class FerrydIsolation : public ::testing::TestWithParam<std::tuple<std::size_t, Leaves>> {
 protected:
  FerrydProcess server;

  // Client A fills a buffer of `bytes` with the marker, then frees it or goes away.
  void victim_writes_and_leaves(std::size_t bytes, Leaves how) {
    TestClient a(server.port(), "victim");
    const auto welcome = a.authenticate(FerrydProcess::default_token);
    const std::vector<std::byte> secret(bytes, marker);
    a.put_all(1, proto::DType::u8, 1, bytes, secret.data(), bytes, welcome.max_payload);
    ASSERT_EQ(a.get(1, bytes - 1, 1).front(), marker);  // it is there
    if (how == Leaves::by_free) {
      a.send(proto::Free{1});
      ASSERT_EQ(a.stats().memory_in_use, 0u);
    } else {
      // Its session is gone once ferryd has read the bye; then B connects.
      a.send(proto::Bye{Status::ok, "leaving"});
      ASSERT_TRUE(server.wait_for_log("(victim, token) said bye")) << server.log();
    }
  }

  static std::size_t markers(const std::vector<std::byte>& bytes) {
    return static_cast<std::size_t>(std::count(bytes.begin(), bytes.end(), marker));
  }
};

TEST_P(FerrydIsolation, AnotherClientReadsZerosNotTheData) {
  const auto [bytes, how] = GetParam();
  victim_writes_and_leaves(bytes, how);
  TestClient b(server.port(), "attacker");
  const auto welcome = b.authenticate(FerrydProcess::default_token);
  const std::byte one{0x01};
  ASSERT_EQ(b.put(7, proto::DType::u8, 1, bytes, &one, 1).status, Status::ok);
  std::vector<std::byte> back;
  for (std::size_t offset = 0; offset < bytes; offset += welcome.max_payload) {
    auto part = b.get(7, offset, std::min<std::size_t>(welcome.max_payload, bytes - offset));
    back.insert(back.end(), part.begin(), part.end());
  }
  ASSERT_EQ(back.size(), bytes);
  EXPECT_EQ(back[0], one);
  EXPECT_EQ(markers(back), 0u) << "client B read client A's bytes";
  EXPECT_EQ(static_cast<std::size_t>(std::count(back.begin() + 1, back.end(), std::byte{0})), bytes - 1);
}

// A task reading the unwritten part sees zeros too.
TEST_P(FerrydIsolation, AnotherClientsTaskReadsZerosNotTheData) {
  const auto [bytes, how] = GetParam();
  victim_writes_and_leaves(bytes, how);
  TestClient b(server.port(), "attacker");
  b.authenticate(FerrydProcess::default_token);
  const std::size_t n = bytes / sizeof(float);
  const float first = 1.0f;
  ASSERT_EQ(b.put(1, proto::DType::f32, 1, n, &first, sizeof first).status, Status::ok);  // x: one float written
  ASSERT_EQ(b.put(2, proto::DType::f32, 1, n, &first, sizeof first).status, Status::ok);  // y: the same
  const auto done = b.run("axpy", {TestClient::buffer(1, Mode::read), TestClient::buffer(2, Mode::readwrite),
                                   TestClient::real(1.0)});
  ASSERT_EQ(done.status, Status::ok) << done.message;
  const auto y = b.get(2, 0, std::min<std::size_t>(bytes, 1 << 20));
  std::vector<float> values(y.size() / sizeof(float));
  std::memcpy(values.data(), y.data(), values.size() * sizeof(float));
  EXPECT_EQ(values[0], 2.0f);
  for (std::size_t i = 1; i < values.size(); ++i) ASSERT_EQ(values[i], 0.0f) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Sizes, FerrydIsolation,
                         ::testing::Combine(::testing::Values(std::size_t{4} << 10, std::size_t{64} << 10,
                                                              std::size_t{1} << 20, std::size_t{16} << 20),
                                            ::testing::Values(Leaves::by_free, Leaves::by_disconnect)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param) >> 10) + "KiB_" +
                                  (std::get<1>(info.param) == Leaves::by_free ? "freed" : "disconnected");
                         });

// The same client's unwritten bytes read as zeros too, and what it wrote stays.
TEST(FerrydIsolationOwn, PartlyWrittenBufferReadsZerosAroundTheWrites) {
  FerrydProcess server;
  TestClient c(server.port());
  c.authenticate(FerrydProcess::default_token);
  const std::vector<std::byte> middle(100, std::byte{7});
  ASSERT_EQ(c.put(1, proto::DType::u8, 1, 1000, middle.data(), middle.size(), 450).status, Status::ok);
  const auto all = c.get(1, 0, 1000);
  for (std::size_t i = 0; i < 1000; ++i)
    ASSERT_EQ(all[i], i >= 450 && i < 550 ? std::byte{7} : std::byte{0}) << "byte " << i;
}

// ---- kernel definitions: quota, confinement ----

class FerrydDefine : public ::testing::Test {
 protected:
  FerrydProcess server{{"--client-quota", "1MiB"}};
  TestClient client{server.port()};
  proto::Welcome welcome = client.authenticate(FerrydProcess::default_token);

  proto::Done define(const std::string& name, const std::string& source, const std::string& entry,
                     std::vector<std::string> options = {}) {
    proto::DefineKernel d;
    d.request = client.next_request();
    d.name = name;
    d.entry = entry;
    d.options = std::move(options);
    d.source_bytes = static_cast<std::uint32_t>(source.size());
    client.send(d, source.data(), source.size());
    return client.next_as<proto::Done>();
  }
};

const std::string scale = R"(
extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i];
}
)";

TEST_F(FerrydDefine, SourcesCountAgainstTheQuota) {
  // 600 KiB of comment before the kernel: parsed fine, and held.
  const std::string big = "// " + std::string(600u << 10, 'x') + "\n" + scale;
  ASSERT_EQ(define("big", big, "scale").status, Status::ok);
  EXPECT_EQ(client.stats().memory_in_use, big.size());
  // A second one does not fit the 1 MiB quota.
  const auto refused = define("big2", big + " ", "scale");
  EXPECT_EQ(refused.status, Status::quota_exceeded) << refused.message;
  EXPECT_NE(refused.message.find("kernel 'big2'"), std::string::npos) << refused.message;
  // Nor does a replica that would take the rest.
  const std::byte one{1};
  EXPECT_EQ(client.put(1, proto::DType::u8, 1, 512u << 10, &one, 1).status, Status::quota_exceeded);
  // A refused definition holds nothing; the connection still works.
  EXPECT_EQ(define("bad", scale, "nope").status, Status::bad_arguments);
  EXPECT_EQ(client.stats().memory_in_use, big.size());
  EXPECT_EQ(define("small", scale, "scale").status, Status::ok);
  EXPECT_EQ(client.stats().memory_in_use, big.size() + scale.size());
}

TEST_F(FerrydDefine, PathologicalSourceIsAnsweredAndOthersAreServed) {
  // 1 MiB of f(f(f(...: once 17 s per 256 KiB, on the thread every client waits on.
  std::string nested;
  while (nested.size() + 2 <= (1u << 20) - 64) nested += "f(";
  TestClient other(server.port(), "bystander");
  other.authenticate(FerrydProcess::default_token);
  const auto start = std::chrono::steady_clock::now();
  const auto done = define("nested", nested, "f");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("define_kernel of %zu bytes of f(f(f(...: answered in %.3f s\n", nested.size(), seconds);
  EXPECT_EQ(done.status, Status::bad_arguments) << done.message;
  other.send(proto::Ping{5});
  EXPECT_EQ(other.next_as<proto::Pong>().request, 5u);
  EXPECT_EQ(client.stats().memory_in_use, 0u);
}

TEST_F(FerrydDefine, OptionsThatTouchFilesAreRefused) {
  for (const char* option : {"--pre-include=/etc/passwd", "-include=/etc/passwd", "-I/etc", "--include-path=/etc",
                             "-I", "--time=/tmp/ferry-time", "--create-pch=/tmp/x.pch", "-Xptxas"}) {
    const auto done = define("k", scale, "scale", {option});
    EXPECT_EQ(done.status, Status::bad_arguments) << option;
    EXPECT_NE(done.message.find(std::string("option '") + option + "' is refused"), std::string::npos)
        << done.message;
  }
  // Harmless ones are taken.
  EXPECT_EQ(define("k", scale, "scale", {"-use_fast_math", "-DN=4", "--std=c++17"}).status, Status::ok);
}

TEST_F(FerrydDefine, IncludesOfServerFilesAreRefusedBeforeCompiling) {
  for (const std::string include :
       {"#include \"/etc/passwd\"", "#include </etc/shadow>", "  #  include \"../../etc/passwd\"",
        "#/* hidden */include <a/../../b.h>", "#include \\\n \"/etc/hostname\"", "%:include \"/etc/passwd\"",
        "#define P \"/etc/passwd\"\n#include P", "#if __has_include(\"/etc/passwd\")\n#endif",
        "#include_next </etc/passwd>"}) {
    const auto done = define("k", include + "\n" + scale, "scale");
    EXPECT_EQ(done.status, Status::bad_arguments) << include;
    EXPECT_NE(done.message.find("is refused"), std::string::npos) << include << ": " << done.message;
  }
  // A header by a plain name (NVRTC will not find it without a search list; that is the compile's
  // business), and text that only looks like an include, are fine.
  EXPECT_EQ(define("k", "#include <cuda_fp16.h>\n// see #include <cuda_bf16.h>\nconst char* s = \"#include <a/b.h>\";\n" + scale,
                   "scale")
                .status,
            Status::ok);
}

// ---- log injection ----

TEST(FerrydLog, ClientNamesAreLoggedEscaped) {
  FerrydProcess server;
  const std::string name = "evil\nINFO ferryd: forged line\x1b[31m\r" + std::string(900, 'n');
  TestClient client(server.port(), name);
  client.handshake("a wrong token, to be logged with the name");
  ASSERT_TRUE(server.wait_for_log("refused")) << server.log();
  const std::string log = server.log();
  EXPECT_EQ(log.find("\nINFO ferryd: forged line"), std::string::npos) << log;
  EXPECT_EQ(log.find('\x1b'), std::string::npos);
  EXPECT_EQ(log.find('\r'), std::string::npos);
  EXPECT_NE(log.find("evil\\nINFO ferryd: forged line\\x1b[31m\\r"), std::string::npos) << log;
  EXPECT_EQ(log.find(std::string(200, 'n')), std::string::npos) << "the name's length is not capped";
}

// ---- the token file ----

class FerrydTokenFile : public ::testing::Test {
 protected:
  std::filesystem::path dir = make_temp_dir();
  ~FerrydTokenFile() override { std::filesystem::remove_all(dir); }

  int run_with(const std::string& content, mode_t mode, std::string* out) {
    const auto token = dir / "token";
    std::ofstream(token, std::ios::binary | std::ios::trunc) << content;
    chmod(token.c_str(), mode);
    return FerrydProcess::run_to_exit({"--listen", "127.0.0.1:0", "--token-file", token.string()}, out);
  }
};

TEST_F(FerrydTokenFile, WritableByGroupOrOthersIsRefused) {
  for (mode_t mode : {0602, 0620, 0622, 0666}) {
    std::string out;
    EXPECT_EQ(run_with("a token long enough to be accepted\n", mode, &out), 2) << std::oct << mode;
    EXPECT_NE(out.find("group or others may write it"), std::string::npos) << out;
  }
}

TEST_F(FerrydTokenFile, ShortTokenIsRefused) {
  for (const std::string token : {"t", "t\n", "fifteen bytes!!", "fifteen bytes!!\r\n"}) {
    std::string out;
    EXPECT_EQ(run_with(token, 0600, &out), 2) << token;
    EXPECT_NE(out.find("fewer than the 16"), std::string::npos) << out;
  }
}

TEST(FerrydTokenLineEnding, CarriageReturnIsNotPartOfTheToken) {
  // The file holds the token and "\r\n", as a Windows editor writes it.
  FerrydProcess server({}, std::string(FerrydProcess::default_token) + "\r");
  TestClient client(server.port());
  EXPECT_NO_THROW(client.authenticate(FerrydProcess::default_token)) << server.log();
}

// ---- the audit log ----

std::vector<nlohmann::json> read_audit(const std::filesystem::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    EXPECT_NO_THROW(lines.push_back(nlohmann::json::parse(line))) << line;
    const auto& j = lines.back();
    EXPECT_TRUE(j.contains("time") && j["time"].is_string()) << line;
    EXPECT_TRUE(j.contains("event") && j["event"].is_string()) << line;
    EXPECT_TRUE(j.contains("peer") && j["peer"].is_string()) << line;
  }
  return lines;
}

std::vector<nlohmann::json> events(const std::vector<nlohmann::json>& lines, const std::string& event) {
  std::vector<nlohmann::json> out;
  for (const auto& j : lines)
    if (j["event"] == event) out.push_back(j);
  return out;
}

TEST(FerrydAudit, EveryLineParsesAndSaysWhatHappened) {
  const auto dir = make_temp_dir();
  const auto audit = dir / "audit.jsonl";
  {
    FerrydProcess server({"--audit-log", audit.string(), "--client-quota", "64KiB"});
    {
      TestClient intruder(server.port(), "intruder");
      intruder.handshake("not the token");
    }
    {
      TestClient client(server.port(), "alice\n");
      client.authenticate(FerrydProcess::default_token);
      std::vector<float> x(1000, 1.0f);
      ASSERT_EQ(client.put(1, proto::DType::f32, 1, 1000, x.data(), 4000).status, Status::ok);
      ASSERT_EQ(client.put(2, proto::DType::f32, 1, 1000, x.data(), 4000).status, Status::ok);
      ASSERT_EQ(client.run("axpy", {TestClient::buffer(1, Mode::read), TestClient::buffer(2, Mode::readwrite),
                                    TestClient::real(2.0)})
                    .status,
                Status::ok);
      EXPECT_EQ(client.run("no_such_kernel", {}).status, Status::unknown_kernel);
      const std::byte one{1};
      EXPECT_EQ(client.put(3, proto::DType::u8, 1, 1 << 20, &one, 1).status, Status::quota_exceeded);
      proto::DefineKernel d{client.next_request(), "scale", "scale", {}, {}, static_cast<std::uint32_t>(scale.size())};
      client.send(d, scale.data(), scale.size());
      ASSERT_EQ(client.next_as<proto::Done>().status, Status::ok);
      client.send(proto::Bye{Status::ok, "done"});
      ASSERT_TRUE(server.wait_for_log("said bye"));
    }
    // logrotate: the file is moved, ferryd told, and a new one begins.
    std::filesystem::rename(audit, dir / "audit.jsonl.1");
    server.signal(SIGHUP);
    ASSERT_TRUE(server.wait_for_log("reopened")) << server.log();
    {
      TestClient late(server.port(), "late");
      late.authenticate(FerrydProcess::default_token);
    }
    EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
  }

  const auto before = read_audit(dir / "audit.jsonl.1");
  const auto after = read_audit(audit);
  ASSERT_FALSE(before.empty());
  ASSERT_FALSE(after.empty()) << "nothing written after SIGHUP";

  const auto auth = events(before, "authenticate");
  ASSERT_EQ(auth.size(), 2u);
  EXPECT_EQ(auth[0]["client"], "intruder");
  EXPECT_EQ(auth[0]["result"], "wrong_token");
  EXPECT_EQ(auth[1]["client"], "alice\\n");  // escaped at the door, as in the logs
  EXPECT_EQ(auth[1]["result"], "ok");
  // The intruder never got past the front door: only alice had a session.
  EXPECT_EQ(events(before, "connect").size(), 1u);

  const auto tasks = events(before, "task");
  ASSERT_EQ(tasks.size(), 2u);
  const auto& axpy = *std::find_if(tasks.begin(), tasks.end(), [](const auto& j) { return j["kernel"] == "axpy"; });
  EXPECT_EQ(axpy["status"], "ok");
  EXPECT_EQ(axpy["bytes_in"], 8000);
  EXPECT_EQ(axpy["bytes_out"], 4000);
  EXPECT_EQ(axpy["device"], "cpu");
  EXPECT_TRUE(axpy["duration_s"].is_number());
  EXPECT_EQ(axpy["client"], "alice\\n");

  const auto quota = events(before, "quota_refused");
  ASSERT_EQ(quota.size(), 1u);
  EXPECT_EQ(quota[0]["request"], "put");
  EXPECT_EQ(quota[0]["bytes"], 1 << 20);
  EXPECT_EQ(quota[0]["quota"], 64 << 10);

  const auto defines = events(before, "define_kernel");
  ASSERT_EQ(defines.size(), 1u);
  EXPECT_EQ(defines[0]["kernel"], "scale");
  EXPECT_EQ(defines[0]["status"], "ok");
  EXPECT_EQ(defines[0]["sha256"].get<std::string>().size(), 64u);

  const auto gone = events(before, "disconnect");
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0]["reason"], "the client said bye");
  EXPECT_EQ(gone[0]["tasks"], 1);  // the run of an unknown kernel was refused, not run

  EXPECT_EQ(events(after, "authenticate").size(), 1u);
  EXPECT_EQ(events(after, "authenticate")[0]["client"], "late");
  struct stat st {};
  ASSERT_EQ(::stat(audit.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::filesystem::remove_all(dir);
}

// ---- one tenant's definitions do not hold up another's ----

// A tenant queues many big definitions (today 256 of 1 MiB held up another
// tenant's one-line define by 9.4 s); another tenant's define is read in
// turn with them, not after all of them. Seen in the audit log's
// order of define_kernel records (ferryd writes one as it answers each).
TEST(FerrydDefineFairness, AnotherTenantsSmallDefineIsAnsweredBeforeTheBacklogDrains) {
  using namespace std::chrono_literals;
  const auto dir = make_temp_dir();
  const auto audit = dir / "audit.jsonl";
  constexpr int backlog = 32;
  {
    FerrydProcess server({"--audit-log", audit.string(), "--client-quota", "256MiB"});
    TestClient hog(server.port(), "hog");
    hog.authenticate(FerrydProcess::default_token);
    TestClient small(server.port(), "small");
    small.authenticate(FerrydProcess::default_token);
    // 1 MiB of f(f(f(... each: about 0.1 s of reading apiece on ferryd's side (refused in the end).
    std::string nested;
    while (nested.size() + 2 <= (1u << 20) - 64) nested += "f(";
    for (int i = 0; i < backlog; ++i)
      hog.send(proto::DefineKernel{hog.next_request(), "big" + std::to_string(i), "f", {}, {},
                                   static_cast<std::uint32_t>(nested.size())},
               nested.data(), nested.size());
    // The backlog is being read: the first answer came.
    ASSERT_EQ(hog.next_as<proto::Done>(60s).status, Status::bad_arguments);
    small.send(proto::DefineKernel{small.next_request(), "scale", "scale", {}, {},
                                   static_cast<std::uint32_t>(scale.size())},
               scale.data(), scale.size());
    ASSERT_EQ(small.next_as<proto::Done>(120s).status, Status::ok);
    for (int i = 1; i < backlog; ++i) ASSERT_EQ(hog.next_as<proto::Done>(120s).status, Status::bad_arguments) << i;
    EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
  }
  const auto defines = events(read_audit(audit), "define_kernel");
  ASSERT_EQ(defines.size(), static_cast<std::size_t>(backlog + 1));
  const auto small_at = std::find_if(defines.begin(), defines.end(), [](const auto& j) { return j["client"] == "small"; });
  ASSERT_NE(small_at, defines.end());
  const auto after = defines.end() - small_at - 1;
  std::printf("the small define was answered with %td of the tenant's %d big ones still to go\n", after, backlog);
  // In turn, it goes next; behind the backlog (FIFO), none would be left.
  EXPECT_GE(after, backlog / 4) << "the small define waited for the other tenant's backlog";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ferry::test
