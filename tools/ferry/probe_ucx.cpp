// UCX as Ferry's transport would see it: the version, every transport
// resource UCT offers on this machine, and which of them a UCP context with
// Ferry's features (AM + RMA) actually selects, which is where UCX_TLS shows.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "probes.hpp"

#if FERRY_TOOLS_HAVE_UCX
#include <ucp/api/ucp.h>
#include <uct/api/uct.h>
#endif

namespace ferry::tools {

#if FERRY_TOOLS_HAVE_UCX
namespace {

using json = nlohmann::ordered_json;

// UCX logs its warnings (an unknown UCX_TLS entry, a device that fails to
// open) to stdout, where they would corrupt `ferry info --json`.
class StdoutToStderr {
 public:
  StdoutToStderr() {
    std::fflush(stdout);
    saved_ = ::dup(STDOUT_FILENO);
    if (saved_ >= 0) ::dup2(STDERR_FILENO, STDOUT_FILENO);
  }
  ~StdoutToStderr() {
    std::fflush(stdout);
    if (saved_ >= 0) {
      ::dup2(saved_, STDOUT_FILENO);
      ::close(saved_);
    }
  }
  StdoutToStderr(const StdoutToStderr&) = delete;
  StdoutToStderr& operator=(const StdoutToStderr&) = delete;

 private:
  int saved_ = -1;
};

const char* device_type(uct_device_type_t type) {
  switch (type) {
    case UCT_DEVICE_TYPE_NET:
      return "net";
    case UCT_DEVICE_TYPE_SHM:
      return "shm";
    case UCT_DEVICE_TYPE_ACC:
      return "acc";
    case UCT_DEVICE_TYPE_SELF:
      return "self";
    default:
      return "other";
  }
}

void list_md_resources(uct_component_h component, const char* md_name, json& resources, json& errors) {
  uct_md_config_t* config = nullptr;
  ucs_status_t status = uct_md_config_read(component, nullptr, nullptr, &config);
  if (status != UCS_OK) {
    errors.push_back(std::string(md_name) + ": uct_md_config_read: " + ucs_status_string(status));
    return;
  }
  uct_md_h md = nullptr;
  status = uct_md_open(component, md_name, config, &md);
  uct_config_release(config);
  if (status != UCS_OK) {
    errors.push_back(std::string(md_name) + ": uct_md_open: " + ucs_status_string(status));
    return;
  }
  uct_tl_resource_desc_t* tls = nullptr;
  unsigned count = 0;
  status = uct_md_query_tl_resources(md, &tls, &count);
  if (status != UCS_OK) {
    errors.push_back(std::string(md_name) + ": uct_md_query_tl_resources: " + ucs_status_string(status));
  } else {
    for (unsigned i = 0; i < count; ++i)
      resources.push_back({{"transport", tls[i].tl_name},
                           {"device", tls[i].dev_name},
                           {"memory_domain", md_name},
                           {"type", device_type(tls[i].dev_type)}});
    uct_release_tl_resource_list(tls);
  }
  uct_md_close(md);
}

// Every transport resource of every memory domain, regardless of UCX_TLS.
json uct_resources(json& errors) {
  json resources = json::array();
  uct_component_h* components = nullptr;
  unsigned count = 0;
  if (ucs_status_t status = uct_query_components(&components, &count); status != UCS_OK) {
    errors.push_back(std::string("uct_query_components: ") + ucs_status_string(status));
    return resources;
  }
  for (unsigned c = 0; c < count; ++c) {
    uct_component_attr_t attr{};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (uct_component_query(components[c], &attr) != UCS_OK) continue;
    std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds.data();
    if (ucs_status_t status = uct_component_query(components[c], &attr); status != UCS_OK) {
      errors.push_back(std::string(attr.name) + ": uct_component_query: " + ucs_status_string(status));
      continue;
    }
    for (const auto& md : mds) list_md_resources(components[c], md.md_name, resources, errors);
  }
  uct_release_component_list(components);
  return resources;
}

// The resources a UCP context selects, as "tl/device". UCP offers no query
// for them; ucp_context_print_info lists them as "resource N : ... -- tl/dev".
std::set<std::string> ucp_selected(std::string& error) {
  std::set<std::string> selected;
  ucp_config_t* config = nullptr;
  if (ucs_status_t status = ucp_config_read(nullptr, nullptr, &config); status != UCS_OK) {
    error = std::string("ucp_config_read: ") + ucs_status_string(status);
    return selected;
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA;
  ucp_context_h context = nullptr;
  const ucs_status_t status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (status != UCS_OK) {
    error = std::string("ucp_init: ") + ucs_status_string(status);
    return selected;
  }
  char* text = nullptr;
  std::size_t size = 0;
  if (FILE* stream = open_memstream(&text, &size); stream != nullptr) {
    ucp_context_print_info(context, stream);
    std::fclose(stream);
    const std::string info(text, size);
    std::free(text);
    for (std::size_t pos = info.find("resource"); pos != std::string::npos; pos = info.find("resource", pos + 1)) {
      const auto arrow = info.find("-- ", pos);
      const auto eol = info.find('\n', pos);
      if (arrow == std::string::npos || arrow > eol) continue;
      auto name = info.substr(arrow + 3, eol - arrow - 3);
      name.erase(name.find_last_not_of(" \t") + 1);
      selected.insert(name);
    }
  }
  if (selected.empty()) error = "the UCP context did not say which resources it selected";
  ucp_cleanup(context);
  return selected;
}

}  // namespace

json probe_ucx() {
  StdoutToStderr guard;
  json ucx;
  ucx["version"] = ucp_get_version_string();
  const char* tls = std::getenv("UCX_TLS");
  ucx["ucx_tls"] = tls != nullptr ? json(tls) : json(nullptr);
  json errors = json::array();
  json resources = uct_resources(errors);
  std::string context_error;
  const auto selected = ucp_selected(context_error);
  for (auto& r : resources) {
    if (context_error.empty())
      r["selected"] = selected.contains(r["transport"].get<std::string>() + "/" + r["device"].get<std::string>());
  }
  ucx["resources"] = std::move(resources);
  if (!context_error.empty()) ucx["context_error"] = context_error;
  if (!errors.empty()) ucx["resource_errors"] = std::move(errors);
  return ucx;
}

#else

nlohmann::ordered_json probe_ucx() {
  return {{"error", "this ferry tool was built without UCX (install libucx-dev and rebuild)"}};
}

#endif

}  // namespace ferry::tools
