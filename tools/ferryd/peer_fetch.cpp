#include "peer_fetch.hpp"

#include <fmt/format.h>
#include <netdb.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "ferry/allocator/slab_pool.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/printable.hpp"
#include "ferry/transport/address.hpp"
#include "ferry/transport/bootstrap.hpp"
#include "ferry/transport/identity.hpp"
#include "ferry/transport/rpc_client.hpp"

namespace ferry::ferryd {

// One connection to a source, kept for the fetches that follow: the first
// signed in with its capability, each later one claims its own on it
// (protocol::Claim). Found by the source's resolved address and the host
// key the fetch pinned, so a fetch only ever shows its capability to the
// host it pinned.
struct PeerFetches::Link {
  explicit Link(const std::string& source) : rpc(std::make_shared<transport::RpcClient>(source)) {}

  std::shared_ptr<transport::RpcClient> rpc;  // every fetch on it: request ids are the link's
  // Set by the connection's handlers: it failed, or a reply broke a request.
  std::shared_ptr<std::atomic<bool>> broken = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<transport::Connection> connection;  // once dialled
  transport::Nonce binding{};                         // what claims on it are made over
  std::uint64_t max_payload = 0;                      // the source's, from its welcome
  // Shared::mutex guards the rest.
  std::size_t users = 0;
  bool retired = false;  // takes no new fetch: out of the map, closes once its last user left
  std::chrono::steady_clock::time_point idle_since{};
  // The replicas' memory that gets of failed fetches may still land in, held
  // until the connection closed.
  std::vector<std::shared_ptr<void>> landing;
};

struct PeerFetches::Job {
  std::string client;
  protocol::Fetch fetch;
  Destination to;
  Done done;
  // Shared::mutex guards both.
  std::shared_ptr<Link> link;  // once it has one (dialling or taken)
  bool dialling = false;       // from its pick until its dial returned
};

// What the fetches' threads share with PeerFetches, and keep alive when
// PeerFetches abandons them in a dial.
struct PeerFetches::Shared {
  Shared(std::shared_ptr<transport::Worker> w, std::shared_ptr<SlabPool> p, std::optional<transport::KeyPair> key,
         FetchSources s, FetchLimits l)
      : worker(std::move(w)), pool(std::move(p)), host_key(std::move(key)), sources(std::move(s)), limits(l) {}

  // The next job a thread may take, or null: the first in line whose
  // client has room in flight and whose source is not being dialled.
  std::shared_ptr<Job> next();
  // A live link to (where, host key) with room for another fetch, taken; or
  // null. mutex held.
  std::shared_ptr<Link> take_link(const std::string& where, const transport::PublicKey& host_key);
  // A fetch is done with `link`; `clean`: no get of it is still in flight
  // (else the link takes no new fetch, and keeps `landing` until it closed).
  void release(const std::shared_ptr<Link>& link, bool clean, std::shared_ptr<void> landing);
  // Closes links no fetch used for link_idle, and those that failed. mutex held.
  void close_idle();
  void retire(const std::shared_ptr<Link>& link);  // mutex held
  void close(const std::shared_ptr<Link>& link);   // mutex held; its last user left

  std::shared_ptr<transport::Worker> worker;  // the server's; null once stopping
  std::shared_ptr<SlabPool> pool;
  std::shared_ptr<transport::Worker> fetch_worker;  // the fetches' own, made at the first fetch
  const std::optional<transport::KeyPair> host_key;
  const FetchSources sources;
  const FetchLimits limits;
  std::filesystem::path pins;  // a private directory: each dial's pin of its source's key

  struct Runner {
    std::thread thread;
    std::shared_ptr<Job> job;
    bool ended = false;
  };

