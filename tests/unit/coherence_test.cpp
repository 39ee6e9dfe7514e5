// The coherence layer on its own: copies on a memory node, the host made
// stale and brought up to date, a node lost with and without lineage. The
// node is a test double for a GPU or a remote host (its memory is a map of
// byte vectors, and it can be lost or reconnected); the buffers are real
// buffers of a real runtime.
#include "data/coherence.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <memory>
#include <vector>

#include "ferry/error.hpp"
#include "runtime_test_support.hpp"

namespace ferry::detail {
namespace {

class FakeNode final : public NodeLink {
 public:
  explicit FakeNode(MemoryNodeId node) : node_(node) {}

  MemoryNodeId node() const noexcept override { return node_; }
  bool alive() const noexcept override { return alive_; }
  std::uint64_t epoch() const noexcept override { return epoch_; }
  // A real node keeps the roots to bring them home at shutdown; counting is enough here.
  void hold(const std::shared_ptr<BufferRoot>&) override { ++holds; }
  std::uint64_t ship(const HostRegion& source) override {
    require_alive();
    ++ships;
    const std::uint64_t id = next_id_++;
    std::vector<char>& bytes = memory[id];
    bytes.resize(source.bytes());
    const std::size_t row = source.cols * size_of(source.dtype);
    for (std::size_t r = 0; r < source.rows; ++r)
      std::memcpy(bytes.data() + r * row, static_cast<const char*>(source.data) + r * source.ld * size_of(source.dtype),
                  row);
    return id;
  }
  std::uint64_t allocate(const HostRegion& shape) override {
    require_alive();
    const std::uint64_t id = next_id_++;
    memory[id].assign(shape.bytes(), 0);
    return id;
  }
  void fetch(std::uint64_t id, const HostRegion& dest) override {
    require_alive();
    ++fetches;
    const std::vector<char>& bytes = memory.at(id);
    const std::size_t row = dest.cols * size_of(dest.dtype);
    for (std::size_t r = 0; r < dest.rows; ++r)
      std::memcpy(static_cast<char*>(dest.data) + r * dest.ld * size_of(dest.dtype), bytes.data() + r * row, row);
  }
  void drop(std::uint64_t id) noexcept override {
    ++drops;
    memory.erase(id);
  }
  // Host to host: another FakeNode's copy, straight from its memory, when `direct`.
  std::optional<std::uint64_t> copy_from(NodeLink& source, std::uint64_t source_id, const HostRegion&) override {
    auto* peer = dynamic_cast<FakeNode*>(&source);
    if (!direct || peer == nullptr || !alive_ || !peer->alive_ || !peer->memory.contains(source_id)) return std::nullopt;
    ++copies_in;
    const std::uint64_t id = next_id_++;
    memory[id] = peer->memory.at(source_id);
    return id;
  }

  // What a crashed host or a failed GPU looks like from here: everything it held is gone.
  void lose() {
    alive_ = false;
    memory.clear();
  }
  // Back, as a new session: copies of the old one do not exist any more.
  void reconnect() {
    alive_ = true;
    ++epoch_;
    memory.clear();
  }
  // What a kernel running on the node would do to a copy.
  void write(std::uint64_t id, double value) {
    auto& bytes = memory.at(id);
    std::vector<double> values(bytes.size() / sizeof(double), value);
    std::memcpy(bytes.data(), values.data(), bytes.size());
  }

  std::map<std::uint64_t, std::vector<char>> memory;
  int ships = 0, fetches = 0, drops = 0, holds = 0, copies_in = 0;
  bool direct = true;  // copy_from works (false: as a node pair that cannot, or a move that failed)

 private:
  void require_alive() const {
    if (!alive_) throw RemoteError("fake node: lost");
  }
  MemoryNodeId node_;
  bool alive_ = true;
  std::uint64_t epoch_ = 1;
  std::uint64_t next_id_ = 1;
};

class Coherence : public ::testing::Test {
 protected:
  FakeNode node{7};  // outlives the runtime and its buffers, which drop their copies on it
  FakeNode other{8};  // a second host, for host-to-host moves
  Runtime rt{testing::quiet_options(1)};
  Buffer<double> x = rt.buffer<double>(4, 4);
  BufferState& view = *x.state();

