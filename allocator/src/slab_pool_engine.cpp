#include "slab_pool_engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "ferry/error.hpp"
#include "ferry/log.hpp"
#include "ferry/units.hpp"

namespace ferry::detail {

namespace {

std::atomic<std::uint64_t> next_pool_id{1};

constexpr std::size_t round_up(std::size_t value, std::size_t multiple) noexcept {
  return (value + multiple - 1) / multiple * multiple;
}

std::uint64_t bit(std::size_t index) noexcept { return std::uint64_t{1} << (index & 63); }

}  // namespace

SlabPoolEngine::SlabPoolEngine(std::unique_ptr<SlabSource> source, const SlabPool::Options& options)
    : source_(std::move(source)),
      options_(options),
      throw_on_invalid_free_(throws_on_invalid_free(options.on_invalid_free)),
      id_(next_pool_id.fetch_add(1, std::memory_order_relaxed)) {
  if (!source_) throw UsageError("SlabPool: the slab source is null");
  if (options_.slab_bytes == 0) throw UsageError("SlabPool: Options.slab_bytes must be positive");
  options_.slab_bytes = round_up(std::max(options_.slab_bytes, run_bytes(kClasses - 1)), kPageBytes);
}

SlabPoolEngine::~SlabPoolEngine() {
  orphan_thread_caches(*this);
  std::lock_guard lock(mutex_);
  for (const auto& record : slabs_) {
    for (SlabObserver* observer : observers_) observer->on_slab_removed(record->slab);
    source_->unmap(record->slab.base, record->slab.bytes);
  }
}

// ---- allocation ----

void* SlabPoolEngine::allocate(std::size_t bytes, std::size_t alignment) {
  const std::size_t want = std::max({bytes, alignment, std::size_t{1} << kMinClassShift});
  if (want <= kMaxSmallBytes) return allocate_small(size_class(want));
  return allocate_large(bytes, alignment);
}

void* SlabPoolEngine::allocate_small(unsigned cls) {
  CachedBlock block;
  if (options_.thread_cache) {
    ThreadCache::Bin& bin = thread_cache_for(*this, id_).bins[cls];
    if (bin.count == 0) refill(bin, cls);
    block = bin.slots[--bin.count];
  } else {
    std::lock_guard lock(mutex_);
    take_blocks(cls, &block, 1);
  }
  const std::uintptr_t addr = reinterpret_cast<std::uintptr_t>(block.ptr);
  const std::size_t index = (addr - block.span->start.load(std::memory_order_relaxed)) >> class_shift(cls);
  block.span->owned[index >> 6].fetch_or(bit(index), std::memory_order_relaxed);
  return block.ptr;
}

void SlabPoolEngine::refill(ThreadCache::Bin& bin, unsigned cls) {
  const std::uint32_t want = std::max<std::uint32_t>(1, bin.capacity / 2);
  std::lock_guard lock(mutex_);
  Transfer& store = transfer_[cls];
  if (store.count == 0) {
    bin.count = take_blocks(cls, bin.slots, want);
    return;
  }
  const std::uint32_t moved = std::min(want, store.count);
  store.count -= moved;
  std::memcpy(bin.slots, store.slots + store.count, moved * sizeof(CachedBlock));
  bin.count = moved;
}

void* SlabPoolEngine::allocate_large(std::size_t bytes, std::size_t alignment) {
  if (bytes > source_->capacity() || alignment > source_->capacity())
    out_of_memory(bytes, fmt::format("more than {} can provide ({})", source_->name(),
                                     format_bytes(source_->capacity())),
                  describe());
  const std::size_t pages = round_up(bytes, kPageBytes) >> kPageShift;
  std::lock_guard lock(mutex_);
  Span* span = carve(pages, std::max(alignment, kPageBytes));
  span->state.store(SpanState::large, std::memory_order_release);
  stats_.bytes_out += span->pages << kPageShift;
  return reinterpret_cast<void*>(span->start.load(std::memory_order_relaxed));
}

// ---- deallocation ----

void SlabPoolEngine::deallocate(void* ptr, std::size_t bytes) {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  Span* span = map_.get(addr >> kPageShift);
  if (span == nullptr) return invalid_free(ptr, bytes, "it was not allocated by this pool");
  switch (span->state.load(std::memory_order_acquire)) {
    case SpanState::run: return free_small(span, addr, bytes);
    case SpanState::large: return free_large(span, addr, bytes);
    case SpanState::free: return invalid_free(ptr, bytes, "it is not a live block (freed twice?)");
    case SpanState::unused: break;
  }
  invalid_free(ptr, bytes, "it was not allocated by this pool");
}

void SlabPoolEngine::free_small(Span* span, std::uintptr_t addr, std::size_t bytes) {
  void* ptr = reinterpret_cast<void*>(addr);
  const unsigned shift = span->block_shift.load(std::memory_order_relaxed);
  const std::size_t offset = addr - span->start.load(std::memory_order_relaxed);
  if ((offset & ((std::size_t{1} << shift) - 1)) != 0)
    return invalid_free(ptr, bytes, fmt::format("it points inside a {} block", format_bytes(std::size_t{1} << shift)));
  const std::size_t index = offset >> shift;
  if (index >= span->blocks.load(std::memory_order_relaxed))
    return invalid_free(ptr, bytes, "it was not allocated by this pool");
  if (bytes > (std::size_t{1} << shift))
    return invalid_free(ptr, bytes, fmt::format("the block holds only {}", format_bytes(std::size_t{1} << shift)));
  const std::uint64_t before = span->owned[index >> 6].fetch_and(~bit(index), std::memory_order_acq_rel);
  if ((before & bit(index)) == 0) return invalid_free(ptr, bytes, "it is not a live block (freed twice?)");

  const unsigned cls = shift - kMinClassShift;
  if (options_.thread_cache) {
    ThreadCache::Bin& bin = thread_cache_for(*this, id_).bins[cls];
    if (bin.count == bin.capacity) flush(bin, bin.capacity / 2, /*transfer=*/true);
    bin.slots[bin.count++] = {ptr, span};
  } else {
    std::lock_guard lock(mutex_);
    return_block(span, addr);
  }
}

void SlabPoolEngine::flush(ThreadCache::Bin& bin, std::uint32_t keep, bool transfer) {
  // The oldest blocks go back; the most recently freed stay, being warm.
  const std::uint32_t give = bin.count - std::min(keep, bin.count);
  {
    std::lock_guard lock(mutex_);
    std::uint32_t i = 0;
    if (transfer && give > 0) {
      Transfer& store = transfer_[bin.slots[0].span->cls];
      const std::uint32_t moved = std::min(give, kTransferBlocks - store.count);
      std::memcpy(store.slots + store.count, bin.slots, moved * sizeof(CachedBlock));
      store.count += moved;
      i = moved;
    }
    for (; i < give; ++i) return_block(bin.slots[i].span, reinterpret_cast<std::uintptr_t>(bin.slots[i].ptr));
  }
  std::memmove(bin.slots, bin.slots + give, (bin.count - give) * sizeof(CachedBlock));
  bin.count -= give;
}

void SlabPoolEngine::drain(ThreadCache& cache) {
  for (auto& bin : cache.bins) flush(bin, 0);
}

void SlabPoolEngine::free_large(Span* span, std::uintptr_t addr, std::size_t bytes) {
  void* ptr = reinterpret_cast<void*>(addr);
  std::unique_lock lock(mutex_);
  // Looked up without the lock; confirm now that the span cannot change.
  if (span->state.load(std::memory_order_relaxed) != SpanState::large ||
      span->start.load(std::memory_order_relaxed) != addr) {
    lock.unlock();
    return invalid_free(ptr, bytes, "it does not start a live block of this pool");
  }
  if (bytes > (span->pages << kPageShift)) {
    lock.unlock();
    return invalid_free(ptr, bytes, fmt::format("the block holds only {}", format_bytes(span->pages << kPageShift)));
  }
  stats_.bytes_out -= span->pages << kPageShift;
  make_free(span);
}

void SlabPoolEngine::invalid_free(const void* ptr, std::size_t bytes, const std::string& why) {
  invalid_frees_.fetch_add(1, std::memory_order_relaxed);
  const std::string message = fmt::format("deallocate({}, {}) refused: {}; pool: {}", ptr, format_bytes(bytes), why,
                                          describe());
  if (throw_on_invalid_free_) throw UsageError(message);
  log().error("{} (the pool is unchanged)", message);
}

// ---- central store: small-block runs ----

std::uint32_t SlabPoolEngine::take_blocks(unsigned cls, CachedBlock* out, std::uint32_t count) {
  std::uint32_t got = 0;
  const unsigned shift = class_shift(cls);
  while (got < count) {
    Span* run = runs_[cls];
    if (run == nullptr) {
      try {
        run = new_run(cls);
      } catch (const OutOfMemory&) {
        if (got > 0) break;  // hand out what there is; the next request will fail if need be
        throw;
      }
    }
    const std::uintptr_t start = run->start.load(std::memory_order_relaxed);
    const std::uint32_t blocks = run->blocks.load(std::memory_order_relaxed);
    const std::uint32_t taken_before = got;
    for (std::size_t word = 0; word * 64 < blocks && got < count; ++word) {
      const std::size_t in_word = std::min<std::size_t>(64, blocks - word * 64);
      const std::uint64_t valid = in_word == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << in_word) - 1;
      std::uint64_t free_bits = ~run->taken[word] & valid;
      while (free_bits != 0 && got < count) {
        const std::size_t index = word * 64 + static_cast<std::size_t>(std::countr_zero(free_bits));
        free_bits &= free_bits - 1;
        run->taken[word] |= bit(index);
        out[got++] = {reinterpret_cast<void*>(start + (index << shift)), run};
      }
    }
    run->taken_count += got - taken_before;
    if (run->taken_count == blocks) unlink_run(run);
  }
  stats_.bytes_out += std::size_t{got} << shift;
  return got;
}

