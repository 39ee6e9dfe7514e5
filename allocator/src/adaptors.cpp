#include <fmt/format.h>

#include "ferry/allocator/limiting_adaptor.hpp"
#include "ferry/allocator/statistics_adaptor.hpp"
#include "ferry/allocator/synchronized_adaptor.hpp"
#include "ferry/error.hpp"
#include "ferry/units.hpp"

namespace ferry {

namespace {

std::shared_ptr<MemoryResource> require(std::shared_ptr<MemoryResource> upstream, const char* adaptor) {
  if (!upstream) throw UsageError(fmt::format("{}: the upstream resource is null", adaptor));
  return upstream;
}

}  // namespace

// ---- StatisticsAdaptor ----

StatisticsAdaptor::StatisticsAdaptor(std::shared_ptr<MemoryResource> upstream)
    : upstream_(require(std::move(upstream), "StatisticsAdaptor")) {}

void* StatisticsAdaptor::do_allocate(std::size_t bytes, std::size_t alignment, StreamRef stream) {
  void* ptr = upstream_->allocate(bytes, alignment, stream);
  const std::size_t now = bytes_in_use_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::size_t peak = peak_bytes_.load(std::memory_order_relaxed);
  while (now > peak && !peak_bytes_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  blocks_in_use_.fetch_add(1, std::memory_order_relaxed);
  allocations_.fetch_add(1, std::memory_order_relaxed);
  return ptr;
}

void StatisticsAdaptor::do_deallocate(void* ptr, std::size_t bytes, StreamRef stream) {
  // Counted only once the upstream accepted the pointer, so a rejected free
  // leaves the figures true.
  upstream_->deallocate(ptr, bytes, stream);
  bytes_in_use_.fetch_sub(bytes, std::memory_order_relaxed);
  blocks_in_use_.fetch_sub(1, std::memory_order_relaxed);
  deallocations_.fetch_add(1, std::memory_order_relaxed);
}

bool StatisticsAdaptor::do_is_equal(const MemoryResource& other) const noexcept {
  if (const auto* same = dynamic_cast<const StatisticsAdaptor*>(&other)) return upstream_->is_equal(*same->upstream_);
  return false;
}

StatisticsAdaptor::Stats StatisticsAdaptor::stats() const noexcept {
  Stats s;
  s.bytes_in_use = bytes_in_use_.load(std::memory_order_relaxed);
  s.peak_bytes = peak_bytes_.load(std::memory_order_relaxed);
  s.blocks_in_use = blocks_in_use_.load(std::memory_order_relaxed);
  s.allocations = allocations_.load(std::memory_order_relaxed);
  s.deallocations = deallocations_.load(std::memory_order_relaxed);
  return s;
}

void StatisticsAdaptor::reset_peak() noexcept {
  peak_bytes_.store(bytes_in_use_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

std::string StatisticsAdaptor::describe() const {
  const Stats s = stats();
  return fmt::format("stats({} in use in {} blocks, peak {}, {} allocations) over {}", format_bytes(s.bytes_in_use),
                     s.blocks_in_use, format_bytes(s.peak_bytes), s.allocations, upstream_->describe());
}

// ---- LimitingAdaptor ----

LimitingAdaptor::LimitingAdaptor(std::shared_ptr<MemoryResource> upstream, std::size_t cap_bytes)
    : upstream_(require(std::move(upstream), "LimitingAdaptor")), cap_(cap_bytes) {}

void* LimitingAdaptor::do_allocate(std::size_t bytes, std::size_t alignment, StreamRef stream) {
  // Reserve first, so that two threads cannot both squeeze under the cap.
  std::size_t in_use = in_use_.load(std::memory_order_relaxed);
  do {
    if (bytes > cap_ || in_use > cap_ - bytes)
      throw OutOfMemory(fmt::format("request of {} would exceed the cap of {} ({} in use): {}", format_bytes(bytes),
                                    format_bytes(cap_), format_bytes(in_use), upstream_->describe()),
                        bytes);
  } while (!in_use_.compare_exchange_weak(in_use, in_use + bytes, std::memory_order_relaxed));
  try {
    return upstream_->allocate(bytes, alignment, stream);
  } catch (...) {
    in_use_.fetch_sub(bytes, std::memory_order_relaxed);
    throw;
  }
}

void LimitingAdaptor::do_deallocate(void* ptr, std::size_t bytes, StreamRef stream) {
  upstream_->deallocate(ptr, bytes, stream);
  in_use_.fetch_sub(bytes, std::memory_order_relaxed);
}

bool LimitingAdaptor::do_is_equal(const MemoryResource& other) const noexcept {
  if (const auto* same = dynamic_cast<const LimitingAdaptor*>(&other)) return upstream_->is_equal(*same->upstream_);
  return false;
}

std::string LimitingAdaptor::describe() const {
  return fmt::format("limit({} of {} in use) over {}", format_bytes(bytes_in_use()), format_bytes(cap_),
                     upstream_->describe());
}

// ---- SynchronizedAdaptor ----

SynchronizedAdaptor::SynchronizedAdaptor(std::shared_ptr<MemoryResource> upstream)
    : upstream_(require(std::move(upstream), "SynchronizedAdaptor")) {}

void* SynchronizedAdaptor::do_allocate(std::size_t bytes, std::size_t alignment, StreamRef stream) {
  std::lock_guard lock(mutex_);
  return upstream_->allocate(bytes, alignment, stream);
}

void SynchronizedAdaptor::do_deallocate(void* ptr, std::size_t bytes, StreamRef stream) {
  std::lock_guard lock(mutex_);
  upstream_->deallocate(ptr, bytes, stream);
}

bool SynchronizedAdaptor::do_is_equal(const MemoryResource& other) const noexcept {
  if (const auto* same = dynamic_cast<const SynchronizedAdaptor*>(&other)) return upstream_->is_equal(*same->upstream_);
  return false;
}

std::string SynchronizedAdaptor::describe() const {
  std::lock_guard lock(mutex_);
  return fmt::format("synchronized over {}", upstream_->describe());
}

}  // namespace ferry
