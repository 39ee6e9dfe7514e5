// RDMA devices through libibverbs: what UCX's ib transports could use.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "probes.hpp"

#if FERRY_TOOLS_HAVE_IBVERBS
#include <endian.h>
#include <infiniband/verbs.h>
#endif

namespace ferry::tools {

#if FERRY_TOOLS_HAVE_IBVERBS
namespace {

using json = nlohmann::ordered_json;

// The form ibv_devinfo prints: four groups of four hex digits.
std::string format_guid(__be64 guid) {
  const auto host = be64toh(guid);
  char text[20];
  std::snprintf(text, sizeof text, "%04x:%04x:%04x:%04x", static_cast<unsigned>(host >> 48) & 0xffffu,
                static_cast<unsigned>(host >> 32) & 0xffffu, static_cast<unsigned>(host >> 16) & 0xffffu,
                static_cast<unsigned>(host) & 0xffffu);
  return text;
}

const char* link_layer(std::uint8_t layer) {
  switch (layer) {
    case IBV_LINK_LAYER_INFINIBAND:
      return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET:
      return "Ethernet";
    default:
      return "unspecified";
  }
}

json describe_device(ibv_device* device) {
  json info = {{"name", ibv_get_device_name(device)}, {"node_guid", format_guid(ibv_get_device_guid(device))}};
  ibv_context* context = ibv_open_device(device);
  if (context == nullptr) {
    info["error"] = std::string("ibv_open_device: ") + std::strerror(errno);
    return info;
  }
  ibv_device_attr attr{};
  if (int rc = ibv_query_device(context, &attr); rc != 0) {
    info["error"] = std::string("ibv_query_device: ") + std::strerror(rc);
  } else {
    json ports = json::array();
    for (std::uint8_t port = 1; port <= attr.phys_port_cnt; ++port) {
      ibv_port_attr port_attr{};
      if (int rc = ibv_query_port(context, port, &port_attr); rc != 0) {
        ports.push_back({{"port", port}, {"error", std::string("ibv_query_port: ") + std::strerror(rc)}});
        continue;
      }
      ports.push_back({{"port", port},
                       {"state", ibv_port_state_str(port_attr.state)},
                       {"link_layer", link_layer(port_attr.link_layer)}});
    }
    info["ports"] = std::move(ports);
  }
  ibv_close_device(context);
  return info;
}

}  // namespace

json probe_rdma() {
  json rdma = {{"devices", json::array()}};
  int count = 0;
  errno = 0;
  ibv_device** devices = ibv_get_device_list(&count);
  if (devices == nullptr) {
    const int err = errno;
    // ENOSYS: the kernel has no RDMA subsystem (no /sys/class/infiniband), the usual case on cloud VMs.
    rdma["error"] = std::string(err == ENOSYS ? "no RDMA support in this kernel" : "no RDMA devices") +
                    " (ibv_get_device_list: " + std::strerror(err) + ")";
    return rdma;
  }
  for (int i = 0; i < count; ++i) rdma["devices"].push_back(describe_device(devices[i]));
  ibv_free_device_list(devices);
  if (count == 0) rdma["error"] = "no RDMA devices found";
  return rdma;
}

#else

nlohmann::ordered_json probe_rdma() {
  return {{"devices", nlohmann::ordered_json::array()},
          {"error", "this ferry tool was built without libibverbs (install libibverbs-dev and rebuild)"}};
}

#endif

}  // namespace ferry::tools
