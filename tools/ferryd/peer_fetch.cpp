#include "peer_fetch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <future>

#include "ferry/allocator/slab_pool.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/transport/address.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/identity.hpp"
#include "ferry/transport/rpc_client.hpp"

namespace ferry::ferryd {

struct PeerFetches::Job {
  protocol::Fetch fetch;
  std::byte* dest = nullptr;
  std::shared_ptr<void> keep;
  Done done;
  std::shared_ptr<transport::RpcClient> rpc;
  std::mutex mutex;
  std::shared_ptr<transport::Connection> connection;  // once dialled
  std::thread::id thread;
};

PeerFetches::PeerFetches(std::shared_ptr<transport::Worker> worker, std::shared_ptr<SlabPool> pool,
                         std::optional<transport::KeyPair> host_key)
    : worker_(std::move(worker)),
      fetch_worker_(transport::Worker::create({"ferryd-fetch"})),
      host_key_(std::move(host_key)) {
  if (pool) fetch_worker_->register_slabs(std::move(pool));
}

PeerFetches::~PeerFetches() {
  std::list<std::thread> threads;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (auto& job : jobs_) {
      job->rpc->fail_all("ferryd is shutting down");
      std::lock_guard job_lock(job->mutex);
      if (job->connection) job->connection->close();
    }
    threads.swap(threads_);
  }
  for (auto& thread : threads) thread.join();
}

void PeerFetches::start(protocol::Fetch fetch, std::byte* dest, std::shared_ptr<void> keep, Done done) {
  auto job = std::make_shared<Job>();
  job->fetch = std::move(fetch);
  job->dest = dest;
  job->keep = std::move(keep);
  job->done = std::move(done);
  job->rpc = std::make_shared<transport::RpcClient>(job->fetch.source);
  std::lock_guard lock(mutex_);
  if (stopping_) {
    worker_->post([job] { job->done("ferryd is shutting down"); });
    return;
  }
  // Threads of fetches that ended are joined here, so they do not pile up.
  for (auto it = threads_.begin(); it != threads_.end();) {
    const bool ended = std::none_of(jobs_.begin(), jobs_.end(), [&](const auto& j) { return j->thread == it->get_id(); });
    if (ended) {
      it->join();
      it = threads_.erase(it);
    } else {
      ++it;
    }
  }
  jobs_.push_back(job);
  threads_.emplace_back([this, job] { run(job); });
  job->thread = threads_.back().get_id();
}

namespace {

// Sends a reply to the RpcClient waiting for it; the source only ever
// answers gets (data), or says why it closes. A source whose data is not
// the size asked for is dropped at once: its fetch fails, nothing of that
// reply lands, and no later reply of its is read.
void on_reply(transport::RpcClient& rpc, transport::Connection& connection, transport::Incoming& incoming) {
  protocol::Message message;
  try {
    message = protocol::decode(incoming.header());
  } catch (const ProtocolError& e) {
    return rpc.fail_all(std::string("a malformed message: ") + e.what());
  }
  if (const auto* data = std::get_if<protocol::Data>(&message)) {
    if (!rpc.complete(data->request, message, incoming).broken.empty()) connection.close();
  } else if (const auto* error = std::get_if<protocol::ErrorMessage>(&message)) {
    rpc.fail_all(fmt::format("it refused: {}: {}", protocol::to_string(error->status), error->message));
  } else if (const auto* bye = std::get_if<protocol::Bye>(&message)) {
    rpc.fail_all(fmt::format("it closed the connection: {}", bye->message));
  }
}

}  // namespace

void PeerFetches::run(const std::shared_ptr<Job>& job) {
  const protocol::Fetch& fetch = job->fetch;
  std::string error;
  try {
    const auto [host, port] = transport::parse_address(fetch.source);
    transport::DialOptions options;
    options.client = transport::capability_client(fetch.capability);
    options.token.assign(reinterpret_cast<const char*>(fetch.secret.data()), fetch.secret.size());
    options.identity = host_key_;  // the source admits only the host the client named
    options.timeout = std::chrono::seconds(10);
    // Its source may die mid-transfer (kill -9): only an endpoint with peer
    // error handling notices that without stalling this worker.
    options.shared_memory_lane = false;
    auto rpc = job->rpc;
    std::unique_lock dialing(dial_mutex_);
    auto dialed = transport::dial(
        fetch_worker_, host, port, options,
        [rpc](transport::Connection& connection, transport::Incoming& in) { on_reply(*rpc, connection, in); },
        [rpc](transport::Connection&, const std::string& why) { rpc->fail_all(why); });
    dialing.unlock();
    {
      std::lock_guard lock(job->mutex);
      job->connection = dialed.connection;
    }
    // The client pinned the source's key; whoever answers at that address
    // with another key is not the host the client meant (no man in the middle).
    if (dialed.host_key != fetch.host_key)
      throw RemoteError(fmt::format("{} presents host key {}, not the {} the client pinned", fetch.source,
                                    transport::fingerprint(dialed.host_key), transport::fingerprint(fetch.host_key)));
    const std::size_t chunk =
        std::max<std::size_t>(1, std::min<std::size_t>(chunk_bytes, dialed.welcome.max_payload == 0
                                                                        ? chunk_bytes
                                                                        : dialed.welcome.max_payload));
    std::deque<std::future<protocol::Message>> in_flight;
    const auto settle_one = [&] {
      protocol::Message reply = rpc->await(in_flight.front(), "get");
      in_flight.pop_front();
      const auto* data = std::get_if<protocol::Data>(&reply);
      if (data == nullptr || data->status != protocol::Status::ok)
        throw RemoteError(fmt::format("{} did not send the data: {}: {}", fetch.source,
                                      data ? protocol::to_string(data->status) : "no data", data ? data->message : ""));
    };
    for (std::uint64_t done = 0; done < fetch.length;) {
      const std::uint64_t len = std::min<std::uint64_t>(chunk, fetch.length - done);
      if (in_flight.size() >= window) settle_one();
      const std::uint64_t id = rpc->next_id();
      in_flight.push_back(rpc->request(dialed.connection, id,
                                       protocol::Get{id, fetch.source_buffer, fetch.source_offset + done, len}, nullptr,
                                       0, {job->dest + done, static_cast<std::size_t>(len)}));
      done += len;
    }
    while (!in_flight.empty()) settle_one();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "failed";
  }
  std::shared_ptr<transport::Connection> connection;
  {
    std::lock_guard lock(job->mutex);
    connection = std::move(job->connection);
  }
  // UCX objects are let go on the progress thread; the answer goes from there
  // too. The connection closes once its sends have completed (a failed fetch
  // may leave gets in flight), and the job, whose RpcClient their completions
  // reach, lives until then.
  if (connection) fetch_worker_->post([job, connection] {
    connection->flush([job, connection](const std::string&) { connection->close(); });
  });
  worker_->post([job, error] { job->done(error); });
  std::lock_guard lock(mutex_);
  jobs_.remove(job);
}

}  // namespace ferry::ferryd
