// A Worker's UCX workers, one generation after another. UCX 1.13 keeps, for
// as long as a worker lives, an entry for every peer worker it met (its
// connection-match table), and every endpoint made from a worker address
// that it closed with a flush once the peer had connected
// (ucp_ep_disconnected: sessions a server ended itself, an older peer's
// lane). A server that outlives its clients grows by them with every
// session. So a server's Worker makes a new UCX worker every
// Options::sessions_per_generation connections, on the same context and
// progress thread; new connections go there, and an old worker is destroyed
// once its last endpoint has closed, taking what UCX kept with it.
#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "completion.hpp"
#include "connection_impl.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "worker_impl.hpp"

namespace ferry::transport {

namespace {

// A generation whose address a dial sent (Worker::addresses) is kept this
// long after, endpoints or not: the dialler makes its endpoint there only
// at the welcome, a round trip later.
constexpr auto promise_grace = std::chrono::seconds(5);

}  // namespace

ucp_worker_params_t serialized_worker_params() {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // One thread at a time calls into the worker: the progress thread, or a
  // thread sending while the progress thread sleeps (Impl::serial says
  // which); ucp_worker_signal is documented safe in every thread mode.
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  return params;
}

Worker::Impl::Generation& Worker::Impl::open_generation(ucp_worker_h made) {
  auto generation = std::make_unique<Generation>();
  generation->impl = this;
  generation->worker = made;
  if (made == nullptr) {
    const auto params = serialized_worker_params();
    check(ucp_worker_create(context, &params, &generation->worker), "ucp_worker_create");
  }
  // Destroyed again if anything below fails.
  struct Undo {
    Generation* g;
    ~Undo() {
      if (g != nullptr) ucp_worker_destroy(g->worker);
    }
  } undo{generation.get()};

  if (max_am_header == 0) {
    ucp_worker_attr_t attr{};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
    check(ucp_worker_query(generation->worker, &attr), "ucp_worker_query");
    max_am_header = attr.max_am_header;
  }
  check(ucp_worker_get_efd(generation->worker, &generation->event_fd), "ucp_worker_get_efd");
  epoll_event watch{};
  watch.events = EPOLLIN;
  if (::epoll_ctl(sleep_fd, EPOLL_CTL_ADD, generation->event_fd, &watch) != 0)
    throw UcxError(fmt::format("ucx: worker '{}': its event fd in the epoll set: {}", name, std::strerror(errno)),
                   static_cast<int>(UCS_ERR_IO_ERROR));

  ucp_am_handler_param_t handler{};
  handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                       UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  handler.arg = generation.get();
  handler.flags = UCP_AM_FLAG_WHOLE_MSG;
  const struct {
    unsigned id;
    ucp_am_recv_callback_t cb;
    const char* what;
  } handlers[] = {{ferry_am_id, am_receive, "ucp_worker_set_am_recv_handler"},
                  {ferry_close_am_id, close_receive, "ucp_worker_set_am_recv_handler (close)"},
                  {ferry_batch_am_id, batch_receive, "ucp_worker_set_am_recv_handler (batch)"},
                  {ferry_pull_am_id, pull_receive, "ucp_worker_set_am_recv_handler (pull)"},
                  {ferry_pull_control_am_id, pull_control_receive, "ucp_worker_set_am_recv_handler (pull control)"}};
  for (const auto& h : handlers) {
    handler.id = h.id;
    handler.cb = h.cb;
    check(ucp_worker_set_am_recv_handler(generation->worker, &handler), h.what);
  }

  ucp_address_t* raw = nullptr;
  std::size_t length = 0;
  check(ucp_worker_get_address(generation->worker, &raw, &length), "ucp_worker_get_address");
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(raw);
  generation->address.assign(bytes, bytes + length);
  ucp_worker_release_address(generation->worker, raw);
  if (has_network_transport) {
    ucp_worker_attr_t attr{};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
    attr.address_flags = UCP_WORKER_ADDRESS_FLAG_NET_ONLY;
    check(ucp_worker_query(generation->worker, &attr), "ucp_worker_query (network address)");
    const auto* net = reinterpret_cast<const std::uint8_t*>(attr.address);
    generation->network_address.assign(net, net + attr.address_length);
    ucp_worker_release_address(generation->worker, attr.address);
  }

  undo.g = nullptr;
  {
    std::lock_guard lock(mutex);
    worker = generation->worker;
    address = generation->address;
    network_address = generation->network_address;
  }
  generations.push_back(std::move(generation));
  return *generations.back();
}

Worker::Impl::Generation& Worker::Impl::generation_for(std::span<const std::uint8_t> local) {
  if (!local.empty()) {
    for (auto& g : generations)
      if (std::ranges::equal(g->address, local)) return *g;
    throw UcxError("ucx: the UCX worker whose address this end sent has been retired meanwhile; dial again",
                   static_cast<int>(UCS_ERR_NO_ELEM));
  }
  Generation* current = generations.back().get();
  if (sessions_per_generation != 0 && current->connections >= sessions_per_generation) {
    try {
      current = &open_generation();
      log().debug("ucx: worker '{}': a new UCX worker after {} connections; {} in use", name,
                  sessions_per_generation, generations.size());
      post([this] { retire_drained(); });
    } catch (const std::exception& e) {
      // An interface gone between the context's listing and now, say: the
      // current one serves on, and the next connection tries again.
      log().warn("ucx: worker '{}': a new UCX worker could not be made ({}); the current one goes on", name, e.what());
    }
  }
  return *current;
}

void Worker::Impl::adopt(ucp_ep_h ep, Generation& generation) {
  endpoint_generation[ep] = &generation;
  ++generation.endpoints;
}

Worker::Impl::Generation* Worker::Impl::sending_payload(ucp_ep_h ep) {
  auto found = endpoint_generation.find(ep);
  if (found == endpoint_generation.end()) return nullptr;
  ++found->second->sending;
  ++sending_payloads;
  return found->second;
}

void Worker::Impl::payload_sent(Generation& generation) {
  --generation.sending;
  --generation.impl->sending_payloads;
  generation.impl->retire_if_drained(generation);  // it may have waited for this send
}

Worker::Impl::Generation* Worker::Impl::release(ucp_ep_h ep) {
  auto found = endpoint_generation.find(ep);
  if (found == endpoint_generation.end()) return nullptr;
  Generation* generation = found->second;
  endpoint_generation.erase(found);
  return generation;
}

void Worker::Impl::closed(Generation* generation) {
  if (generation == nullptr) return;
  --generation->endpoints;
  retire_if_drained(*generation);
}

bool Worker::Impl::drained(const Generation& generation) {
  return generation.endpoints == 0 && generation.sending == 0;
}

void Worker::Impl::retire_if_drained(const Generation& generation) {
  // Posted, not here: this may run inside that worker's own progress.
  if (drained(generation) && &generation != generations.back().get() && !shutting_down)
    post([this] { retire_drained(); });
}

void Worker::Impl::leave_open(ucp_ep_h ep) {
  Generation* generation = release(ep);
  if (generation == nullptr) return;
  ++generation->held;
  closed(generation);
}

unsigned Worker::Impl::progress() {
  unsigned events = 0;
  // By index: a callback may open a generation (never destroy one).
  for (std::size_t i = 0; i < generations.size(); ++i) events += ucp_worker_progress(generations[i]->worker);
  return events;
}

ucs_status_t Worker::Impl::arm() {
  for (auto& g : generations)
    if (const auto status = ucp_worker_arm(g->worker); status != UCS_OK) return status;
  return UCS_OK;
}

void Worker::Impl::retire_drained() {
  std::vector<std::uint8_t> promised_to;
  auto promised_when = std::chrono::steady_clock::time_point::min();
  {
    std::lock_guard lock(mutex);
    // A driver may have a worker's fd out of the epoll set (drive); a later
    // close calls this again.
    if (driven) return;
    promised_to = promised;
    promised_when = promised_at;
  }
  const auto now = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i + 1 < generations.size();) {
    Generation& g = *generations[i];
    if (!drained(g) || (now - promised_when < promise_grace && g.address == promised_to)) {
      ++i;
      continue;
    }
    ::epoll_ctl(sleep_fd, EPOLL_CTL_DEL, g.event_fd, nullptr);
    ucp_worker_destroy(g.worker);
    // A receive whose sender closed mid-transfer never completes (UCX 1.13
    // cannot cancel it): its owner hears of it now, as at shutdown.
    for (auto it = receiving.begin(); it != receiving.end();) {
      if ((*it)->worker != g.worker) {
        ++it;
        continue;
      }
      std::unique_ptr<Receiving> owned(*it);
      it = receiving.erase(it);
      notify(owned->done, "the UCX worker it came on was retired before the payload arrived");
    }
    log().debug("ucx: worker '{}': an old UCX worker destroyed ({} held endpoints freed); {} in use", name, g.held,
                generations.size() - 1);
    generations.erase(generations.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

Worker::Endpoints Worker::Impl::endpoint_counts() const {
  Worker::Endpoints counts{connections.size(), closing, 0, generations.size()};
  for (const auto& g : generations) counts.held += g->held;
  return counts;
}

}  // namespace ferry::transport
