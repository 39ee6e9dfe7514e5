#include "ferry/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <string>

namespace ferry {

namespace {

std::shared_ptr<spdlog::logger> make_logger() {
  auto logger = std::make_shared<spdlog::logger>("ferry", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_pattern("[%H:%M:%S.%e] [ferry] [%^%l%$] %v");
  auto level = spdlog::level::info;
  if (const char* env = std::getenv("FERRY_LOG"); env != nullptr && *env != '\0') {
    level = spdlog::level::from_str(env);
    // from_str answers "off" for a word it does not know; say so instead of going silent.
    if (level == spdlog::level::off && std::string(env) != "off") {
      logger->warn("FERRY_LOG={} is not a level (trace, debug, info, warn, error, critical, off); using info", env);
      level = spdlog::level::info;
    }
  }
  logger->set_level(level);
  logger->flush_on(spdlog::level::warn);
  return logger;
}

}  // namespace

spdlog::logger& log() {
  static const std::shared_ptr<spdlog::logger> logger = make_logger();
  return *logger;
}

}  // namespace ferry
