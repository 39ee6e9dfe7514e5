// One ferryd shared by several clients: per-client queues with weighted fair
// sharing of its lanes. The runs are sleep_ms (tests/plugins), which hold a
// CPU worker without using the CPU, and the assertions read the order in
// which ferryd gave lanes to runs (its audit log's task_start records), never
// a time.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ferry/transport/identity.hpp"
#include "ferryd_process.hpp"
#include "test_client.hpp"

namespace ferry::test {
namespace {

// Keys in an authorized_keys file, each with its options.
struct Keys {
  explicit Keys(std::filesystem::path dir) : dir(std::move(dir)) {}
  std::filesystem::path add(const std::string& name, const std::string& options = "") {
    auto pair = transport::KeyPair::generate();
    pair.write(dir / name);
    lines.push_back(transport::public_key_line(pair.public_key(), name) + (options.empty() ? "" : " " + options));
    return dir / name;
  }
  std::filesystem::path write() const {
    const auto path = dir / "authorized_keys";
    std::ofstream out(path, std::ios::trunc);
    for (const auto& line : lines) out << line << '\n';
    return path;
  }
  std::filesystem::path dir;
  std::vector<std::string> lines;
};

// A client signed in with its key, holding one 1 x 1 buffer per run it will
// send (runs on one buffer would wait for each other, not for a lane).
struct Client {
  Client(const FerrydProcess& server, const std::filesystem::path& key, const std::string& name, int runs)
      : connection(server.port(), name), runs(runs) {
    transport::DialOptions options;
    options.identity = transport::KeyPair::read(key);
    connection.connect(options);
    const double zero = 0;
    for (int i = 0; i < runs; ++i)
      EXPECT_EQ(connection.put(i + 1, proto::DType::f64, 1, 1, &zero, sizeof zero).status, proto::Status::ok);
  }
  // Sends every run without waiting for any.
  void send_all(double ms) {
    for (int i = 0; i < runs; ++i)
      connection.send(proto::Run{connection.next_request(), "sleep_ms", "nap",
                                 {TestClient::buffer(i + 1, proto::Mode::readwrite), TestClient::real(ms)}});
  }
  void wait_all() {
    for (int i = 0; i < runs; ++i) EXPECT_EQ(connection.next_as<proto::Done>().status, proto::Status::ok);
  }
  TestClient connection;
  int runs;
};

// Which client each run that got a lane belonged to, in the order it got one.
std::vector<std::string> start_order(const std::filesystem::path& audit) {
  std::vector<std::string> order;
  std::ifstream in(audit);
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record["event"] == "task_start") order.push_back(record["share"]);
  }
  return order;
}

std::string show(const std::vector<std::string>& order) {
  std::string text;
  for (const auto& who : order) text += who + " ";
  return text;
}

class FairShareTest : public ::testing::Test {
 protected:
  void SetUp() override { dir = make_temp_dir(); }
  void TearDown() override { std::filesystem::remove_all(dir); }
  // Two CPU workers (FerrydProcess's --workers 2): two lanes, so most runs
  // wait for one in ferryd.
  std::unique_ptr<FerrydProcess> start(const Keys& keys) {
    return std::make_unique<FerrydProcess>(std::vector<std::string>{
        "--plugin", FERRY_SLEEP_PLUGIN, "--audit-log", (dir / "audit.jsonl").string(),
        "--authorized-keys", keys.write().string()});
  }
  std::filesystem::path dir;
};

TEST_F(FairShareTest, AGreedyClientDoesNotStarveLightOnes) {
  Keys keys(dir);
  const auto greedy_key = keys.add("greedy");
  std::vector<std::filesystem::path> light_keys;
  for (const char* name : {"light1", "light2", "light3"}) light_keys.push_back(keys.add(name));
  auto server = start(keys);

  // Ten times the work of each light client, all of it sent first.
  constexpr int light_runs = 4, greedy_runs = 10 * light_runs;
  Client greedy(*server, greedy_key, "greedy-client", greedy_runs);
  std::vector<std::unique_ptr<Client>> lights;
  for (std::size_t i = 0; i < light_keys.size(); ++i)
    lights.push_back(std::make_unique<Client>(*server, light_keys[i], "light-client", light_runs));
  greedy.send_all(40);
  for (auto& light : lights) light->send_all(40);
  greedy.wait_all();
  for (auto& light : lights) light->wait_all();

  const auto order = start_order(dir / "audit.jsonl");
  ASSERT_EQ(order.size(), static_cast<std::size_t>(greedy_runs + 3 * light_runs)) << server->log();
  // The greedy client had both lanes before the others sent anything; from
  // then on four clients wait, and each light one's fair share is a quarter
  // of the lanes. Within 20 % of it, a light client's runs have all started
  // within light_runs / (0.8 * 1/4) starts of that point.
  const std::size_t head = 2, within = head + static_cast<std::size_t>(light_runs / (0.8 * 0.25));
  for (const char* name : {"light1", "light2", "light3"}) {
    std::size_t seen = 0, last = 0;
    for (std::size_t i = 0; i < order.size(); ++i)
      if (order[i] == name) ++seen, last = i;
    EXPECT_EQ(seen, static_cast<std::size_t>(light_runs)) << name;
    EXPECT_LT(last, within) << name << "'s last run started at position " << last << ": " << show(order);
  }
}

TEST_F(FairShareTest, WeightsDivideTheLanes) {
  Keys keys(dir);
  const auto heavy_key = keys.add("heavy", "weight=3");
  const auto plain_key = keys.add("plain");
  auto server = start(keys);

  constexpr int runs = 24;
  Client heavy(*server, heavy_key, "heavy-client", runs);
  Client plain(*server, plain_key, "plain-client", runs);
  plain.send_all(20);
  heavy.send_all(20);
  plain.wait_all();
  heavy.wait_all();

  const auto order = start_order(dir / "audit.jsonl");
  ASSERT_EQ(order.size(), 2u * runs) << server->log();
  // While both wait (the plain client had both lanes first), weight 3
  // against weight 1 gives the heavy client three runs in four: within 20 %,
  // at least 0.8 * 3/4 of the next 16 starts.
  const std::size_t head = 2, window = 16;
  const auto heavy_share = std::count(order.begin() + head, order.begin() + head + window, "heavy");
  EXPECT_GE(heavy_share, static_cast<long>(std::ceil(0.8 * 0.75 * window))) << show(order);
  EXPECT_LT(heavy_share, static_cast<long>(window)) << "the plain client got nothing: " << show(order);
}

TEST_F(FairShareTest, AZeroWeightIsRefusedNamingTheLine) {
  Keys keys(dir);
  keys.add("nobody", "weight=0");
  std::string output;
  const int rc = FerrydProcess::run_to_exit(
      {"--listen", "127.0.0.1:0", "--authorized-keys", keys.write().string(), "--gpus", "none"}, &output);
  EXPECT_NE(rc, 0);
  EXPECT_NE(output.find("weight=0"), std::string::npos) << output;
  EXPECT_NE(output.find("authorized_keys:1"), std::string::npos) << output;
}

}  // namespace
}  // namespace ferry::test
