#include "python/torch_backend/mappable_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "capi/braid.h"
#include "python/torch_backend/errors.h"

namespace braid_torch {
namespace {

// torch's own CPU allocator registers at priority 0; SetCPUAllocator replaces
// at the same priority or above.
constexpr uint8_t kPriority = 0;

// Freed blocks are kept by size and handed out again: training allocates the
// same sizes every step, and a fresh memfd costs syscalls and a page fault
// per 4 KiB, while a kept one is also still mapped by the peers (same id).
class MappableAllocator final : public c10::Allocator {
 public:
  explicit MappableAllocator(c10::Allocator* previous) : previous_(previous) {}

  void set_min_bytes(size_t bytes) { min_bytes_.store(bytes, std::memory_order_relaxed); }
  // Whether freed blocks are kept (while installed) or freed at once.
  void set_keeping(bool keeping) { keeping_.store(keeping, std::memory_order_relaxed); }

  c10::DataPtr allocate(size_t n) override {
    if (n >= min_bytes_.load(std::memory_order_relaxed)) {
      if (void* data = Take(n)) return {data, data, &Free, c10::Device(c10::DeviceType::CPU)};
    }
    return previous_->allocate(n);  // small, or past the memfd cap
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  // Frees every kept block (their descriptors too).
  void Release() {
    std::unordered_multimap<size_t, void*> kept;
    {
      std::lock_guard<std::mutex> lock(mu_);
      kept.swap(kept_);
    }
    for (const auto& [bytes, data] : kept) Drop(data);
  }

 private:
  void* Take(size_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = kept_.find(n);
      if (it != kept_.end()) {
        void* data = it->second;
        kept_.erase(it);
        return data;
      }
    }
    void* data = nullptr;
    if (braid_mem_alloc(n, &data) != BRAID_OK) {
      Release();  // kept blocks of other sizes hold descriptors: give them back and try once more
      if (braid_mem_alloc(n, &data) != BRAID_OK) return nullptr;
    }
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[data] = n;
    return data;
  }

  void Keep(void* data) {
    if (keeping_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(mu_);
      kept_.emplace(sizes_.at(data), data);
      return;
    }
    Drop(data);
  }

  void Drop(void* data) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      sizes_.erase(data);
    }
    braid_mem_free(data);
  }

  static void Free(void* data);

  c10::Allocator* const previous_;
  std::atomic<size_t> min_bytes_{0};
  std::atomic<bool> keeping_{false};
  std::mutex mu_;
  std::unordered_map<void*, size_t> sizes_;         // every block made, by address
  std::unordered_multimap<size_t, void*> kept_;     // freed blocks, by size
};

std::mutex mu;
MappableAllocator* installed = nullptr;  // made once, never freed: tensors outlive any switch
c10::Allocator* previous = nullptr;

void MappableAllocator::Free(void* data) { installed->Keep(data); }

}  // namespace

void UseMappableMemory(size_t min_bytes) {
  if (min_bytes == 0) Fail("braid use_mappable_memory: min_bytes must be at least 1");
  std::lock_guard<std::mutex> lock(mu);
  if (installed == nullptr) {
    previous = c10::GetCPUAllocator();
    installed = new MappableAllocator(previous);
  }
  installed->set_min_bytes(min_bytes);
  installed->set_keeping(true);
  c10::SetCPUAllocator(installed, kPriority);
  if (c10::GetCPUAllocator() != installed) {
    Fail("braid use_mappable_memory: torch kept another CPU allocator (one was set at a higher priority)");
  }
}

void UseDefaultMemory() {
  std::lock_guard<std::mutex> lock(mu);
  if (previous == nullptr) return;
  c10::SetCPUAllocator(previous, kPriority);
  installed->set_keeping(false);
  installed->Release();
}

}  // namespace braid_torch