void SlabPoolEngine::return_block(Span* run, std::uintptr_t addr) {
  const unsigned shift = run->block_shift.load(std::memory_order_relaxed);
  const std::size_t index = (addr - run->start.load(std::memory_order_relaxed)) >> shift;
  run->taken[index >> 6] &= ~bit(index);
  const bool was_full = run->taken_count == run->blocks.load(std::memory_order_relaxed);
  --run->taken_count;
  stats_.bytes_out -= std::size_t{1} << shift;
  if (was_full) push_run(run);
  // Keep one empty run per class to absorb churn; give back any other.
  if (run->taken_count == 0 && (runs_[run->cls] != run || run->next != nullptr)) release_run(run);
}

Span* SlabPoolEngine::new_run(unsigned cls) {
  const unsigned shift = class_shift(cls);
  Span* run = carve(run_bytes(cls) >> kPageShift, std::max(std::size_t{1} << shift, kPageBytes));
  run->cls = cls;
  run->taken_count = 0;
  std::fill(std::begin(run->taken), std::end(run->taken), 0);
  for (auto& word : run->owned) word.store(0, std::memory_order_relaxed);
  run->block_shift.store(shift, std::memory_order_relaxed);
  run->blocks.store(static_cast<std::uint32_t>((run->pages << kPageShift) >> shift), std::memory_order_relaxed);
  map_.set_range(run->first_page(), run->pages, run);
  run->state.store(SpanState::run, std::memory_order_release);
  push_run(run);
  return run;
}

