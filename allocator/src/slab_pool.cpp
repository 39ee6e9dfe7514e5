#include "ferry/allocator/slab_pool.hpp"

#include "slab_pool_engine.hpp"

namespace ferry {

SlabPool::SlabPool(std::unique_ptr<SlabSource> source, Options options)
    : engine_(std::make_unique<detail::SlabPoolEngine>(std::move(source), options)) {}

SlabPool::~SlabPool() = default;

void* SlabPool::do_allocate(std::size_t bytes, std::size_t alignment, StreamRef) {
  return engine_->allocate(bytes, alignment);
}
void SlabPool::do_deallocate(void* ptr, std::size_t bytes, StreamRef) { engine_->deallocate(ptr, bytes); }

void SlabPool::trim() { engine_->trim(); }
void SlabPool::flush_thread_cache() { engine_->flush_thread_cache(); }
void SlabPool::add_slab_observer(SlabObserver& observer) { engine_->add_observer(observer); }
void SlabPool::remove_slab_observer(SlabObserver& observer) { engine_->remove_observer(observer); }
bool SlabPool::owns(const void* ptr) const noexcept { return engine_->owns(ptr); }
std::size_t SlabPool::block_bytes(const void* ptr) const { return engine_->block_bytes(ptr); }
SlabPool::Stats SlabPool::stats() const { return engine_->stats(); }
const SlabPool::Options& SlabPool::options() const noexcept { return engine_->options(); }
const SlabSource& SlabPool::source() const noexcept { return engine_->source(); }
MemoryKind SlabPool::kind() const noexcept { return engine_->source().kind(); }
int SlabPool::device() const noexcept { return engine_->source().device(); }
std::string SlabPool::describe() const { return engine_->describe(); }

}  // namespace ferry