  void fill_host(double value) { std::fill_n(static_cast<double*>(view.root->host), 16, value); }
  bool host_holds(double value) {
    const double* data = static_cast<const double*>(view.root->host);
    return std::all_of(data, data + 16, [&](double v) { return v == value; });
  }
  std::vector<MemoryNodeId> where() { return valid_nodes(view, {}); }
  // What a remote records for a task that wrote the whole of x there with
  // `kernel`(x, value): replayed on the host if the copy is lost.
  std::shared_ptr<LineageEntry> lineage_of(const char* kernel, AccessMode mode, double value) {
    const KernelDef* def = KernelRegistry::global().find(kernel);
    EXPECT_NE(def, nullptr) << kernel;
    auto entry = std::make_shared<LineageEntry>();
    entry->name = std::string("remote ") + kernel;
    entry->kernel = std::shared_ptr<const KernelDef>(std::shared_ptr<const KernelDef>{}, def);
    entry->args.items = {Arg{BufferArg{nullptr, DType::f64, 4, 4, 4, mode}}, Arg{ScalarValue{value}}};
    entry->buffer_args = {0};
    entry->roots = {view.root};
    entry->regions = {view.region};
    return entry;
  }
  bool valid_on(MemoryNodeId n) {
    const auto nodes = where();
    return std::find(nodes.begin(), nodes.end(), n) != nodes.end();
  }
};

TEST_F(Coherence, ShipsOnceAndReusesTheCopy) {
  fill_host(1.0);
  const std::uint64_t id = acquire_on_node(view, AccessMode::read, node);
  release_on_node(view, node, id);
  EXPECT_EQ(acquire_on_node(view, AccessMode::read, node), id);
  release_on_node(view, node, id);
  EXPECT_EQ(node.ships, 1);
  EXPECT_TRUE(valid_on(7));
  EXPECT_TRUE(valid_on(host_node)) << "a shared copy leaves the host valid";
}

TEST_F(Coherence, WrittenOnTheNodeTheHostIsStaleUntilFetched) {
  fill_host(1.0);
  const std::uint64_t id = acquire_on_node(view, AccessMode::readwrite, node);
  node.write(id, 5.0);
  written_on_node(view, node, id, nullptr);
  release_on_node(view, node, id);
  EXPECT_FALSE(valid_on(host_node));
  EXPECT_TRUE(valid_on(7));

  acquire_on_host(view, AccessMode::read);
  EXPECT_EQ(node.fetches, 1);
  EXPECT_TRUE(host_holds(5.0));
  EXPECT_TRUE(valid_on(host_node));
  EXPECT_TRUE(valid_on(7)) << "a read on the host keeps the node's copy";
}

TEST_F(Coherence, AHostWriteDropsTheNodesCopies) {
  const std::uint64_t id = acquire_on_node(view, AccessMode::read, node);
  release_on_node(view, node, id);
  acquire_on_host(view, AccessMode::write);
  EXPECT_EQ(node.drops, 1);
  EXPECT_TRUE(node.memory.empty());
  EXPECT_FALSE(valid_on(7));
}

TEST_F(Coherence, ALostNodesDataIsRecomputedFromLineage) {
  const std::uint64_t id = acquire_on_node(view, AccessMode::write, node);
  node.write(id, 5.0);
  auto lineage = lineage_of("fill", AccessMode::write, 5.0);
  written_on_node(view, node, id, lineage);
  release_on_node(view, node, id);

  node.lose();
  acquire_on_host(view, AccessMode::read);
  EXPECT_EQ(node.fetches, 0) << "nothing can be fetched from a lost node";
  EXPECT_TRUE(host_holds(5.0)) << "the fill was not replayed on the host";
  EXPECT_TRUE(lineage->replayed.load());
}

// A copy written on its node again and again (a long chain there) keeps a
// lineage entry per write until its data comes home. Once it was written
// lineage_limit times, checkpoint_on_node brings it home: the lineage starts
// afresh and a loss afterwards replays only what came after.
TEST_F(Coherence, ACopyWrittenManyTimesIsBroughtHomeAndItsLineageCut) {
  fill_host(1.0);
  const std::size_t limit = lineage_limit(16 * sizeof(double));
  ASSERT_GE(limit, 4096u);
  std::shared_ptr<LineageEntry> last;
  auto write_once = [&](double value) {
    const std::uint64_t id = acquire_on_node(view, AccessMode::readwrite, node);
    node.write(id, value);
    last = lineage_of("scal", AccessMode::readwrite, 2.0);
    written_on_node(view, node, id, last);
    release_on_node(view, node, id);
  };
  auto lineage_length = [&] {
    for (const auto& copy : view.root->copies)
      if (copy->link == &node) return copy->lineage.size();
    return std::size_t{0};
  };
  for (std::size_t i = 0; i + 1 < limit; ++i) write_once(2.0);
  EXPECT_FALSE(checkpoint_on_node(view, node)) << "due before the limit";
  EXPECT_EQ(node.fetches, 0);
  write_once(2.0);
  EXPECT_EQ(lineage_length(), limit);
  EXPECT_TRUE(checkpoint_on_node(view, node));
  EXPECT_EQ(node.fetches, 1);
  EXPECT_EQ(lineage_length(), 0u) << "the lineage was not cut";
  EXPECT_TRUE(host_holds(2.0)) << "the checkpoint did not bring the data home";
  EXPECT_TRUE(valid_on(7)) << "the node's copy stays valid";
  EXPECT_FALSE(checkpoint_on_node(view, node)) << "due again at once";

  // Written once more, then lost: only that write is replayed, from the
  // checkpoint's data (2 * 2), not the thousands before it.
  write_once(4.0);
  EXPECT_EQ(lineage_length(), 1u);
  node.lose();
  acquire_on_host(view, AccessMode::read);
  EXPECT_TRUE(last->replayed.load());
  EXPECT_TRUE(host_holds(4.0)) << "the replay did not start from the checkpoint";
}

// Writes sent to the node count toward the limit before their replies come
// (a forwarded chain runs ahead of them): with the limit of writes acquired
// and none of them answered yet, the copy is due, and is due no more once
// it has been brought home.
TEST_F(Coherence, WritesNotYetAnsweredCountTowardTheCheckpoint) {
  fill_host(1.0);
  const std::size_t limit = lineage_limit(16 * sizeof(double));
  const std::uint64_t first = acquire_on_node(view, AccessMode::readwrite, node);
  node.write(first, 2.0);
  written_on_node(view, node, first, lineage_of("scal", AccessMode::readwrite, 2.0));
  release_on_node(view, node, first);
  ASSERT_FALSE(checkpoint_on_node(view, node));
  // Brought home once (as by a checkpoint): the copy is the host's again, unmodified.
  acquire_on_host(view, AccessMode::read);
  ASSERT_TRUE(host_holds(2.0));
  std::vector<std::uint64_t> in_flight;
  for (std::size_t i = 0; i + 1 < limit; ++i) in_flight.push_back(acquire_on_node(view, AccessMode::readwrite, node));
  EXPECT_FALSE(checkpoint_due(view, node)) << "due before the limit";
  in_flight.push_back(acquire_on_node(view, AccessMode::readwrite, node));
  EXPECT_TRUE(checkpoint_due(view, node)) << "writes still in flight did not count toward the limit";
  for (std::uint64_t id : in_flight) {
    written_on_node(view, node, id, lineage_of("scal", AccessMode::readwrite, 1.0));
    release_on_node(view, node, id);
  }
  EXPECT_TRUE(checkpoint_on_node(view, node));
  EXPECT_FALSE(checkpoint_due(view, node)) << "due again at once";
}

TEST_F(Coherence, ALostNodesDataWithoutLineageIsAClearError) {
  const std::uint64_t id = acquire_on_node(view, AccessMode::write, node);
  written_on_node(view, node, id, nullptr);
  release_on_node(view, node, id);
  node.lose();
  try {
    acquire_on_host(view, AccessMode::read);
    FAIL() << "no error for data that is gone";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("no lineage"), std::string::npos) << e.what();
  }
}

TEST_F(Coherence, AReconnectedNodeGetsTheDataShippedAgain) {
  fill_host(3.0);
  const std::uint64_t first = acquire_on_node(view, AccessMode::read, node);
  release_on_node(view, node, first);
  node.reconnect();
  const std::uint64_t second = acquire_on_node(view, AccessMode::read, node);
  release_on_node(view, node, second);
  EXPECT_NE(first, second);
  EXPECT_EQ(node.ships, 2);
  EXPECT_EQ(node.drops, 0) << "a copy of an old session is not dropped on the new one";
}

TEST_F(Coherence, AModifiedCopyOfAnOverlappingRegionMakesTheHostStale) {
  auto halves = x.split(2);
  BufferState& top = *halves[0].state();
  const std::uint64_t id = acquire_on_node(top, AccessMode::write, node);
  written_on_node(top, node, id, nullptr);
  release_on_node(top, node, id);
  const auto nodes = where();  // the whole buffer
  EXPECT_EQ(std::count(nodes.begin(), nodes.end(), host_node), 0) << "half of the host's data is stale";
  EXPECT_EQ(std::count(nodes.begin(), nodes.end(), MemoryNodeId{7}), 0) << "the node holds only half";
  EXPECT_TRUE(valid_nodes(*halves[1].state(), {}) == std::vector<MemoryNodeId>{host_node});
}

TEST_F(Coherence, LocalGpusReadAUnifiedBufferInPlace) {
  // Without a GPU a unified buffer is an ordinary host buffer; marked
  // unified here, the query must list the in-place readers it is given.
  view.root->unified = true;
  const auto nodes = valid_nodes(view, {3, 4});
  EXPECT_TRUE((nodes == std::vector<MemoryNodeId>{host_node, 3, 4}));
  view.root->unified = false;
}

// ---- host to host: twins ----

// Data written on `node` (its only valid copy, 2.0 everywhere); returns the copy's id.
std::uint64_t written_on(FakeNode& n, BufferState& v, double value) {
  const std::uint64_t id = acquire_on_node(v, AccessMode::write, n);
  n.write(id, value);
  written_on_node(v, n, id, nullptr);
  release_on_node(v, n, id);
  return id;
}

TEST_F(Coherence, HostToHostMakesATwinAndTheHostStaysStale) {
  fill_host(1.0);
  written_on(node, view, 2.0);
  const std::uint64_t twin = acquire_on_node(view, AccessMode::read, other);
  release_on_node(view, other, twin);
  EXPECT_EQ(other.copies_in, 1);
  EXPECT_EQ(other.ships, 0) << "nothing shipped from the host";
  EXPECT_EQ(node.fetches, 0) << "nothing fetched to the host";
  EXPECT_TRUE(valid_on(7));
  EXPECT_TRUE(valid_on(8));
  EXPECT_FALSE(valid_on(host_node)) << "the host is still stale";
  EXPECT_TRUE(host_holds(1.0));
  // A second read there uses the twin.
  EXPECT_EQ(acquire_on_node(view, AccessMode::read, other), twin);
  release_on_node(view, other, twin);
  EXPECT_EQ(other.copies_in, 1);
  // Host use brings it home once; both copies are shared afterwards.
  acquire_on_host(view, AccessMode::read);
  EXPECT_TRUE(host_holds(2.0));
  EXPECT_EQ(node.fetches + other.fetches, 1);
  EXPECT_TRUE(valid_on(host_node));
  EXPECT_TRUE(valid_on(7));
  EXPECT_TRUE(valid_on(8));
}

TEST_F(Coherence, ALostSourceComesHomeFromItsTwin) {
  fill_host(1.0);
  written_on(node, view, 2.0);
  release_on_node(view, other, acquire_on_node(view, AccessMode::read, other));
  node.lose();
  acquire_on_host(view, AccessMode::read);
  EXPECT_TRUE(host_holds(2.0)) << "from the twin; there was no lineage to recompute it";
  EXPECT_EQ(other.fetches, 1);
}

TEST_F(Coherence, WithoutADirectMoveTheDataGoesThroughTheHost) {
  fill_host(1.0);
  written_on(node, view, 2.0);
  other.direct = false;
  release_on_node(view, other, acquire_on_node(view, AccessMode::read, other));
  EXPECT_EQ(other.copies_in, 0);
  EXPECT_EQ(node.fetches, 1);
  EXPECT_EQ(other.ships, 1);
  EXPECT_TRUE(host_holds(2.0));
  EXPECT_TRUE(valid_on(host_node));
}

TEST_F(Coherence, AWriteOnTheTwinDropsTheSource) {
  fill_host(1.0);
  written_on(node, view, 2.0);
  const std::uint64_t twin = acquire_on_node(view, AccessMode::readwrite, other);
  EXPECT_EQ(other.copies_in, 1);
  other.write(twin, 3.0);
  written_on_node(view, other, twin, nullptr);
  release_on_node(view, other, twin);
  EXPECT_EQ(node.drops, 1) << "the source's copy is stale now";
  EXPECT_FALSE(valid_on(7));
  EXPECT_TRUE(valid_on(8));
  acquire_on_host(view, AccessMode::read);
  EXPECT_TRUE(host_holds(3.0));
}


// A chain that reads an input and moves between two hosts (each move a
// twin carrying the chain's whole lineage): the input's list of readers
// keeps the live ones, not one per move and lineage entry (quadratic:
// tens of thousands after a few hundred moves, megabytes of heap). A loss
// afterwards still recomputes the chain from the input.
TEST_F(Coherence, AChainMovingBetweenHostsKeepsItsInputsReadersFew) {
  Buffer<double> input = rt.buffer<double>(4, 4);
  BufferState& in = *input.state();
  std::fill_n(static_cast<double*>(in.root->host), 16, 0.5);
  fill_host(1.0);
  const KernelDef* axpy = KernelRegistry::global().find("axpy");
  ASSERT_NE(axpy, nullptr);
  constexpr int steps = 300;
  for (int i = 0; i < steps; ++i) {
    FakeNode& on = i % 2 == 0 ? node : other;
    release_on_node(in, on, acquire_on_node(in, AccessMode::read, on));
    const std::uint64_t id = acquire_on_node(view, AccessMode::readwrite, on);
    auto& bytes = on.memory.at(id);
    std::vector<double> values(16);
    std::memcpy(values.data(), bytes.data(), bytes.size());
    for (double& v : values) v += 1.0 * 0.5;  // axpy(alpha 1, input 0.5, x)
    std::memcpy(bytes.data(), values.data(), bytes.size());
    auto entry = std::make_shared<LineageEntry>();
    entry->name = "remote axpy";
    entry->kernel = std::shared_ptr<const KernelDef>(std::shared_ptr<const KernelDef>{}, axpy);
    entry->args.items = {Arg{BufferArg{nullptr, DType::f64, 4, 4, 4, AccessMode::read}},
                         Arg{BufferArg{nullptr, DType::f64, 4, 4, 4, AccessMode::readwrite}}, Arg{ScalarValue{1.0}}};
    entry->buffer_args = {0, 1};
    entry->roots = {in.root, view.root};
    entry->regions = {in.region, view.region};
    written_on_node(view, on, id, entry);
    release_on_node(view, on, id);
  }
  EXPECT_LE(in.root->lineage_readers.size(), 4u * steps)
      << "readers of copies that went stale are kept (" << in.root->lineage_readers.size() << ")";
  EXPECT_GE(in.root->lineage_readers.size(), static_cast<std::size_t>(steps)) << "the live copy's readers are gone";

  // The chain's last host lost (its twin went stale at the last write):
  // the whole chain is recomputed from the input's bytes.
  (steps % 2 == 0 ? other : node).lose();
  acquire_on_host(view, AccessMode::read);
  EXPECT_TRUE(host_holds(1.0 + 0.5 * steps)) << static_cast<const double*>(view.root->host)[0];
}

}  // namespace
}  // namespace ferry::detail
