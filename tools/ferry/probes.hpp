// What `ferry info` asks the machine. Each probe returns its section as JSON
// and never throws: a probe that cannot answer says why in an "error" field,
// so one missing library or device never hides the rest of the picture.
#pragma once

#include <nlohmann/json.hpp>

namespace ferry::tools {

nlohmann::ordered_json probe_build();
nlohmann::ordered_json probe_cpu();
nlohmann::ordered_json probe_memory();
nlohmann::ordered_json probe_cuda();
nlohmann::ordered_json probe_ucx();
nlohmann::ordered_json probe_rdma();

}  // namespace ferry::tools
