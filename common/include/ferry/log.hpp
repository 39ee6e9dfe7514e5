// Ferry's logger. The level comes from FERRY_LOG (trace, debug, info, warn,
// error, critical, off; default info) the first time log() is called.
#pragma once

#include <spdlog/logger.h>

namespace ferry {

spdlog::logger& log();

}  // namespace ferry