  std::mutex mutex;
  std::condition_variable changed;
  std::atomic<bool> stopping = false;  // also read by fetches waiting for their gets
  std::deque<std::shared_ptr<Job>> queue;
  std::map<std::string, std::size_t> queued_by_client, running_by_client;
  std::set<std::string> dialling;  // sources as named
  // One lock per address dialled: the same source under two names still
  // takes turns (see peer_fetch.hpp).
  std::map<std::string, std::weak_ptr<std::mutex>> address_locks;
  std::deque<Runner> runners;
  std::uint64_t dials = 0;
  // Live links, by resolved address and the source's host key: a few per
  // source at most (each takes link_users fetches).
  std::multimap<std::pair<std::string, transport::PublicKey>, std::shared_ptr<Link>> links;
};

namespace {

void count_down(std::map<std::string, std::size_t>& counts, const std::string& key) {
  auto it = counts.find(key);
  if (it != counts.end() && --it->second == 0) counts.erase(it);
}

std::size_t count_of(const std::map<std::string, std::size_t>& counts, const std::string& key) {
  auto it = counts.find(key);
  return it == counts.end() ? 0 : it->second;
}

}  // namespace

std::shared_ptr<PeerFetches::Job> PeerFetches::Shared::next() {
  for (auto it = queue.begin(); it != queue.end(); ++it) {
    const auto& job = *it;
    if (count_of(running_by_client, job->client) >= limits.per_client || dialling.contains(job->fetch.source)) continue;
    auto taken = std::move(*it);
    queue.erase(it);
    count_down(queued_by_client, taken->client);
    ++running_by_client[taken->client];
    dialling.insert(taken->fetch.source);
    taken->dialling = true;
    return taken;
  }
  return nullptr;
}

std::shared_ptr<PeerFetches::Link> PeerFetches::Shared::take_link(const std::string& where,
                                                                  const transport::PublicKey& host_key) {
  close_idle();
  auto [first, last] = links.equal_range({where, host_key});
  for (auto it = first; it != last; ++it) {
    const auto& link = it->second;
    if (link->users >= link_users || link->broken->load()) continue;
    ++link->users;
    return link;
  }
  return nullptr;
}

void PeerFetches::Shared::retire(const std::shared_ptr<Link>& link) {
  link->retired = true;
  std::erase_if(links, [&](const auto& entry) { return entry.second == link; });
}

void PeerFetches::Shared::close(const std::shared_ptr<Link>& link) {
  retire(link);
  if (!link->connection || !fetch_worker) return;
  // Once its sends completed (a failed fetch may leave gets in flight),
  // on the progress thread; what those gets land in lives until then.
  fetch_worker->post([link, landing = std::move(link->landing)] {
    link->connection->flush([link, landing](const std::string&) { link->connection->close(); });
  });
}

void PeerFetches::Shared::release(const std::shared_ptr<Link>& link, bool clean, std::shared_ptr<void> landing) {
  std::lock_guard lock(mutex);
  if (!clean) {
    retire(link);
    if (landing) link->landing.push_back(std::move(landing));
  }
  if (--link->users > 0) return;
  link->idle_since = std::chrono::steady_clock::now();
  if (link->retired || link->broken->load() || stopping) close(link);
}

void PeerFetches::Shared::close_idle() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<Link>> idle;
  for (const auto& [key, link] : links)
    if (link->users == 0 && (link->broken->load() || now - link->idle_since >= link_idle)) idle.push_back(link);
  for (const auto& link : idle) close(link);
}

PeerFetches::PeerFetches(std::shared_ptr<transport::Worker> worker, std::shared_ptr<SlabPool> pool,
                         std::optional<transport::KeyPair> host_key, FetchSources sources, FetchLimits limits)
    : shared_(std::make_shared<Shared>(std::move(worker), std::move(pool), std::move(host_key), std::move(sources),
                                       limits)) {}

PeerFetches::~PeerFetches() {
  Shared& s = *shared_;
  std::vector<Done> unanswered;
  std::vector<bool> join;
  std::shared_ptr<transport::Worker> worker;
  {
    std::unique_lock lock(s.mutex);
    s.stopping = true;
    for (auto& job : s.queue) unanswered.push_back(std::move(job->done));
    s.queue.clear();
    // Idle links close; those in use fail their fetches, which let them go.
    std::vector<std::shared_ptr<Link>> idle;
    for (const auto& [key, link] : s.links)
      if (link->users == 0) idle.push_back(link);
    for (const auto& link : idle) s.close(link);
    for (auto& runner : s.runners) {
      if (!runner.job) continue;
      if (const auto& link = runner.job->link) {
        link->rpc->fail_all("ferryd is shutting down");
        if (link->connection) link->connection->close();
      }
      // A dial cannot be interrupted: its fetch is answered from here, and
      // its thread, left to end on its own, holds the replica only weakly.
      if (runner.job->dialling) unanswered.push_back(std::move(runner.job->done));
    }
    s.changed.notify_all();
    s.changed.wait(lock, [&] {
      return std::all_of(s.runners.begin(), s.runners.end(),
                         [](const Shared::Runner& r) { return r.ended || (r.job && r.job->dialling); });
    });
    for (const auto& runner : s.runners) join.push_back(runner.ended);
    worker = std::move(s.worker);
  }
  for (auto& done : unanswered)
    if (done && worker) worker->post([done = std::move(done)] { done("ferryd is shutting down"); });
  std::size_t abandoned = 0;
  for (std::size_t i = 0; i < s.runners.size(); ++i) {
    if (join[i]) {
      s.runners[i].thread.join();
    } else {
      s.runners[i].thread.detach();
      ++abandoned;
    }
  }
  if (abandoned > 0) log().info("ferryd fetches: {} dials abandoned at shutdown", abandoned);
  std::error_code ignored;
  if (!s.pins.empty()) std::filesystem::remove_all(s.pins, ignored);
}

