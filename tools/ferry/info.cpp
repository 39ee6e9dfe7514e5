// `ferry info`: gathers every probe into one JSON document, then prints it
// either as is or as aligned text, so both forms always say the same.
#include "info.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "ferry/units.hpp"
#include "probes.hpp"

namespace ferry::tools {

namespace {

using json = nlohmann::ordered_json;

constexpr int label_width = 22;

void row(const std::string& label, std::string value) {
  value.erase(value.find_last_not_of(' ') + 1);
  fmt::print("  {:<{}}{}\n", label, label_width, value);
}

std::string bytes(const json& value) { return format_bytes(value.get<std::uint64_t>()); }

// The "none — why" line every probe prints when it has nothing to show.
void print_unavailable(const std::string& label, const json& section) {
  row(label, "none — " + section.value("error", std::string("unknown")));
}

template <typename Probe>
json safely(Probe probe) {
  try {
    return probe();
  } catch (const std::exception& e) {
    return {{"error", e.what()}};
  }
}

void print_cpu(const json& cpu) {
  fmt::print("\nCPU\n");
  if (cpu.contains("error")) row("error", cpu["error"].get<std::string>());
  row("model", cpu.value("model", std::string("unknown")));
  std::string cores = std::to_string(cpu.value("logical_cores", 0));
  if (cpu.contains("usable_cores"))
    cores += fmt::format(" (usable by this process: {})", cpu["usable_cores"].get<int>());
  row("logical cores", cores);
  row("hardware_concurrency", std::to_string(cpu.value("hardware_concurrency", 0u)));
  const json& nodes = cpu.contains("numa_nodes") ? cpu["numa_nodes"] : json(nullptr);
  if (!nodes.is_array()) {
    row("NUMA nodes", "unknown (no /sys/devices/system/node)");
    return;
  }
  row("NUMA nodes", std::to_string(nodes.size()));
  for (const auto& node : nodes) {
    std::string text = "cpus " + node["cpus"].get<std::string>();
    if (node.contains("memory_bytes")) text += ", " + bytes(node["memory_bytes"]);
    row(fmt::format("  node{}", node["node"].get<int>()), text);
  }
}

void print_memory(const json& memory) {
  fmt::print("\nHost memory\n");
  if (memory.contains("error")) row("error", memory["error"].get<std::string>());
  if (memory.contains("total_bytes")) row("total", bytes(memory["total_bytes"]));
  if (memory.contains("available_bytes")) row("available", bytes(memory["available_bytes"]));
  if (memory.contains("memlock_error")) {
    row("RLIMIT_MEMLOCK", memory["memlock_error"].get<std::string>());
  } else if (memory.contains("memlock_limit_bytes")) {
    const json& limit = memory["memlock_limit_bytes"];
    row("RLIMIT_MEMLOCK",
        (limit.is_null() ? std::string("unlimited") : bytes(limit)) + " (caps the host memory a process may pin)");
  }
}

void print_cuda(const json& cuda) {
  fmt::print("\nCUDA devices\n");
  if (cuda.contains("module")) {
    // Which libferry_cuda.so this process loaded, or why none.
    const json& module = cuda["module"];
    const std::string state = module.value("state", std::string("?"));
    row("module", state == "loaded" ? module.value("path", std::string("?"))
                                    : fmt::format("{} — {}", state, module.value("detail", std::string("?"))));
  }
  if (!cuda.contains("devices") || cuda["devices"].empty()) return print_unavailable("devices", cuda);
  for (const auto& d : cuda["devices"]) {
    const std::string label = std::to_string(d.value("ordinal", -1));
    if (d.contains("error")) {
      row(label, "error — " + d["error"].get<std::string>());
      continue;
    }
    row(label, fmt::format("{}, {} ({} free), compute capability {}, {} SMs", d["name"].get<std::string>(),
                           bytes(d["total_bytes"]), bytes(d["free_bytes"]), d["compute_capability"].get<std::string>(),
                           d["multiprocessors"].get<int>()));
  }
}

void print_ucx(const json& ucx) {
  fmt::print("\nUCX {}\n", ucx.value("version", std::string()));
  if (ucx.contains("error") && !ucx.contains("resources")) return print_unavailable("transports", ucx);
  if (ucx.contains("ucx_tls") && !ucx["ucx_tls"].is_null())
    row("UCX_TLS", ucx["ucx_tls"].get<std::string>() + " (set: UCP selects only what it allows)");
  else
    row("UCX_TLS", "not set (UCP selects from every transport below)");
  row("AM+RMA context", ucx.contains("context_error") ? "failed — " + ucx["context_error"].get<std::string>() : "ok");
  const json resources = ucx.value("resources", json::array());
  if (resources.empty()) {
    row("transports", "none — UCT lists no transport resources");
  } else {
    std::size_t name_width = std::string("tl/device").size(), md_width = std::string("memory domain").size();
    for (const auto& r : resources) {
      name_width =
          std::max(name_width, r["transport"].get<std::string>().size() + 1 + r["device"].get<std::string>().size());
      md_width = std::max(md_width, r["memory_domain"].get<std::string>().size());
    }
    const bool known = !ucx.contains("context_error");
    row("transports", fmt::format("{:<{}}  {:<{}}  {:<4}{}", "tl/device", name_width, "memory domain", md_width, "type",
                                  known ? "  selected by UCP" : ""));
    for (const auto& r : resources) {
      const std::string name = r["transport"].get<std::string>() + "/" + r["device"].get<std::string>();
      row("", fmt::format("{:<{}}  {:<{}}  {:<4}{}", name, name_width, r["memory_domain"].get<std::string>(), md_width,
                          r["type"].get<std::string>(), known ? (r.value("selected", false) ? "  yes" : "  no") : ""));
    }
  }
  if (ucx.contains("resource_errors"))
    for (const auto& e : ucx["resource_errors"]) row("skipped", e.get<std::string>());
}

void print_rdma(const json& rdma) {
  fmt::print("\nRDMA devices (libibverbs)\n");
  if (!rdma.contains("devices") || rdma["devices"].empty()) return print_unavailable("devices", rdma);
  for (const auto& d : rdma["devices"]) {
    std::string text = "node GUID " + d.value("node_guid", std::string("?"));
    if (d.contains("error")) text += ", error — " + d["error"].get<std::string>();
    for (const auto& p : d.value("ports", json::array())) {
      text += fmt::format(", port {}: ", p["port"].get<int>());
      text += p.contains("error") ? p["error"].get<std::string>()
                                  : p["state"].get<std::string>() + " " + p["link_layer"].get<std::string>();
    }
    row(d["name"].get<std::string>(), text);
  }
}

}  // namespace

int run_info(bool as_json) {
  const json info = {{"ferry", safely(probe_build)}, {"cpu", safely(probe_cpu)}, {"memory", safely(probe_memory)},
                     {"cuda", safely(probe_cuda)},   {"ucx", safely(probe_ucx)}, {"rdma", safely(probe_rdma)}};
  if (as_json) {
    // Replace rather than throw on a device name that is not valid UTF-8.
    fmt::print("{}\n", info.dump(2, ' ', false, json::error_handler_t::replace));
    return 0;
  }
  const json& build = info["ferry"];
  fmt::print("Ferry {} (CUDA support: {})\n", build.value("version", std::string("?")),
             build.value("cuda", false) ? "on" : "off");
  print_cpu(info["cpu"]);
  print_memory(info["memory"]);
  print_cuda(info["cuda"]);
  print_ucx(info["ucx"]);
  print_rdma(info["rdma"]);
  return 0;
}

}  // namespace ferry::tools
