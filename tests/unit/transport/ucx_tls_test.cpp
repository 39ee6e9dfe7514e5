// Which transports UCX_TLS lets UCX open (ucx_tls.hpp): Worker::create gives
// a transport's settings only then, since UCX warns of one nobody read.
#include <gtest/gtest.h>

#include "ucx_tls.hpp"

namespace ferry::transport {
namespace {

// As Worker::create asks of the shared-memory transports.
bool shared_memory(const char* tls) { return tls_may_open(tls, {"sysv", "posix", "mm", "sm", "shm"}); }

TEST(UcxTls, UnsetLetsUcxOpenAnything) {
  EXPECT_TRUE(tls_may_open(nullptr, {"tcp"}));
  EXPECT_TRUE(shared_memory(nullptr));
}

TEST(UcxTls, AListOpensWhatItNamesByNameOrAlias) {
  EXPECT_TRUE(tls_may_open("tcp", {"tcp"}));
  EXPECT_FALSE(shared_memory("tcp"));
  EXPECT_TRUE(shared_memory("tcp,sm,self"));
  EXPECT_TRUE(shared_memory("self,posix"));
  EXPECT_FALSE(tls_may_open("sm,self", {"tcp"}));
  EXPECT_TRUE(tls_may_open("all", {"tcp"}));
  EXPECT_FALSE(tls_may_open("", {"tcp"}));
  EXPECT_FALSE(tls_may_open("tcpx", {"tcp"})) << "a name is matched whole";
}

TEST(UcxTls, ACaretListOpensWhatItDoesNotName) {
  EXPECT_TRUE(shared_memory("^cma"));
  EXPECT_TRUE(tls_may_open("^cma", {"tcp"}));
  EXPECT_FALSE(shared_memory("^sm"));
  EXPECT_FALSE(tls_may_open("^cma,tcp", {"tcp"}));
}

}  // namespace
}  // namespace ferry::transport