std::string PeerFetches::start(const std::string& client, protocol::Fetch fetch, Destination to, Done done) {
  Shared& s = *shared_;
  std::lock_guard lock(s.mutex);
  if (s.stopping) return "ferryd is shutting down";
  const std::size_t mine = count_of(s.queued_by_client, client);
  if (mine >= s.limits.queued_per_client)
    return fmt::format(
        "this client has {} fetches waiting on this ferryd (at most {}, {} in flight): ask again once "
        "some have ended",
        mine, s.limits.queued_per_client, s.limits.per_client);
  if (s.queue.size() >= s.limits.queued)
    return fmt::format("{} fetches are waiting on this ferryd (at most {}): ask again later", s.queue.size(),
                       s.limits.queued);
  if (!s.fetch_worker) {
    try {
      s.fetch_worker = transport::Worker::create({"ferryd-fetch"});
      if (s.pool) s.fetch_worker->register_slabs(s.pool);
      std::string dir = (std::filesystem::temp_directory_path() / "ferryd-pins-XXXXXX").string();
      if (::mkdtemp(dir.data()) == nullptr) throw Error(fmt::format("cannot make {}: {}", dir, std::strerror(errno)));
      s.pins = dir;
    } catch (const std::exception& e) {
      s.fetch_worker.reset();
      log().error("ferryd fetches cannot start: {}", e.what());
      return std::string("this ferryd cannot fetch: ") + e.what();
    }
    for (std::size_t i = 0; i < s.limits.threads; ++i) {
      s.runners.emplace_back();
      s.runners.back().thread = std::thread([shared = shared_, i] { serve(shared, i); });
    }
  }
  auto job = std::make_shared<Job>();
  job->client = client;
  job->fetch = std::move(fetch);
  job->to = std::move(to);
  job->done = std::move(done);
  ++s.queued_by_client[client];
  s.queue.push_back(std::move(job));
  s.changed.notify_all();
  return {};
}

void PeerFetches::serve(const std::shared_ptr<Shared>& shared, std::size_t runner) {
  Shared& s = *shared;
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(s.mutex);
      // Waiting, it also closes the links that have been idle long enough.
      while (!s.changed.wait_for(lock, idle_poll, [&] { return s.stopping || (job = s.next()) != nullptr; }))
        s.close_idle();
      if (!job) {
        s.runners[runner].ended = true;
        s.changed.notify_all();
        return;
      }
      s.runners[runner].job = job;
    }
    run(s, job);
    std::lock_guard lock(s.mutex);
    s.runners[runner].job.reset();
    count_down(s.running_by_client, job->client);
    s.changed.notify_all();
  }
}

namespace {

// Sends a reply to the RpcClient waiting for it; the source only ever
// answers gets (data) and claims (put_ack), or says why it closes. A source
// whose data is not the size asked for is dropped at once: its fetches
// fail, nothing of that reply lands, and no later reply of its is read.
void on_reply(transport::RpcClient& rpc, std::atomic<bool>& broken, transport::Connection& connection,
              transport::Incoming& incoming) {
  protocol::Message message;
  try {
    message = protocol::decode(incoming.header());
  } catch (const ProtocolError& e) {
    broken = true;
    return rpc.fail_all(std::string("a malformed message: ") + e.what());
  }
  if (const auto* data = std::get_if<protocol::Data>(&message)) {
    if (!rpc.complete(data->request, message, incoming).broken.empty()) {
      broken = true;
      connection.close();
    }
  } else if (const auto* ack = std::get_if<protocol::PutAck>(&message)) {
    if (!rpc.complete(ack->request, message, incoming).broken.empty()) {
      broken = true;
      connection.close();
    }
  } else if (const auto* error = std::get_if<protocol::ErrorMessage>(&message)) {
    broken = true;
    rpc.fail_all(fmt::format("it refused: {}: {}", protocol::to_string(error->status), error->message));
  } else if (const auto* bye = std::get_if<protocol::Bye>(&message)) {
    broken = true;
    rpc.fail_all(fmt::format("it closed the connection: {}", bye->message));
  }
}

// The first address `host` has: the one checked against --fetch-from is the
// one dialled, so a name cannot resolve to another address in between.
sockaddr_storage resolve(const std::string& host, std::uint16_t port, const std::string& source) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0)
    throw RemoteError(fmt::format("{} does not resolve: {}", source, gai_strerror(rc)));
  sockaddr_storage address{};
  std::memcpy(&address, found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  return address;
}

