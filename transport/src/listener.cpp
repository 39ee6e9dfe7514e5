#include "ferry/transport/listener.hpp"

#include "connection_impl.hpp"
#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "worker_impl.hpp"

namespace ferry::transport {

namespace {

class ListenerImpl final : public Listener {
 public:
  ListenerImpl(std::shared_ptr<Worker> worker, AcceptHandler on_accept)
      : worker_(std::move(worker)), on_accept_(std::move(on_accept)) {}

  ~ListenerImpl() override { stop(); }

  // Progress thread.
  void start(const std::string& host, std::uint16_t port) {
    sockaddr_storage address{};
    auto length = resolve(host, port, address);
    address_ = format_sockaddr(address);
    ucp_listener_params_t params{};
    params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&address);
    params.sockaddr.addrlen = length;
    params.conn_handler.cb = &ListenerImpl::on_request;
    params.conn_handler.arg = this;
    check(ucp_listener_create(worker_->impl().worker, &params, &listener_), "ucp_listener_create on " + address_);

    // Port 0 asked for any free port: the listener knows which it got.
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    check(ucp_listener_query(listener_, &attr), "ucp_listener_query on " + address_);
    address_ = format_sockaddr(attr.sockaddr);
    port_ = sockaddr_port(attr.sockaddr);
    log().debug("ucx: listening on {}", address_);
  }

  std::uint16_t port() const noexcept override { return port_; }

  void stop() override {
    if (impl().on_progress_thread()) {
      destroy();
    } else {
      worker_->call([this] { destroy(); });
    }
  }

 private:
  Worker::Impl& impl() { return worker_->impl(); }

  void destroy() {
    if (listener_ == nullptr) return;
    ucp_listener_destroy(listener_);
    listener_ = nullptr;
    log().debug("ucx: stopped listening on {}", address_);
  }

  static void on_request(ucp_conn_request_h request, void* arg) { static_cast<ListenerImpl*>(arg)->accept(request); }

  void accept(ucp_conn_request_h request) {
    auto& impl = this->impl();
    ucp_conn_request_attr_t attr{};
    attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    std::string peer = "?";
    if (ucp_conn_request_query(request, &attr) == UCS_OK) peer = format_sockaddr(attr.client_address);

    ucp_ep_params_t params{};
    params.field_mask =
        UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.conn_request = request;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = endpoint_failed;
    params.err_handler.arg = &impl;
    ucp_ep_h ep = nullptr;
    if (auto status = ucp_ep_create(impl.worker, &params, &ep); status != UCS_OK) {
      log().error("ucx: ucp_ep_create for {} connecting to {}: {}", peer, address_, ucs_status_string(status));
      return;
    }
    auto connection =
        std::make_shared<ConnectionImpl>(worker_, Connection::MessageHandler{}, Connection::ErrorHandler{});
    connection->attach(ep, peer);
    log().debug("ucx: {} accepted {}", address_, peer);
    if (!on_accept_) return;
    try {
      on_accept_(std::move(connection));
    } catch (const std::exception& e) {
      log().error("ucx: accept handler on {} threw: {}", address_, e.what());
    }
  }

  std::shared_ptr<Worker> worker_;
  AcceptHandler on_accept_;
  ucp_listener_h listener_ = nullptr;
  std::string address_;
  std::uint16_t port_ = 0;
};

}  // namespace

std::unique_ptr<Listener> Listener::listen(const std::shared_ptr<Worker>& worker, const std::string& host,
                                           std::uint16_t port, AcceptHandler on_accept) {
  if (worker->on_progress_thread()) throw UsageError("Listener::listen() blocks; not on the progress thread");
  auto listener = std::make_unique<ListenerImpl>(worker, std::move(on_accept));
  worker->call([&] { listener->start(host, port); });
  return listener;
}

}  // namespace ferry::transport
