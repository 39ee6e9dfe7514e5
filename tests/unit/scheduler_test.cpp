// Placement with synthetic devices, models and links: no real device runs.
#include "ferry/runtime/scheduler.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ferry/error.hpp"

namespace ferry {
namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr MemoryNodeId gpu_node = 1;

DeviceSnapshot device(DeviceId id, std::string name, DeviceKind kind, MemoryNodeId node) {
  DeviceSnapshot d;
  d.id = id;
  d.name = name;
  d.kind = kind;
  d.node = node;
  d.perf_key = std::move(name);
  return d;
}

// Enough runs in the bucket of `bytes` that the model counts as calibrated.
void calibrate(PerfModels& models, const std::string& kernel, const std::string& key, std::size_t bytes,
               double seconds) {
  for (int i = 0; i < 3; ++i) models.record(kernel, key, bytes, seconds);
}

struct Fixture : ::testing::Test {
  PerfModels models;
  LinkModels links;
  DecisionInput input;

  void SetUp() override {
    input.kernel = "scale";
    input.models = &models;
    input.links = &links;
  }
  // One input of `bytes` valid on `nodes`; the call touches that much.
  void one_input(std::size_t bytes, std::vector<MemoryNodeId> nodes) {
    input.bytes = bytes;
    input.inputs = {InputSnapshot{bytes, std::move(nodes)}};
  }
  // The CPU and one remote over a 1 GB/s link without latency, both
  // calibrated, and one MiB input on the host.
  void cpu_and_remote(double cpu_seconds, double remote_seconds) {
    input.devices = {device(0, "cpu", DeviceKind::cpu, host_node),
                     device(1, "remote:a:7070", DeviceKind::remote, gpu_node)};
    calibrate(models, "scale", "cpu", MiB, cpu_seconds);
    calibrate(models, "scale", "remote:a:7070", MiB, remote_seconds);
    links.set(host_node, gpu_node, Link{0, 1e9});
    links.set(gpu_node, host_node, Link{0, 1e9});
    one_input(MiB, {host_node});
  }
  const Candidate& candidate(const Decision& d, DeviceId id) {
    for (const auto& c : d.candidates)
      if (c.device == id) return c;
    throw std::logic_error("no candidate");
  }
};

using Heft = Fixture;

// The remote GPU computes 10x faster, but its inputs must cross a network link
// (1 ms latency): small calls stay on the CPU, large ones go remote.
TEST_F(Heft, SlowLinkMakesFastRemoteLoseSmallAndWinLarge) {
  input.devices = {device(0, "cpu", DeviceKind::cpu, host_node),
                   device(1, "remote:gpu1:7070/cuda:0", DeviceKind::remote, gpu_node)};
  for (std::size_t bytes : {64 * KiB, 256 * MiB}) {
    const double mib = static_cast<double>(bytes) / MiB;
    calibrate(models, "scale", "cpu", bytes, 1e-3 * mib);
    calibrate(models, "scale", "remote:gpu1:7070/cuda:0", bytes, 0.1e-3 * mib);
  }
  links.set(host_node, gpu_node, Link{1e-3, 10e9});

  one_input(64 * KiB, {host_node});
  Decision small = decide(input);
  EXPECT_EQ(small.device, 0u) << explain(small);
  EXPECT_EQ(small.reason, "earliest expected finish");
  EXPECT_NEAR(candidate(small, 1).data_ready, 1e-3 + 64.0 * KiB / 10e9, 1e-9);

  one_input(256 * MiB, {host_node});
  Decision large = decide(input);
  EXPECT_EQ(large.device, 1u) << explain(large);
  EXPECT_NEAR(candidate(large, 0).finish, 0.256, 1e-9);

  // Over a 100 MB/s link even the large call is cheaper at home.
  links.set(host_node, gpu_node, Link{1e-3, 100e6});
  EXPECT_EQ(decide(input).device, 0u);
}

// Two hosts of one kind share a performance model (one perf_key), but each
// is reached over its own link: a transfer-heavy task goes to the host on
// the faster link, a short task with little data to the one of lower
// latency, and a busy host's twin gets the next task.
TEST_F(Heft, EachRemoteIsWeighedWithItsOwnLink) {
  constexpr MemoryNodeId a_node = 1, b_node = 2;
  input.devices = {device(0, "remote:a:7070", DeviceKind::remote, a_node),
                   device(1, "remote:b:7070", DeviceKind::remote, b_node)};
  for (auto& d : input.devices) d.perf_key = "remote:cpu-2t";
  calibrate(models, "scale", "remote:cpu-2t", 64 * MiB, 5e-3);
  calibrate(models, "scale", "remote:cpu-2t", 4 * KiB, 1e-4);
  // a: 1 Gbit/s but 2 ms away; b: 100 Mbit/s, 0.2 ms away.
  links.set(host_node, a_node, Link{2e-3, 125e6});
  links.set(host_node, b_node, Link{0.2e-3, 12.5e6});
  input.devices[0].round_trip = 4e-3;
  input.devices[1].round_trip = 0.4e-3;

  one_input(64 * MiB, {host_node});
  const Decision heavy = decide(input);
  EXPECT_EQ(heavy.device, 0u) << explain(heavy);
  EXPECT_NEAR(candidate(heavy, 0).finish, 2e-3 + 64.0 * MiB / 125e6 + 4e-3 + 5e-3, 1e-9);
  EXPECT_NE(explain(heavy).find("rtt ms"), std::string::npos) << explain(heavy);

  one_input(4 * KiB, {host_node});
  const Decision light = decide(input);
  EXPECT_EQ(light.device, 1u) << explain(light);

  input.devices[1].busy_until = 50e-3;
  EXPECT_EQ(decide(input).device, 0u) << explain(decide(input));
}

// An input that one remote host wrote reaches another through the client:
// both hops count, not an unknown (infinite) direct link.
TEST_F(Heft, DataBetweenTwoHostsCostsBothHopsThroughTheClient) {
  constexpr MemoryNodeId a_node = 1, b_node = 2;
  input.devices = {device(0, "remote:a:7070", DeviceKind::remote, a_node),
                   device(1, "remote:b:7070", DeviceKind::remote, b_node)};
  links.set(a_node, host_node, Link{1e-3, 1e9});
  links.set(host_node, b_node, Link{2e-3, 1e8});
  one_input(MiB, {a_node});
  const Decision d = decide(input);
  EXPECT_EQ(candidate(d, 0).data_ready, 0.0);
  EXPECT_NEAR(candidate(d, 1).data_ready, 1e-3 + MiB / 1e9 + 2e-3 + MiB / 1e8, 1e-12) << explain(d);
}

// What a remote task writes comes home after it ran: a task that makes much
// from little stays on the CPU when the way back is slow.
TEST_F(Heft, ARemoteTasksResultsComeHomeOverItsLink) {
  constexpr MemoryNodeId a_node = 1;
  input.devices = {device(0, "cpu", DeviceKind::cpu, host_node),
                   device(1, "remote:a:7070", DeviceKind::remote, a_node)};
  calibrate(models, "scale", "cpu", 64 * MiB, 20e-3);
  calibrate(models, "scale", "remote:a:7070", 64 * MiB, 2e-3);
  links.set(host_node, a_node, Link{1e-4, 1e9});
  links.set(a_node, host_node, Link{1e-4, 1e9});
  one_input(KiB, {host_node});
  input.bytes = 64 * MiB;
  EXPECT_EQ(decide(input).device, 1u) << explain(decide(input));  // nothing written: the remote wins
  input.output_bytes = 64 * MiB;                                    // 67 ms home at 1 GB/s
  const Decision d = decide(input);
  EXPECT_EQ(d.device, 0u) << explain(d);
  EXPECT_NEAR(candidate(d, 1).round_trip, 64.0 * MiB / 1e9, 1e-9);
}

TEST_F(Heft, BusyDeviceLosesToIdleSlowerOne) {
  input.devices = {device(0, "cuda:0", DeviceKind::cuda, gpu_node), device(1, "cpu", DeviceKind::cpu, host_node)};
  input.devices[0].busy_until = 10e-3;
  calibrate(models, "scale", "cuda:0", MiB, 1e-3);
  calibrate(models, "scale", "cpu", MiB, 3e-3);
  one_input(MiB, {host_node, gpu_node});
  const Decision d = decide(input);
  EXPECT_EQ(d.device, 1u) << explain(d);
  EXPECT_DOUBLE_EQ(candidate(d, 0).finish, 11e-3);
  EXPECT_DOUBLE_EQ(candidate(d, 1).finish, 3e-3);

  input.devices[0].busy_until = 1e-3;  // now the GPU finishes first despite its queue
  EXPECT_EQ(decide(input).device, 0u);
}

// Not when it cannot win: a remote whose link alone takes longer than the
// CPU's whole estimate gets no task to be measured with.
// Estimates a few percent apart do not send a task away: a remote must
// finish a tenth sooner than the local device; beyond that it wins.
// An input whose writer is still to finish is ready then, not now: where it
// is, after the writer; elsewhere, after the writer and the transfer.
TEST_F(Heft, AnInputStillBeingWrittenIsReadyWhenItsWriterIsExpectedDone) {
  input.devices = {device(0, "cpu", DeviceKind::cpu, host_node),
                   device(1, "remote:a:7070", DeviceKind::remote, gpu_node)};
  calibrate(models, "scale", "cpu", MiB, 1e-3);
  calibrate(models, "scale", "remote:a:7070", MiB, 0.1e-3);
  links.set(host_node, gpu_node, Link{1e-3, 1e9});
  one_input(MiB, {host_node});
  input.inputs[0].available_in = 5e-3;
  const Decision d = decide(input);
  EXPECT_NEAR(candidate(d, 0).data_ready, 5e-3, 1e-9) << explain(d);
  EXPECT_NEAR(candidate(d, 1).data_ready, 5e-3 + 1e-3 + double(MiB) / 1e9, 1e-9) << explain(d);
  EXPECT_EQ(d.device, 0u) << explain(d);  // 6 ms at home against 7.2 there
}

// Tasks placed on one remote share its link: the bytes of those already
// placed there go first, so a burst of small tasks does not each assume
// the link to itself.
TEST_F(Heft, ARemotesBytesWaitBehindThoseOfTasksAlreadyPlacedThere) {
  cpu_and_remote(10e-3, 0.1e-3);
  input.output_bytes = MiB;
  Decision d = decide(input);
  EXPECT_EQ(d.device, 1u) << explain(d);
  EXPECT_NEAR(candidate(d, 1).link_seconds, 2.0 * MiB / 1e9, 1e-9) << "a MiB there and a MiB home";
  EXPECT_NEAR(candidate(d, 1).data_ready, double(MiB) / 1e9, 1e-9);
  input.devices[1].link_busy_until = 20e-3;  // what is already placed there moves first
  d = decide(input);
  EXPECT_NEAR(candidate(d, 1).data_ready, 20e-3 + double(MiB) / 1e9, 1e-9) << explain(d);
  EXPECT_EQ(d.device, 0u) << explain(d);
}

// A device's queue may be long with tasks still waiting for their
// predecessors (a tiled factorisation placed at submission); a task ready
// now runs before those as they become ready, so it waits for the ready
// part only. Without that, independent small tasks beside a factorisation
// fled to a remote and their results came home last.
TEST_F(Heft, ATaskReadyNowWaitsOnlyForTheWorkReadyBeforeIt) {
  cpu_and_remote(0.1e-3, 0.1e-3);
  input.devices[0].busy_until = 12e-3;       // a factorisation's tiles, most waiting for others
  input.devices[0].ready_busy_until = 0.4e-3;  // the one tile ready now
  Decision d = decide(input);
  EXPECT_EQ(d.device, 1u) << "not known to be ready: it queues behind everything\n" << explain(d);
  EXPECT_NEAR(candidate(d, 0).ready, 12e-3, 1e-9);
  input.ready_now = true;
  d = decide(input);
  EXPECT_NEAR(candidate(d, 0).ready, 0.4e-3, 1e-9) << explain(d);
  EXPECT_EQ(d.device, 0u) << explain(d);
}

TEST_F(Heft, ARemoteMustWinByATenth) {
  input.devices = {device(0, "cpu", DeviceKind::cpu, host_node),
                   device(1, "remote:a:7070", DeviceKind::remote, gpu_node)};
  calibrate(models, "scale", "cpu", MiB, 10e-3);
  calibrate(models, "scale", "remote:a:7070", MiB, 9.5e-3);  // 5 % sooner
  one_input(MiB, {host_node, gpu_node});
  Decision d = decide(input);
  EXPECT_EQ(d.device, 0u) << explain(d);
  EXPECT_EQ(d.reason, "earliest expected finish, a remote host needing a tenth less to be chosen") << explain(d);
  calibrate(models, "scale", "remote:a:7070", MiB, 8e-3);  // the median moves to 8 ms: a fifth sooner
  calibrate(models, "scale", "remote:a:7070", MiB, 8e-3);
  d = decide(input);
  EXPECT_EQ(d.device, 1u) << explain(d);
  EXPECT_EQ(d.reason, "earliest expected finish") << explain(d);
}

TEST_F(Heft, AnUncalibratedDeviceThatCannotWinEvenWithAFreeKernelIsNotExplored) {
  input.devices = {device(0, "cpu", DeviceKind::cpu, host_node),
                   device(1, "remote:b:7070", DeviceKind::remote, gpu_node)};
  calibrate(models, "scale", "cpu", MiB, 1e-3);
  links.set(host_node, gpu_node, Link{50e-6, 12.5e6});  // 100 Mbit/s: 84 ms for 1 MiB
  one_input(MiB, {host_node});
  Decision d = decide(input);
  EXPECT_EQ(d.device, 0u) << explain(d);
  EXPECT_EQ(d.reason, "earliest expected finish") << explain(d);
  // The same link fast enough that the remote might win: it is explored.
  links.set(host_node, gpu_node, Link{50e-6, 10e9});
  d = decide(input);
  EXPECT_EQ(d.device, 1u) << explain(d);
  EXPECT_EQ(d.reason, "calibrating remote:b:7070 (0 runs in this size bucket)") << explain(d);
}

TEST_F(Heft, UncalibratedDeviceIsExplored) {
  input.devices = {device(0, "cpu", DeviceKind::cpu, host_node), device(1, "cuda:0", DeviceKind::cuda, gpu_node)};
  calibrate(models, "scale", "cpu", MiB, 1e-3);
  // The hint makes the GPU look hopeless; only a run can tell.
  input.devices[1].peak = DevicePeak{.flops_per_second = 1, .bytes_per_second = 1, .launch_seconds = 1};
  input.hint = Cost{1e6, 1e6};
  links.set(host_node, gpu_node, Link{1e-5, 10e9});
  one_input(MiB, {host_node});
  Decision d = decide(input);
  EXPECT_EQ(d.device, 1u) << explain(d);
  EXPECT_EQ(d.reason, "calibrating cuda:0 (0 runs in this size bucket)");

  models.record("scale", "cuda:0", MiB, 0.2e-3);
  d = decide(input);
  EXPECT_EQ(d.device, 1u);
  EXPECT_EQ(d.reason, "calibrating cuda:0 (1 runs in this size bucket)");

  models.record("scale", "cuda:0", MiB, 0.2e-3);
  models.record("scale", "cuda:0", MiB, 50e-3);  // calibrated now; the median shrugs off the slow run
  d = decide(input);
  EXPECT_EQ(d.device, 1u);
  EXPECT_EQ(d.reason, "earliest expected finish");
}

TEST_F(Heft, ABurstDoesNotFloodTheDeviceBeingExplored) {
  input.devices = {device(0, "cpu", DeviceKind::cpu, host_node), device(1, "cuda:0", DeviceKind::cuda, gpu_node)};
  calibrate(models, "scale", "cpu", MiB, 1e-3);
  input.devices[1].peak = DevicePeak{.flops_per_second = 1, .bytes_per_second = 1, .launch_seconds = 1};
  input.hint = Cost{1e6, 1e6};
  links.set(host_node, gpu_node, Link{1e-5, 10e9});
  one_input(MiB, {host_node});
  input.devices[1].queued = 2;  // two exploration tasks already wait there, unmeasured
  const Decision d = decide(input);
  EXPECT_EQ(d.device, 0u) << explain(d);
  EXPECT_EQ(d.reason, "earliest expected finish");
}

TEST_F(Heft, ExploresTheLeastMeasuredFirst) {
  input.devices = {device(0, "cpu", DeviceKind::cpu, host_node), device(1, "cuda:0", DeviceKind::cuda, host_node),
                   device(2, "cuda:1", DeviceKind::cuda, host_node)};
  models.record("scale", "cpu", MiB, 1e-3);
  models.record("scale", "cpu", MiB, 1e-3);
  models.record("scale", "cuda:0", MiB, 1e-3);
  models.record("scale", "cuda:1", MiB, 1e-3);
  input.devices[1].busy_until = 5e-3;
  one_input(MiB, {host_node});
  EXPECT_EQ(decide(input).device, 2u);  // ties on runs: the less busy one
}

TEST_F(Heft, DataAlreadyOnTheNodeCostsNothing) {
  input.devices = {device(0, "cpu", DeviceKind::cpu, host_node), device(1, "cuda:0", DeviceKind::cuda, gpu_node)};
  calibrate(models, "scale", "cpu", 64 * MiB, 64e-3);
  calibrate(models, "scale", "cuda:0", 64 * MiB, 1e-3);
  one_input(64 * MiB, {gpu_node});  // no link known: the CPU could never get it
  const Decision d = decide(input);
  EXPECT_EQ(d.device, 1u);
  EXPECT_EQ(candidate(d, 1).data_ready, 0.0);
  EXPECT_TRUE(std::isinf(candidate(d, 0).data_ready));
}

TEST_F(Heft, InputStillBeingProducedCostsNothing) {
  input.devices = {device(0, "cuda:0", DeviceKind::cuda, gpu_node), device(1, "cpu", DeviceKind::cpu, host_node)};
  calibrate(models, "scale", "cuda:0", MiB, 1e-3);
  calibrate(models, "scale", "cpu", MiB, 1e-3);
  one_input(MiB, {});
  const Decision d = decide(input);
  EXPECT_EQ(candidate(d, 0).data_ready, 0.0);
  EXPECT_EQ(candidate(d, 1).data_ready, 0.0);
  EXPECT_EQ(d.device, 0u);  // a full tie: input order
}

TEST_F(Heft, SlowestInputDecidesDataReady) {
  input.devices = {device(0, "cuda:0", DeviceKind::cuda, gpu_node), device(1, "cpu", DeviceKind::cpu, host_node)};
  input.devices[1].can_run = false;
  links.set(host_node, gpu_node, Link{0, 1e9});
  links.set(2, gpu_node, Link{0, 1e8});
  input.inputs = {InputSnapshot{MiB, {host_node}}, InputSnapshot{MiB, {host_node, 2}},
                  InputSnapshot{8 * MiB, {gpu_node}}};
  const Decision d = decide(input);
  EXPECT_DOUBLE_EQ(candidate(d, 0).data_ready, static_cast<double>(MiB) / 1e9);
  EXPECT_EQ(d.reason, "only eligible device");
  EXPECT_EQ(candidate(d, 0).exec.source, Estimate::Source::hint);
}

using Policies = Fixture;

TEST_F(Policies, EagerPicksTheLeastQueued) {
  input.policy = Policy::eager;
  input.devices = {device(0, "cpu", DeviceKind::cpu, host_node), device(1, "cuda:0", DeviceKind::cuda, gpu_node),
                   device(2, "cuda:1", DeviceKind::cuda, gpu_node + 1)};
  input.devices[0].queued = 3;
  input.devices[1].queued = 1;
  input.devices[1].busy_until = 2e-3;
  input.devices[2].queued = 1;
  input.devices[2].busy_until = 1e-3;
  one_input(MiB, {host_node});
  const Decision d = decide(input);
  EXPECT_EQ(d.device, 2u);
  EXPECT_EQ(d.reason, "least loaded");
}

TEST_F(Policies, CpuAndGpuPoliciesRestrict) {
  input.devices = {device(0, "cpu", DeviceKind::cpu, host_node), device(1, "cuda:0", DeviceKind::cuda, gpu_node),
                   device(2, "remote:h:1/cuda:0", DeviceKind::remote, gpu_node + 1)};
  calibrate(models, "scale", "cpu", MiB, 1e-3);
  calibrate(models, "scale", "cuda:0", MiB, 9e-3);
  calibrate(models, "scale", "remote:h:1/cuda:0", MiB, 5e-3);
  one_input(MiB, {});

  input.policy = Policy::gpu;
  Decision d = decide(input);
  EXPECT_EQ(d.device, 2u) << explain(d);
  EXPECT_FALSE(candidate(d, 0).eligible);

  input.policy = Policy::cpu;
  d = decide(input);
  EXPECT_EQ(d.device, 0u);
  EXPECT_EQ(d.reason, "only eligible device");
  EXPECT_FALSE(candidate(d, 1).eligible);
  EXPECT_FALSE(candidate(d, 2).eligible);
}

TEST_F(Policies, GpuPolicyWithoutGpuSaysSo) {
  input.policy = Policy::gpu;
  input.devices = {device(0, "cpu", DeviceKind::cpu, host_node)};
  try {
    decide(input);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("policy gpu: no GPU device"), std::string::npos) << e.what();
  }
}

