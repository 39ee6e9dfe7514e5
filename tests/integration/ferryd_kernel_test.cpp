// Kernels a client defines on ferryd from CUDA source (define_kernel): parse
// errors come back at once, a name keeps its definition for the connection,
// and a payload that does not match its header closes the connection. None
// of this needs a GPU: ferryd parses at define and compiles at the first run.
#include <gtest/gtest.h>

#include <string>

#include "ferryd_process.hpp"
#include "test_client.hpp"

namespace ferry::test {
namespace {

using proto::Status;

const std::string scale = R"(
extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i];
}
)";

class FerrydKernel : public ::testing::Test {
 protected:
  FerrydProcess server;
  TestClient client{server.port()};
  proto::Welcome welcome = client.authenticate(FerrydProcess::default_token);

  proto::Done define(const std::string& name, const std::string& source, const std::string& entry,
                     std::vector<std::string> writes = {}) {
    proto::DefineKernel d;
    d.request = client.next_request();
    d.name = name;
    d.entry = entry;
    d.writes = std::move(writes);
    d.source_bytes = static_cast<std::uint32_t>(source.size());
    client.send(d, source.data(), source.size());
    auto done = client.next_as<proto::Done>();
    EXPECT_EQ(done.request, d.request);
    return done;
  }
};

TEST_F(FerrydKernel, ParseErrorComesBackAtDefine) {
  const auto done = define("bad", "__global__ void scale(float* x, std::complex<float> n) {}", "scale");
  EXPECT_EQ(done.status, Status::bad_arguments);
  EXPECT_NE(done.message.find("cuda_kernel 'scale': parameter 2 'n' has type 'std::complex<float>'"),
            std::string::npos)
      << done.message;
  const auto missing = define("bad", scale, "nope");
  EXPECT_EQ(missing.status, Status::bad_arguments);
  EXPECT_NE(missing.message.find("no __global__ function named 'nope'"), std::string::npos) << missing.message;
  // A refusal is not fatal: the connection carries on.
  client.send(proto::Ping{9});
  EXPECT_EQ(client.next_as<proto::Pong>().request, 9u);
  EXPECT_TRUE(server.wait_for_log("kernel 'bad' refused")) << server.log();
}

TEST_F(FerrydKernel, LongErrorIsCutToFitTheReply) {
  const std::string type(3000, 'T');  // its spelling in the error alone exceeds a protocol string
  const auto done = define("long", "__global__ void k(float* x, " + type + " n) {}", "k");
  EXPECT_EQ(done.status, Status::bad_arguments);
  EXPECT_LE(done.message.size(), proto::max_string_bytes);
  EXPECT_NE(done.message.find("parameter 2 'n' has type 'TTTT"), std::string::npos) << done.message;
  EXPECT_TRUE(done.message.ends_with("(cut)")) << done.message;
}

TEST_F(FerrydKernel, NameKeepsItsDefinitionForTheConnection) {
  EXPECT_EQ(define("scale", scale, "scale", {"y"}).status, Status::ok);
  EXPECT_EQ(define("scale", scale, "scale", {"y"}).status, Status::ok);  // the same again: idempotent
  const auto other = define("scale", scale + "\n// edited\n", "scale", {"y"});
  EXPECT_EQ(other.status, Status::bad_arguments);
  EXPECT_NE(other.message.find("already defined on this connection"), std::string::npos) << other.message;
  const auto other_writes = define("scale", scale, "scale");
  EXPECT_EQ(other_writes.status, Status::bad_arguments) << "the same source with other writes is another kernel";
  const auto bad_writes = define("scale2", scale, "scale", {"x"});
  EXPECT_EQ(bad_writes.status, Status::bad_arguments);
  EXPECT_NE(bad_writes.message.find("points to const"), std::string::npos) << bad_writes.message;

  // Another connection does not see it.
  TestClient other_client(server.port(), "other");
  other_client.authenticate(FerrydProcess::default_token);
  const auto unknown = other_client.run("scale", {});
  EXPECT_EQ(unknown.status, Status::unknown_kernel) << unknown.message;
}

TEST_F(FerrydKernel, RunOfADefinedKernelIsCheckedAgainstItsSignature) {
  ASSERT_EQ(define("scale", scale, "scale", {"y"}).status, Status::ok);
  const float x[4] = {1, 2, 3, 4};
  ASSERT_EQ(client.put(1, proto::DType::f32, 1, 4, x, sizeof x).status, Status::ok);
  ASSERT_EQ(client.put(2, proto::DType::f64, 1, 4, nullptr, 0).status, Status::ok);
  // y is a float*: a double buffer is refused, naming the argument.
  const auto wrong = client.run("scale", {TestClient::buffer(1, proto::Mode::read), TestClient::buffer(2, proto::Mode::write),
                                          TestClient::real(2.0), TestClient::real(4)});
  EXPECT_EQ(wrong.status, Status::bad_arguments);
  EXPECT_NE(wrong.message.find("argument 2 'y' has element type float64"), std::string::npos) << wrong.message;
  if (welcome.gpus == 0) {
    ASSERT_EQ(client.put(3, proto::DType::f32, 1, 4, nullptr, 0).status, Status::ok);
    const auto no_gpu = client.run("scale", {TestClient::buffer(1, proto::Mode::read),
                                             TestClient::buffer(3, proto::Mode::write), TestClient::real(2.0),
                                             TestClient::real(4)});
    EXPECT_EQ(no_gpu.status, Status::bad_arguments);
    EXPECT_NE(no_gpu.message.find("no device of this runtime can run it"), std::string::npos) << no_gpu.message;
  }
}

TEST_F(FerrydKernel, PayloadThatDoesNotMatchItsHeaderIsMalformed) {
  proto::DefineKernel d;
  d.request = client.next_request();
  d.name = "scale";
  d.entry = "scale";
  d.source_bytes = static_cast<std::uint32_t>(scale.size()) + 1;
  client.send_async(d, scale.data(), scale.size());
  const auto error = client.next_as<proto::ErrorMessage>();
  EXPECT_EQ(error.status, Status::malformed);
  EXPECT_NE(error.message.find("announces"), std::string::npos) << error.message;
  EXPECT_TRUE(client.wait_closed());
}

}  // namespace
}  // namespace ferry::test
