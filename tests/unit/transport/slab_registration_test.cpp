// Pooled memory registered with UCX slab by slab.
#include <gtest/gtest.h>

#include "ferry/allocator/pinned_pool.hpp"
#include "ferry/allocator/slab_pool.hpp"
#include "transport_test_support.hpp"

namespace ferry::transport {
namespace {

using namespace std::chrono_literals;
using namespace test_support;

// Pooled memory is registered with UCX once per slab, as the pool grows and
// as trim() returns slabs; payloads sent from and received into registered
// slabs (handed to UCX with their memory handle) arrive bit-exact, eager and
// rendezvous alike.
TEST(SlabRegistration, FollowsPoolGrowthAndTrimAndCarriesPooledPayloads) {
  for (const Protocol protocol : {Protocol::rendezvous, Protocol::eager}) {
    ScopedEnv env("UCX_RNDV_THRESH", rndv_thresh(protocol));
    SlabPool::Options options;
    options.slab_bytes = std::size_t{1} << 20;
    options.retain_dedicated_slabs = 0;
    auto server_pool = std::make_shared<SlabPool>(make_mmap_source(false), options);
    auto client_pool = std::make_shared<SlabPool>(make_mmap_source(false), options);

    // The server lands each payload in a block of its pool and echoes it from there.
    Server server([server_pool](Connection& connection, Incoming& in) {
      const std::size_t bytes = in.payload_bytes();
      void* block = server_pool->allocate(bytes);
      Bytes header(in.header().begin(), in.header().end());
      in.into(block, [self = connection.shared_from_this(), header, block, bytes, server_pool](const std::string&) {
        self->send(header, block, bytes,
                   [block, bytes, server_pool](const std::string&) { server_pool->deallocate(block, bytes); });
      });
    });
    server.worker->register_slabs(server_pool);
    auto worker = Worker::create({"client"});
    worker->register_slabs(client_pool);
    EXPECT_EQ(worker->registered_slabs(), 0u);

    const std::size_t small = 256 << 10, large = 3 << 20;  // a shared slab, then a dedicated one
    auto* a = static_cast<std::byte*>(client_pool->allocate(small));
    auto* b = static_cast<std::byte*>(client_pool->allocate(large));
    EXPECT_EQ(worker->registered_slabs(), 2u);
    EXPECT_EQ(client_pool->stats().slabs, 2u);
    {
      Client client(server.listener->port(), worker);
      std::size_t sent = 0;
      for (auto [block, bytes] : {std::pair{a, small}, std::pair{b, large}}) {
        const Bytes payload = random_bytes(bytes, static_cast<unsigned>(bytes));
        std::memcpy(block, payload.data(), bytes);
        ASSERT_EQ(send_and_wait(*client.connection, text_bytes("pooled"), block, bytes), "");
        auto got = client.inbox.wait(++sent, 30s);
        ASSERT_EQ(got.size(), sent);
        EXPECT_EQ(got.back().error, "");
        EXPECT_TRUE(got.back().payload == payload) << bytes << " bytes differ after the echo";
      }
      EXPECT_GE(server.worker->registered_slabs(), 1u);
    }
    client_pool->deallocate(b, large);
    client_pool->trim();
    EXPECT_EQ(client_pool->stats().slabs, 1u);
    EXPECT_EQ(worker->registered_slabs(), 1u) << "trim() returned a slab that stayed registered";
    client_pool->deallocate(a, small);
  }
}

}  // namespace
}  // namespace ferry::transport