void SlabPoolEngine::release_run(Span* run) {
  unlink_run(run);
  // A free span is found through its first and last pages only.
  for (std::uintptr_t page = run->first_page() + 1; page < run->last_page(); ++page) map_.set(page, nullptr);
  make_free(run);
}

void SlabPoolEngine::push_run(Span* run) {
  Span*& head = runs_[run->cls];
  run->prev = nullptr;
  run->next = head;
  if (head != nullptr) head->prev = run;
  head = run;
  run->listed = true;
}

void SlabPoolEngine::unlink_run(Span* run) {
  if (!run->listed) return;
  if (run->prev != nullptr) run->prev->next = run->next;
  else runs_[run->cls] = run->next;
  if (run->next != nullptr) run->next->prev = run->prev;
  run->prev = run->next = nullptr;
  run->listed = false;
}

// ---- central store: spans and slabs ----

Span* SlabPoolEngine::carve(std::size_t pages, std::size_t alignment) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (auto it = free_spans_.lower_bound(pages); it != free_spans_.end(); ++it) {
      Span* span = it->second;
      const std::uintptr_t start = span->start.load(std::memory_order_relaxed);
      const std::size_t head = (round_up(start, alignment) - start) >> kPageShift;
      if (head + pages > span->pages) continue;
      erase_free(span);
      if (head > 0) {
        Span* rest = split(span, head);
        insert_free(span);
        span = rest;
      }
      if (span->pages > pages) insert_free(split(span, pages));
      return span;
    }
    grow(pages, alignment);
  }
  throw Error("SlabPool: a new slab did not fit the request it was made for");  // cannot happen: grow() sizes it
}