TEST_F(Policies, RandomCoversEveryEligibleDevice) {
  input.policy = Policy::random;
  input.devices = {device(0, "cpu", DeviceKind::cpu, host_node), device(1, "cuda:0", DeviceKind::cuda, gpu_node),
                   device(2, "cuda:1", DeviceKind::cuda, gpu_node + 1),
                   device(3, "cuda:2", DeviceKind::cuda, gpu_node + 2)};
  input.devices[2].can_run = false;
  std::mt19937_64 rng(42);
  input.rng = &rng;
  std::vector<int> picks(4);
  for (int i = 0; i < 600; ++i) ++picks[decide(input).device];
  EXPECT_EQ(picks[2], 0);
  for (int i : {0, 1, 3}) EXPECT_GT(picks[i], 120) << "device " << i;

  input.rng = nullptr;
  EXPECT_THROW(decide(input), UsageError);
}

TEST_F(Policies, NoEligibleDeviceNamesEachDevice) {
  input.kernel = "potrf";
  input.devices = {device(0, "cpu", DeviceKind::cpu, host_node), device(1, "cuda:0", DeviceKind::cuda, gpu_node)};
  input.devices[0].can_run = false;
  input.devices[1].can_run = false;
  try {
    decide(input);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("potrf"), std::string::npos) << message;
    EXPECT_NE(message.find("cpu: cannot run kernel 'potrf'"), std::string::npos) << message;
    EXPECT_NE(message.find("cuda:0: cannot run kernel 'potrf'"), std::string::npos) << message;
  }
  input.devices.clear();
  EXPECT_THROW(decide(input), UsageError);
}

