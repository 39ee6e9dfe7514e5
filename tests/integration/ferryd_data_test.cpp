// Replicas and runs through ferryd: bytes in and out exactly, kernels on
// replicas, refusals that leave the connection usable, quotas, counters.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>

#include "ferryd_process.hpp"
#include "test_client.hpp"

namespace ferry::test {
namespace {

using proto::Mode;
using proto::Status;

class FerrydData : public ::testing::Test {
 protected:
  FerrydProcess server;
  TestClient client{server.port()};
  proto::Welcome welcome = client.authenticate(FerrydProcess::default_token);

  std::vector<float> put_floats(std::uint64_t id, std::size_t n, float first, float step) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = first + step * static_cast<float>(i);
    client.put_all(id, proto::DType::f32, 1, n, v.data(), n * sizeof(float), welcome.max_payload);
    return v;
  }
  std::vector<float> get_floats(std::uint64_t id, std::size_t n) {
    auto bytes = client.get(id, 0, n * sizeof(float));
    std::vector<float> v(n);
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  }
};

class FerrydRoundTrip : public FerrydData, public ::testing::WithParamInterface<std::size_t> {};

TEST_P(FerrydRoundTrip, PutThenGetIsBitExact) {
  const std::size_t n = GetParam();
  std::vector<std::byte> data(n);
  std::mt19937 random(static_cast<unsigned>(n));
  for (auto& b : data) b = static_cast<std::byte>(random());
  ASSERT_EQ(client.put(5, proto::DType::u8, 1, n, data.data(), n).status, Status::ok);
  EXPECT_EQ(client.get(5, 0, n), data);
}

INSTANTIATE_TEST_SUITE_P(Sizes, FerrydRoundTrip, ::testing::Values(1, 64 << 10, 1 << 20));

TEST_F(FerrydData, HundredMebibytesInChunks) {
  constexpr std::size_t n = 100u << 20;
  const std::size_t chunk = std::min<std::size_t>(welcome.max_payload, 16u << 20);
  std::vector<std::uint64_t> data(n / 8);
  std::iota(data.begin(), data.end(), std::uint64_t{0x1234567800000000});
  client.put_all(9, proto::DType::i64, 1, data.size(), data.data(), n, chunk);
  std::vector<std::byte> back(n);
  for (std::size_t offset = 0; offset < n; offset += chunk) {
    auto part = client.get(9, offset, std::min(chunk, n - offset));
    std::memcpy(back.data() + offset, part.data(), part.size());
  }
  EXPECT_EQ(std::memcmp(back.data(), data.data(), n), 0);
  const auto stats = client.stats();
  EXPECT_EQ(stats.bytes_in, n);
  EXPECT_EQ(stats.bytes_out, n);
  EXPECT_EQ(stats.memory_in_use, n);
}

TEST_F(FerrydData, AxpyThenGetAndDot) {
  constexpr std::size_t n = 1000;
  const auto x = put_floats(1, n, 1.0f, 1.0f);
  const auto y = put_floats(2, n, 0.5f, 0.0f);
  const auto done = client.run("axpy", {TestClient::buffer(1, Mode::read), TestClient::buffer(2, Mode::readwrite),
                                        TestClient::real(2.0)});
  ASSERT_EQ(done.status, Status::ok) << done.message;
  EXPECT_FALSE(done.result.has_value());
  const auto out = get_floats(2, n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], y[i] + 2.0f * x[i]) << i;

  const auto dot = client.run("dot", {TestClient::buffer(1, Mode::read), TestClient::buffer(1, Mode::read)});
  ASSERT_EQ(dot.status, Status::ok) << dot.message;
  ASSERT_TRUE(dot.result.has_value());
  double expected = 0;
  for (float v : x) expected += double(v) * double(v);
  EXPECT_NEAR(*dot.result, expected, expected * 1e-5);
}

TEST_F(FerrydData, RefusedRunsLeaveTheConnectionUsable) {
  put_floats(1, 16, 1.0f, 0.0f);
  put_floats(2, 32, 1.0f, 0.0f);
  auto done = client.run("no_such_kernel", {});
  EXPECT_EQ(done.status, Status::unknown_kernel);
  EXPECT_NE(done.message.find("no_such_kernel"), std::string::npos) << done.message;

  done = client.run("axpy", {TestClient::buffer(1, Mode::read), TestClient::buffer(2, Mode::readwrite)});
  EXPECT_EQ(done.status, Status::bad_arguments) << done.message;  // 16 vs 32 elements
  EXPECT_FALSE(done.message.empty());

  done = client.run("axpy", {TestClient::buffer(1, Mode::read), TestClient::buffer(77, Mode::readwrite)});
  EXPECT_EQ(done.status, Status::unknown_buffer) << done.message;

  client.send(proto::Ping{11});
  EXPECT_EQ(client.next_as<proto::Pong>().request, 11u);
  EXPECT_EQ(client.run("sum", {TestClient::buffer(1, Mode::read)}).result.value_or(-1), 16.0);
}