std::string numeric_host(const sockaddr_storage& address) {
  char text[NI_MAXHOST] = {};
  ::getnameinfo(reinterpret_cast<const sockaddr*>(&address), sizeof address, text, sizeof text, nullptr, 0,
                NI_NUMERICHOST);
  return text;
}

}  // namespace

void PeerFetches::run(Shared& s, const std::shared_ptr<Job>& job) {
  const protocol::Fetch& fetch = job->fetch;
  std::string error;
  std::shared_ptr<void> held;  // the replica's memory, from the first get
  std::shared_ptr<Link> link;
  bool reused = false;
  std::deque<std::future<protocol::Message>> in_flight;
  try {
    {
      // However the dial ends, the next fetch from this source may go.
      struct Dialling {
        Shared& s;
        Job& job;
        ~Dialling() {
          {
            std::lock_guard lock(s.mutex);
            s.dialling.erase(job.fetch.source);
            job.dialling = false;
          }
          s.changed.notify_all();
        }
      } dialling{s, *job};

      if (job->to.owner.expired())
        throw RemoteError(fmt::format("buffer {} was freed before its fetch began", fetch.buffer));
      const auto [named_host, port] = transport::parse_address(fetch.source);
      const sockaddr_storage address = resolve(named_host, port, fetch.source);
      const std::string host = numeric_host(address);
      const std::string where =
          host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
      if (!s.sources.allows(address))
        throw RemoteError(
            fmt::format("{} ({}) is not a source this ferryd may fetch from: its operator allows others "
                        "(ferryd --fetch-from)",
                        fetch.source, where));
      std::shared_ptr<std::mutex> address_lock;
      {
        std::lock_guard lock(s.mutex);
        auto& weak = s.address_locks[where];
        address_lock = weak.lock();
        if (!address_lock) weak = address_lock = std::make_shared<std::mutex>();
        std::erase_if(s.address_locks, [](const auto& entry) { return entry.second.expired(); });
      }
      std::unique_lock turn(*address_lock);
      std::filesystem::path pin;
      {
        // A link to this address that the source signed in with the pinned
        // key: this fetch claims its capability on it, no dial.
        std::lock_guard lock(s.mutex);
        link = s.take_link(where, fetch.host_key);
        reused = link != nullptr;
        if (!reused) {
          link = std::make_shared<Link>(fetch.source);
          link->users = 1;
          pin = s.pins / fmt::format("dial-{}", ++s.dials);
        }
        job->link = link;
      }
      if (!reused) {
        // The key the client pinned, as a known-hosts file dial() reads: a
        // source that presents another is refused before this ferryd proves
        // it holds the capability, so the source never spends it.
        std::ofstream(pin) << where << ' ' << transport::public_key_line(fetch.host_key, "") << '\n';
        transport::DialOptions options;
        options.client = transport::capability_client(fetch.capability);
        options.token.assign(reinterpret_cast<const char*>(fetch.secret.data()), fetch.secret.size());
        options.identity = s.host_key;  // the source admits only the host the client named
        options.known_hosts = pin;
        options.pinning = transport::Pinning::strict;
        options.timeout = dial_timeout;
        // Its source may die mid-transfer (kill -9): only an endpoint with peer
        // error handling notices that without stalling this worker.
        options.shared_memory_lane = false;
        auto rpc = link->rpc;
        auto broken = link->broken;
        std::error_code ignored;
        transport::Dialed dialed;
        try {
          dialed = transport::dial(
              s.fetch_worker, host, port, options,
              [rpc, broken](transport::Connection& connection, transport::Incoming& in) {
                on_reply(*rpc, *broken, connection, in);
              },
              [rpc, broken](transport::Connection&, const std::string& why) {
                *broken = true;
                rpc->fail_all(why);
              });
        } catch (const std::exception& e) {
          std::filesystem::remove(pin, ignored);
          const std::string why = e.what();
          // The pin check refuses (a DialRefused: trying again cannot help);
          // the client hears which key it pinned, not this host's pin file.
          if (why.find(pin.string()) != std::string::npos)
            throw RemoteError(
                fmt::format("{} presents a host key that is not the {} the client pinned: refused "
                            "before the capability was shown",
                            fetch.source, transport::fingerprint(fetch.host_key)));
          if (dynamic_cast<const transport::DialRefused*>(&e) != nullptr) throw;  // a ferryd answered, and said why not
          // Whatever answers there is not a ferryd (or nothing does): what it
          // said stays here, so a fetch cannot read other services' banners.
          log().info("fetching from {} ({}): {}", printable(fetch.source), where, printable(why, 1024));
          throw RemoteError(fmt::format("{} did not answer as a ferryd", fetch.source));
        }
        std::filesystem::remove(pin, ignored);
        std::lock_guard lock(s.mutex);
        link->connection = dialed.connection;
        link->binding = dialed.binding;
        link->max_payload = dialed.welcome.max_payload;
        if (s.stopping) throw RemoteError("ferryd is shutting down");
        // Later fetches from this source take it (this one holds it until it ends).
        s.links.emplace(std::pair{where, fetch.host_key}, link);
      }
    }
    if (reused) {
      // This fetch's capability, held on a link another fetch signed in on:
      // its secret proven over the link's binding. Bounded like the dial it
      // replaces: a source that does not answer is not used again.
      const std::string_view secret(reinterpret_cast<const char*>(fetch.secret.data()), fetch.secret.size());
      const std::uint64_t id = link->rpc->next_id();
      auto reply = link->rpc->request(
          link->connection, id,
          protocol::Claim{id, fetch.capability, transport::claim_mac(secret, link->binding, fetch.capability)});
      const auto deadline = std::chrono::steady_clock::now() + dial_timeout;
      while (reply.wait_for(freed_poll) != std::future_status::ready) {
        if (s.stopping) throw RemoteError("ferryd is shutting down");
        if (std::chrono::steady_clock::now() >= deadline) {
          *link->broken = true;
          throw RemoteError(fmt::format("{} did not answer a claim in {} s", fetch.source, dial_timeout.count()));
        }
      }
      const protocol::Message message = link->rpc->await(reply, "claim");
      const auto* ack = std::get_if<protocol::PutAck>(&message);
      if (ack == nullptr)
        throw RemoteError(fmt::format("{} answered a claim with a {}", fetch.source,
                                      protocol::to_string(protocol::type_of(message))));
      if (ack->status != protocol::Status::ok)
        throw RemoteError(fmt::format("ferryd at {} refused this client: {}: {}", fetch.source,
                                      protocol::to_string(ack->status), ack->message));
    }
    held = job->to.hold ? job->to.hold() : nullptr;
    if (!held) throw RemoteError(fmt::format("buffer {} was freed before its fetch began", fetch.buffer));
    const std::size_t chunk = std::max<std::size_t>(
        1, std::min<std::size_t>(chunk_bytes, link->max_payload == 0 ? chunk_bytes : link->max_payload));
    const auto settle_one = [&] {
      auto& reply = in_flight.front();
      // A client that frees the replica ends its fetch: the memory goes back
      // soon, not when a slow source is done with it.
      while (reply.wait_for(freed_poll) != std::future_status::ready) {
        if (job->to.owner.expired())
          throw RemoteError(fmt::format("buffer {} was freed during its fetch", fetch.buffer));
        if (s.stopping) throw RemoteError("ferryd is shutting down");
      }
      protocol::Message message = link->rpc->await(reply, "get");
      in_flight.pop_front();
      const auto* data = std::get_if<protocol::Data>(&message);
      if (data == nullptr || data->status != protocol::Status::ok)
        throw RemoteError(fmt::format("{} did not send the data: {}: {}", fetch.source,
                                      data ? protocol::to_string(data->status) : "no data", data ? data->message : ""));
    };
    for (std::uint64_t done = 0; done < fetch.length;) {
      const std::uint64_t len = std::min<std::uint64_t>(chunk, fetch.length - done);
      if (in_flight.size() >= window) settle_one();
      const std::uint64_t id = link->rpc->next_id();
      // Named: the link may hold several capabilities.
      in_flight.push_back(link->rpc->request(
          link->connection, id,
          protocol::Get{id, fetch.source_buffer, fetch.source_offset + done, len, {fetch.capability}}, nullptr, 0,
          {job->to.bytes + done, static_cast<std::size_t>(len)}));
      done += len;
    }
    while (!in_flight.empty()) settle_one();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "failed";
  }
  // The link goes on for the next fetch, unless gets of this one may still
  // land (a failed fetch): then it closes once its other fetches ended,
  // and the memory they land in lives until then.
  if (link) s.release(link, in_flight.empty(), held);
  Done done;
  std::shared_ptr<transport::Worker> worker;
  {
    std::lock_guard lock(s.mutex);
    job->link.reset();
    done = std::move(job->done);
    worker = s.worker;
  }
  if (done && worker) worker->post([done = std::move(done), error] { done(error); });
}

}  // namespace ferry::ferryd