TEST(ParsePolicy, AcceptsNamesInAnyCase) {
  EXPECT_EQ(parse_policy("heft"), Policy::heft);
  EXPECT_EQ(parse_policy("HEFT"), Policy::heft);
  EXPECT_EQ(parse_policy("Eager"), Policy::eager);
  EXPECT_EQ(parse_policy("cpu"), Policy::cpu);
  EXPECT_EQ(parse_policy("GPU"), Policy::gpu);
  EXPECT_EQ(parse_policy("random"), Policy::random);
  for (Policy p : {Policy::heft, Policy::eager, Policy::cpu, Policy::gpu, Policy::random})
    EXPECT_EQ(parse_policy(to_string(p)), p);
}

TEST(ParsePolicy, UnknownNameListsTheValidOnes) {
  try {
    parse_policy("fastest");
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("fastest"), std::string::npos);
    EXPECT_NE(message.find("heft, eager, cpu, gpu, random"), std::string::npos) << message;
  }
  EXPECT_THROW(parse_policy(""), UsageError);
}

TEST_F(Heft, ExplainShowsEveryDeviceAndTheReason) {
  input.devices = {device(0, "cpu", DeviceKind::cpu, host_node), device(1, "cuda:0", DeviceKind::cuda, gpu_node),
                   device(2, "remote:gpu1:7070/cuda:0", DeviceKind::remote, gpu_node + 1)};
  input.devices[2].can_run = false;
  calibrate(models, "scale", "cpu", MiB, 4e-3);
  calibrate(models, "scale", "cuda:0", MiB, 1e-3);
  links.set(host_node, gpu_node, Link{1e-5, 10e9});
  one_input(MiB, {host_node});
  const std::string text = explain(decide(input));
  for (const char* name : {"cpu", "cuda:0", "remote:gpu1:7070/cuda:0"})
    EXPECT_NE(text.find(name), std::string::npos) << text;
  EXPECT_NE(text.find("* cuda:0"), std::string::npos) << text;
  EXPECT_NE(text.find("(history, 3)"), std::string::npos) << text;
  EXPECT_NE(text.find("policy heft: earliest expected finish"), std::string::npos) << text;
  // The last line says why in one line: the chosen device against the runner-up.
  const std::string last = text.substr(text.rfind('\n') + 1);
  EXPECT_NE(last.find("cuda:0 finishes in"), std::string::npos) << last;
  EXPECT_NE(last.find("vs cpu in 4."), std::string::npos) << last;
}

