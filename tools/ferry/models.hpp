#pragma once

#include <string>

namespace ferry::tools {

struct ModelsOptions {
  std::string action = "list";  // list, show, reset
  std::string kernel;           // show: required; reset: only this kernel's models
  std::string device;           // only models of this device key
  std::string dir;              // default: FERRY_PERFMODEL_DIR, else PerfModels::default_dir()
};

// `ferry models`: the performance models the runtime learned (as StarPU's
// starpu_perfmodel_display shows its own): list them, show one kernel's
// buckets, or reset (delete) them. Returns the exit status.
int run_models(const ModelsOptions& options);

}  // namespace ferry::tools