TEST_F(FerrydData, StatsCountBytesAndTasksExactly) {
  constexpr std::size_t n = 4096;
  put_floats(1, n, 1.0f, 0.0f);
  put_floats(2, n, 2.0f, 0.0f);
  auto stats = client.stats();
  EXPECT_EQ(stats.bytes_in, 2 * n * sizeof(float));
  EXPECT_EQ(stats.bytes_out, 0u);
  EXPECT_EQ(stats.tasks, 0u);
  EXPECT_EQ(stats.replicas, 2u);
  EXPECT_EQ(stats.memory_in_use, 2 * n * sizeof(float));

  const std::vector<proto::RunArg> args{TestClient::buffer(1, Mode::read), TestClient::buffer(2, Mode::readwrite),
                                        TestClient::real(1.0)};
  ASSERT_EQ(client.run("axpy", args).status, Status::ok);
  ASSERT_EQ(client.run("axpy", args).status, Status::ok);  // the replicas are reused: no bytes move
  stats = client.stats();
  EXPECT_EQ(stats.bytes_in, 2 * n * sizeof(float));
  EXPECT_EQ(stats.bytes_out, 0u);
  EXPECT_EQ(stats.tasks, 2u);

  EXPECT_EQ(get_floats(2, n).front(), 4.0f);
  client.send(proto::Free{1});
  client.send(proto::Free{12345});  // unknown: ignored
  stats = client.stats();
  EXPECT_EQ(stats.bytes_out, n * sizeof(float));
  EXPECT_EQ(stats.replicas, 1u);
  EXPECT_EQ(stats.memory_in_use, n * sizeof(float));
}

TEST_F(FerrydData, FailedKernelIsReportedAndItsOutputIsNotServed) {
  const double not_positive_definite[4] = {1, 2, 2, 1};
  ASSERT_EQ(client.put(1, proto::DType::f64, 2, 2, not_positive_definite, sizeof not_positive_definite).status,
            Status::ok);
  const auto done = client.run("potrf", {TestClient::buffer(1, Mode::readwrite)});
  EXPECT_EQ(done.status, Status::kernel_failed);
  EXPECT_FALSE(done.message.empty());
  client.send(proto::Get{client.next_request(), 1, 0, sizeof not_positive_definite});
  EXPECT_EQ(client.next_as<proto::Data>().status, Status::kernel_failed);
}

TEST_F(FerrydData, PutMayNotChangeTheShape) {
  put_floats(1, 8, 0.0f, 1.0f);
  const float more[16] = {};
  const auto ack = client.put(1, proto::DType::f32, 2, 8, more, sizeof more);
  EXPECT_EQ(ack.status, Status::bad_arguments) << ack.message;
  EXPECT_EQ(get_floats(1, 8)[7], 7.0f);
}

TEST(FerrydQuota, PutBeyondTheClientQuotaIsRefused) {
  FerrydProcess server({"--client-quota", "1MiB"});
  TestClient a(server.port(), "a");
  TestClient b(server.port(), "b");
  EXPECT_EQ(a.authenticate(FerrydProcess::default_token).memory_quota, 1u << 20);
  b.authenticate(FerrydProcess::default_token);

  std::vector<std::byte> data(768 << 10);
  EXPECT_EQ(a.put(1, proto::DType::u8, 1, data.size(), data.data(), data.size()).status, Status::ok);
  const auto refused = a.put(2, proto::DType::u8, 1, data.size(), data.data(), data.size());
  EXPECT_EQ(refused.status, Status::quota_exceeded) << refused.message;
  // The quota is per client, and a refusal closes nothing.
  EXPECT_EQ(b.put(1, proto::DType::u8, 1, data.size(), data.data(), data.size()).status, Status::ok);
  a.send(proto::Free{1});
  EXPECT_EQ(a.put(2, proto::DType::u8, 1, data.size(), data.data(), data.size()).status, Status::ok);
}

}  // namespace
}  // namespace ferry::test