TEST(LinkModels, CostsLatencyPlusBytesOverBandwidth) {
  LinkModels links;
  EXPECT_EQ(links.seconds(1, 1, 1 << 30), 0.0);
  EXPECT_TRUE(std::isinf(links.seconds(0, 1, 1)));
  links.set(0, 1, Link{1e-3, 1e9});
  EXPECT_DOUBLE_EQ(links.seconds(0, 1, 1'000'000), 2e-3);
  EXPECT_TRUE(std::isinf(links.seconds(1, 0, 1)));  // directed
}

TEST(LinkModels, RecordLearnsAnUnknownLinkAndConverges) {
  LinkModels links;
  links.record(0, 1, 256 * MiB, 256.0 * MiB / 2e9);
  EXPECT_NEAR(links.get(0, 1).bytes_per_second, 2e9, 1e3);
  for (int i = 0; i < 40; ++i) {
    links.record(0, 1, 4 * KiB, 50e-6 + 4.0 * KiB / 2e9);  // small: refines the latency
    links.record(0, 1, 64 * MiB, 50e-6 + 64.0 * MiB / 1e9);  // the link got slower
  }
  const Link link = links.get(0, 1);
  EXPECT_NEAR(link.latency_seconds, 50e-6, 5e-6);
  EXPECT_NEAR(link.bytes_per_second, 1e9, 0.05e9);
  links.record(0, 1, MiB, std::nan(""));
  links.record(0, 1, MiB, -1);
  EXPECT_EQ(links.get(0, 1).bytes_per_second, link.bytes_per_second);
}

}  // namespace
}  // namespace ferry