void SlabPoolEngine::grow(std::size_t pages, std::size_t alignment) {
  const std::size_t need = (pages << kPageShift) + (alignment > kPageBytes ? alignment - kPageBytes : 0);
  const bool dedicated = need > options_.slab_bytes;
  const std::size_t bytes = dedicated ? round_up(need, kPageBytes) : options_.slab_bytes;
  if (stats_.slab_bytes + bytes > source_->capacity()) release_retained(bytes);
  if (stats_.slab_bytes + bytes > source_->capacity())
    out_of_memory(pages << kPageShift, fmt::format("a new slab of {} would take the pool past what {} can provide ({})",
                                                   format_bytes(bytes), source_->name(),
                                                   format_bytes(source_->capacity())),
                  describe_locked());
  void* base = nullptr;
  try {
    base = source_->map(bytes);
  } catch (const OutOfMemory&) {
    if (!release_retained(bytes)) throw;
    base = source_->map(bytes);
  }
  auto record = std::make_unique<SlabRecord>();
  record->slab = Slab{base, bytes, source_->kind(), source_->device()};
  record->first_page = reinterpret_cast<std::uintptr_t>(base) >> kPageShift;
  record->pages = bytes >> kPageShift;
  record->dedicated = dedicated;
  Span* span = new_span();
  span->start.store(reinterpret_cast<std::uintptr_t>(base), std::memory_order_relaxed);
  span->pages = record->pages;
  span->slab = record.get();
  span->state.store(SpanState::free, std::memory_order_release);
  map_.set(span->first_page(), span);
  map_.set(span->last_page(), span);
  insert_free(span);
  for (SlabObserver* observer : observers_) observer->on_slab_added(record->slab);
  slabs_.push_back(std::move(record));
  ++stats_.slabs;
  ++stats_.slabs_added;
  stats_.slab_bytes += bytes;
  stats_.peak_slab_bytes = std::max(stats_.peak_slab_bytes, stats_.slab_bytes);
}

Span* SlabPoolEngine::split(Span* span, std::size_t head_pages) {
  Span* rest = new_span();
  rest->start.store(span->start.load(std::memory_order_relaxed) + (head_pages << kPageShift),
                    std::memory_order_relaxed);
  rest->pages = span->pages - head_pages;
  rest->slab = span->slab;
  rest->state.store(SpanState::free, std::memory_order_release);
  span->pages = head_pages;
  map_.set(span->last_page(), span);
  map_.set(rest->first_page(), rest);
  map_.set(rest->last_page(), rest);
  return rest;
}

