#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "ferry/config.hpp"
#include "ferry/cpus.hpp"
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

TEST(Cpus, QuotasRoundUpToWholeCpus) {
  EXPECT_EQ(ferry::cpus_from_quota(800000, 100000), 8u);
  EXPECT_EQ(ferry::cpus_from_quota(150000, 100000), 2u);
  EXPECT_EQ(ferry::cpus_from_quota(10000, 100000), 1u);
  EXPECT_EQ(ferry::cpus_from_quota(-1, 100000), std::nullopt);  // v1: no limit
  EXPECT_EQ(ferry::cpus_from_quota(100000, 0), std::nullopt);
  EXPECT_EQ(ferry::cpus_from_cpu_max("800000 100000\n"), 8u);
  EXPECT_EQ(ferry::cpus_from_cpu_max("250000 100000"), 3u);
  EXPECT_EQ(ferry::cpus_from_cpu_max("max 100000\n"), std::nullopt);
  EXPECT_EQ(ferry::cpus_from_cpu_max("nonsense"), std::nullopt);
}

// Runs `in_child` in a forked process and returns what available_cpus()
// says there, or -1 if the child could not set itself up.
int available_cpus_in_child(const std::function<bool()>& in_child) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipe_fds[0]);
    const int cpus = in_child() ? static_cast<int>(ferry::available_cpus()) : -1;
    [[maybe_unused]] const auto n = write(pipe_fds[1], &cpus, sizeof cpus);
    _exit(0);
  }
  close(pipe_fds[1]);
  int cpus = -1;
  if (read(pipe_fds[0], &cpus, sizeof cpus) != sizeof cpus) cpus = -1;
  close(pipe_fds[0]);
  waitpid(pid, nullptr, 0);
  return cpus;
}

TEST(Cpus, TheAffinityMaskBoundsThem) {
  EXPECT_GE(ferry::available_cpus(), 1u);
  EXPECT_LE(ferry::available_cpus(), std::max(1u, std::thread::hardware_concurrency()));
  const int cpus = available_cpus_in_child([] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    return sched_setaffinity(0, sizeof one, &one) == 0;
  });
  EXPECT_EQ(cpus, 1);
}

// A real cgroup with a quota of half a CPU (v1's cpu controller or v2's
// cpu.max, whichever this machine mounts): the process in it gets 1 worker,
// however many CPUs its affinity mask holds.
TEST(Cpus, ACgroupQuotaBoundsThem) {
  namespace fs = std::filesystem;
  const std::string name = "ferry-cpus-test-" + std::to_string(getpid());
  fs::path dir;
  std::function<bool()> limit;
  if (fs::exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")) {
    dir = fs::path("/sys/fs/cgroup/cpu") / name;
    limit = [&] {
      std::ofstream(dir / "cpu.cfs_period_us") << 100000;
      return static_cast<bool>(std::ofstream(dir / "cpu.cfs_quota_us") << 50000);
    };
  } else if (fs::exists("/sys/fs/cgroup/cgroup.controllers")) {
    dir = fs::path("/sys/fs/cgroup") / name;
    limit = [&] { return static_cast<bool>(std::ofstream(dir / "cpu.max") << "50000 100000"); };
  }
  std::error_code error;
  if (dir.empty() || !fs::create_directory(dir, error))
    GTEST_SKIP() << "cannot make a cgroup here (" << (dir.empty() ? "no cgroup cpu controller" : error.message())
                 << "); needs root and a writable cgroup file system";
  if (!limit() || !fs::exists(dir / (fs::exists(dir / "cpu.max") ? "cpu.max" : "cpu.cfs_quota_us"))) {
    fs::remove(dir, error);
    GTEST_SKIP() << "this cgroup has no CPU quota file (the cpu controller is not enabled for it)";
  }
  const int cpus = available_cpus_in_child([&] {
    return static_cast<bool>(std::ofstream(dir / "cgroup.procs") << getpid() << std::endl);
  });
  fs::remove(dir, error);  // empty again once the child has exited
  EXPECT_EQ(cpus, 1);
}

TEST(Config, VersionIsSet) { EXPECT_STRNE(ferry::config::version, ""); }

}  // namespace
