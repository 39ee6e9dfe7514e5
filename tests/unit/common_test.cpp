#include <gtest/gtest.h>

#include "ferry/config.hpp"
#include "ferry/cuda_probe.hpp"
#include "ferry/error.hpp"
#include "ferry/units.hpp"

namespace {

TEST(Units, FormatsBytes) {
  EXPECT_EQ(ferry::format_bytes(0), "0 B");
  EXPECT_EQ(ferry::format_bytes(1023), "1023 B");
  EXPECT_EQ(ferry::format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(ferry::format_bytes(std::size_t{64} << 20), "64.0 MiB");
}

TEST(Units, CountsInWords) {
  EXPECT_EQ(ferry::plural(0, "key"), "0 keys");
  EXPECT_EQ(ferry::plural(1, "key"), "1 key");
  EXPECT_EQ(ferry::plural(2, "CPU worker"), "2 CPU workers");
  EXPECT_EQ(ferry::plural(1, "GPU"), "1 GPU");
  EXPECT_EQ(ferry::plural(3, "process", "processes"), "3 processes");
}

TEST(Units, ParsesBytes) {
  EXPECT_EQ(ferry::parse_bytes("4096"), 4096u);
  EXPECT_EQ(ferry::parse_bytes("64KiB"), std::size_t{64} << 10);
  EXPECT_EQ(ferry::parse_bytes(" 4 MiB "), std::size_t{4} << 20);
  EXPECT_EQ(ferry::parse_bytes("1G"), std::size_t{1} << 30);
  EXPECT_THROW(ferry::parse_bytes("lots"), ferry::UsageError);
  EXPECT_THROW(ferry::parse_bytes("12 parsecs"), ferry::UsageError);
  EXPECT_THROW(ferry::parse_bytes("99999999999999999999999"), ferry::UsageError);
  EXPECT_THROW(ferry::parse_bytes("4 KiB extra"), ferry::UsageError);
}

TEST(CudaProbe, ReportsDevicesOrAReason) {
  const int devices = ferry::cuda::device_count();
  ASSERT_GE(devices, 0);
  if (devices == 0) {
    EXPECT_NE(ferry::cuda::unavailable_reason().find("no CUDA device"), std::string::npos)
        << ferry::cuda::unavailable_reason();
  } else {
    EXPECT_TRUE(ferry::cuda::unavailable_reason().empty());
    EXPECT_FALSE(ferry::cuda::device_info(0).name.empty());
  }
  EXPECT_THROW(ferry::cuda::device_info(devices), ferry::UsageError);
  EXPECT_THROW(ferry::cuda::device_info(-1), ferry::UsageError);
}

TEST(Config, VersionIsSet) { EXPECT_STRNE(ferry::config::version, ""); }

}  // namespace
