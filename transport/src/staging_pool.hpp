// Reusable byte buffers for an encrypted link's sealed payloads. A fresh
// multi-MiB allocation per message comes back from the kernel as new pages
// (glibc trims the heap top or maps large blocks), and faulting them in cost
// the sender as much CPU as sealing; a handful of buffers kept per worker
// removes that.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace ferry::transport {

class StagingPool {
 public:
  // Keeps at most `keep_bytes` of idle buffers; smaller requests than
  // `min_bytes` are plain allocations (malloc reuses those well).
  explicit StagingPool(std::size_t keep_bytes = std::size_t{64} << 20, std::size_t min_bytes = std::size_t{64} << 10);

  // A buffer of at least `bytes` (not zeroed: whoever fills it writes every
  // byte it later reads). It returns to the pool when the last owner drops
  // it, even after the pool itself is gone (then it is freed).
  std::shared_ptr<std::byte[]> take(std::size_t bytes);

  std::size_t idle_bytes() const;

 private:
  struct State {
    std::mutex mutex;
    std::size_t keep_bytes;
    std::size_t idle_bytes = 0;
    struct Idle {
      std::size_t capacity;
      std::unique_ptr<std::byte[]> data;
    };
    std::vector<Idle> idle;
    void give_back(std::byte* data, std::size_t capacity);
  };
  std::shared_ptr<State> state_;
  std::size_t min_bytes_;
};

}  // namespace ferry::transport
