// GPU gauges from NVML, the NVIDIA driver's management library: utilisation,
// memory and temperature per GPU. NVML ships with the driver, not the
// toolkit, so it is opened with dlopen: a ferryd on a host without a driver
// starts, says NVML is unavailable, and exports no GPU series.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ferry::ferryd {

class NvmlGauges {
 public:
  struct Reading {
    unsigned index = 0;
    std::string model;
    std::optional<double> utilization;  // 0..1 of the last sample period
    std::optional<double> memory_used_bytes, memory_total_bytes;
    std::optional<double> temperature_celsius;
  };

  // Loads and initialises NVML; never throws (available() says how it went).
  NvmlGauges();
  ~NvmlGauges();
  NvmlGauges(const NvmlGauges&) = delete;
  NvmlGauges& operator=(const NvmlGauges&) = delete;

  bool available() const noexcept { return api_ != nullptr; }
  const std::string& unavailable_reason() const noexcept { return reason_; }
  // One reading per GPU; a value NVML cannot give for a GPU is left empty.
  std::vector<Reading> read() const;

 private:
  struct Api;
  void* library_ = nullptr;
  Api* api_ = nullptr;
  std::string reason_;
};

}  // namespace ferry::ferryd
