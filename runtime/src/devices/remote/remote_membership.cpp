// A remote host joining and leaving the pool while the program runs: a
// host that dials in (ferryd --connect) is adopted; one removed
// (Runtime::remove_remote, or gone from its DNS name) is drained first.
#include <fmt/format.h>

#include "devices/device_host.hpp"
#include "devices/remote/remote_device.hpp"
#include "ferry/log.hpp"

namespace ferry::detail {

void RemoteDevice::adopt(transport::Dialed dialed) {
  if (!dialed.connection || dialed.connection->closed()) return;
  // Set here, on the progress thread, before anything on it is delivered.
  dialed.connection->set_handlers([this](transport::Connection&, transport::Incoming& in) { on_message(in); },
                                  [this, raw = dialed.connection.get()](transport::Connection&, const std::string& why) {
                                    // Only the connection in use: an older one closing says nothing.
                                    if (requests_.in_use(raw)) lost(why);
                                  });
  // It dialled again: the connection we had is dead, or about to be.
  if (alive()) lost("the host dialled in again");
  {
    std::lock_guard lock(reconnect_mutex_);
    if (adopted_ && adopted_->connection) adopted_->connection->close();
    adopted_ = std::move(dialed);
  }
  reconnect_cv_.notify_all();
}

void RemoteDevice::retire() {
  if (retiring_.exchange(true, std::memory_order_acq_rel)) return;
  log().info("remote {}: leaving the pool; its queued tasks move to the CPU, data only it holds comes home",
             options_.address);
  // Queued tasks reach run_here and move at once; runs sent already finish there.
  drain();
  bring_home("as it leaves the pool");
  part("removed from the pool");
  // After the close, as in lost(): a request made meanwhile fails itself.
  requests_.fail_all("removed from the pool");
  jobs_.reply_came(true);
}

void RemoteDevice::rejoin() {
  if (!retiring_.exchange(false, std::memory_order_acq_rel)) return;
  offer_.rejoined();
  log().info("remote {}: back in the pool", options_.address);
  reconnect_cv_.notify_all();
}

}  // namespace ferry::detail