void SlabPoolEngine::make_free(Span* span) {
  span->state.store(SpanState::free, std::memory_order_release);
  // Coalesce with free neighbours in the same slab (slabs may be adjacent in
  // address space, but each goes back to its source whole).
  if (span->first_page() > span->slab->first_page) {
    Span* before = map_.get(span->first_page() - 1);
    if (before != nullptr && before->slab == span->slab &&
        before->state.load(std::memory_order_relaxed) == SpanState::free) {
      erase_free(before);
      map_.set(before->last_page(), nullptr);
      map_.set(span->first_page(), nullptr);
      before->pages += span->pages;
      recycle(span);
      span = before;
    }
  }
  if (span->last_page() + 1 < span->slab->first_page + span->slab->pages) {
    Span* after = map_.get(span->last_page() + 1);
    if (after != nullptr && after->slab == span->slab &&
        after->state.load(std::memory_order_relaxed) == SpanState::free) {
      erase_free(after);
      map_.set(span->last_page(), nullptr);
      map_.set(after->first_page(), nullptr);
      span->pages += after->pages;
      recycle(after);
    }
  }
  map_.set(span->first_page(), span);
  map_.set(span->last_page(), span);
  insert_free(span);
  if (span->slab->dedicated && span->pages == span->slab->pages) retire_dedicated(span);
}

bool SlabPoolEngine::whole_and_free(const SlabRecord& slab, Span** span_out) const {
  Span* span = map_.get(slab.first_page);
  const bool whole = span != nullptr && span->state.load(std::memory_order_relaxed) == SpanState::free &&
                     span->pages == slab.pages;
  if (whole && span_out != nullptr) *span_out = span;
  return whole;
}

void SlabPoolEngine::retire_dedicated(Span* whole) {
  // Keep the most recently freed ones for reuse; return the oldest beyond the limit.
  std::size_t kept = 0;
  for (auto it = slabs_.rbegin(); it != slabs_.rend(); ++it) {
    Span* span = nullptr;
    if (!(*it)->dedicated || !whole_and_free(**it, &span) || span == whole) continue;
    ++kept;
  }
  if (kept < options_.retain_dedicated_slabs) return;
  // Over the limit: this slab goes back (it is the newest, but the oldest
  // would be no likelier to fit the next request).
  release_slab(whole);
}

bool SlabPoolEngine::release_retained(std::size_t at_least) {
  std::size_t released = 0;
  std::vector<Span*> spans;
  for (const auto& record : slabs_) {
    Span* span = nullptr;
    if (record->dedicated && whole_and_free(*record, &span)) spans.push_back(span);
  }
  for (Span* span : spans) {
    if (released >= at_least) break;
    released += span->pages << kPageShift;
    release_slab(span);
  }
  return released > 0;
}

void SlabPoolEngine::release_slab(Span* whole) {
  erase_free(whole);
  map_.set(whole->first_page(), nullptr);
  map_.set(whole->last_page(), nullptr);
  SlabRecord* record = whole->slab;
  recycle(whole);
  for (SlabObserver* observer : observers_) observer->on_slab_removed(record->slab);
  source_->unmap(record->slab.base, record->slab.bytes);
  --stats_.slabs;
  ++stats_.slabs_removed;
  stats_.slab_bytes -= record->slab.bytes;
  std::erase_if(slabs_, [record](const auto& r) { return r.get() == record; });
}

void SlabPoolEngine::insert_free(Span* span) { span->free_pos = free_spans_.emplace(span->pages, span); }

void SlabPoolEngine::erase_free(Span* span) { free_spans_.erase(span->free_pos); }

Span* SlabPoolEngine::new_span() {
  if (unused_ == nullptr) return &span_storage_.emplace_back();
  Span* span = unused_;
  unused_ = span->next;
  span->next = nullptr;
  return span;
}

void SlabPoolEngine::recycle(Span* span) {
  span->state.store(SpanState::unused, std::memory_order_release);
  span->slab = nullptr;
  span->pages = 0;
  span->listed = false;
  span->prev = nullptr;
  span->next = unused_;
  unused_ = span;
}

// ---- maintenance and introspection ----

