// Bytes for one large temporary (a packed snapshot a replay reads, a lost
// output's scratch, a link probe), mapped for it and unmapped when it goes.
// From the heap instead, glibc kept them: each large block freed raises its
// mmap threshold (to 32 MiB at most), so the next ones come from the arena
// of whichever thread asked, and a thread arena's free top is never given
// back (malloc_trim only reaches free chunks inside). Recoveries make such
// temporaries in bursts on many threads; a client kept tens of MiB after a
// few faults (the soak, bench/README.md). Small ones stay on the heap,
// which reuses them without a page fault each.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <memory>
#include <new>

namespace ferry::detail {

class ScratchBytes {
 public:
  static constexpr std::size_t mapped_from = std::size_t{1} << 20;

  explicit ScratchBytes(std::size_t n) : size_(n) {
    if (n >= mapped_from) {
      void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      data_ = static_cast<std::byte*>(p);
    } else {
      data_ = new std::byte[n == 0 ? 1 : n]();  // zeroed, as mapped pages are
    }
  }
  ~ScratchBytes() {
    if (size_ >= mapped_from) ::munmap(data_, size_);
    else delete[] data_;
  }
  ScratchBytes(const ScratchBytes&) = delete;
  ScratchBytes& operator=(const ScratchBytes&) = delete;

  std::byte* data() noexcept { return data_; }
  const std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  std::size_t size_;
  std::byte* data_;
};

}  // namespace ferry::detail