void SlabPoolEngine::trim() {
  flush_thread_cache();
  std::lock_guard lock(mutex_);
  for (unsigned cls = 0; cls < kClasses; ++cls) {
    for (Span* run = runs_[cls]; run != nullptr;) {
      Span* next = run->next;
      if (run->taken_count == 0) release_run(run);
      run = next;
    }
  }
  std::vector<Span*> whole;
  for (const auto& [pages, span] : free_spans_)
    if (span->pages == span->slab->pages) whole.push_back(span);
  for (Span* span : whole) release_slab(span);
}

void SlabPoolEngine::flush_thread_cache() {
  if (ThreadCache* cache = find_thread_cache(id_)) drain(*cache);
  std::lock_guard lock(mutex_);
  return_transfers();
}

void SlabPoolEngine::return_transfers() {
  for (Transfer& store : transfer_) {
    for (std::uint32_t i = 0; i < store.count; ++i)
      return_block(store.slots[i].span, reinterpret_cast<std::uintptr_t>(store.slots[i].ptr));
    store.count = 0;
  }
}

void SlabPoolEngine::add_observer(SlabObserver& observer) {
  std::lock_guard lock(mutex_);
  if (std::find(observers_.begin(), observers_.end(), &observer) != observers_.end())
    throw UsageError("SlabPool: this slab observer is already subscribed");
  observers_.push_back(&observer);
  for (const auto& record : slabs_) observer.on_slab_added(record->slab);
}

void SlabPoolEngine::remove_observer(SlabObserver& observer) {
  std::lock_guard lock(mutex_);
  std::erase(observers_, &observer);
}

bool SlabPoolEngine::owns(const void* ptr) const noexcept {
  const auto page = reinterpret_cast<std::uintptr_t>(ptr) >> kPageShift;
  std::lock_guard lock(mutex_);
  return std::any_of(slabs_.begin(), slabs_.end(), [page](const auto& record) {
    return page >= record->first_page && page < record->first_page + record->pages;
  });
}

std::size_t SlabPoolEngine::block_bytes(const void* ptr) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard lock(mutex_);
  const Span* span = map_.get(addr >> kPageShift);
  if (span != nullptr && span->state.load(std::memory_order_relaxed) == SpanState::run) {
    const unsigned shift = span->block_shift.load(std::memory_order_relaxed);
    const std::size_t offset = addr - span->start.load(std::memory_order_relaxed);
    const std::size_t index = offset >> shift;
    if ((offset & ((std::size_t{1} << shift) - 1)) == 0 &&
        (span->owned[index >> 6].load(std::memory_order_relaxed) & bit(index)) != 0)
      return std::size_t{1} << shift;
  } else if (span != nullptr && span->state.load(std::memory_order_relaxed) == SpanState::large &&
             span->start.load(std::memory_order_relaxed) == addr) {
    return span->pages << kPageShift;
  }
  throw UsageError(fmt::format("block_bytes({}): not a live block of this pool", ptr));
}

SlabPool::Stats SlabPoolEngine::stats() const {
  std::lock_guard lock(mutex_);
  SlabPool::Stats s = stats_;
  s.invalid_frees = invalid_frees_.load(std::memory_order_relaxed);
  return s;
}

std::string SlabPoolEngine::describe() const {
  std::lock_guard lock(mutex_);
  return describe_locked();
}

std::string SlabPoolEngine::describe_locked() const {
  return fmt::format("{} pool from {}: {} slab(s), {} reserved (peak {}), {} handed out", to_string(source_->kind()),
                     source_->name(), stats_.slabs, format_bytes(stats_.slab_bytes),
                     format_bytes(stats_.peak_slab_bytes), format_bytes(stats_.bytes_out));
}

void SlabPoolEngine::out_of_memory(std::size_t bytes, const std::string& why, const std::string& state) const {
  throw OutOfMemory(fmt::format("cannot allocate {}: {}; pool: {}", format_bytes(bytes), why, state), bytes);
}

}  // namespace ferry::detail
