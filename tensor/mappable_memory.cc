#include "tensor/mappable_memory.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace braid {
namespace {

// A plain std::mutex: the fork handlers below hold it across fork().
struct Registry {
  std::mutex mu;
  std::map<uintptr_t, MappableRegion> by_address;  // keyed by base; fd -1: a forked child's private copy
  uint64_t next_id = 1;
  size_t live = 0;  // regions with a descriptor
  // Bumped under `mu` by every change of by_address: what a thread's
  // remembered lookups (FindMappable) were made at.
  std::atomic<uint64_t> generation{1};
};

Registry& TheRegistry();

void LockForFork() { TheRegistry().mu.lock(); }
void UnlockAfterFork() { TheRegistry().mu.unlock(); }

// A forked child gets its own copy of every buffer, as it would of private
// memory, not the parent's pages: each mapping is replaced by a private
// copy in place, and the descriptors are closed.
void PrivatizeInChild() {
  Registry& registry = TheRegistry();
  for (auto& [address, region] : registry.by_address) {
    if (region.fd < 0) continue;
    void* copy = mmap(nullptr, region.length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy != MAP_FAILED) {
      std::memcpy(copy, region.base, region.length);
      mremap(copy, region.length, region.length, MREMAP_MAYMOVE | MREMAP_FIXED, const_cast<std::byte*>(region.base));
    }
    close(region.fd);
    region.fd = -1;
  }
  registry.live = 0;
  registry.generation.fetch_add(1, std::memory_order_release);
  registry.mu.unlock();
}

Registry& TheRegistry() {
  static Registry* registry = [] {
    pthread_atfork(LockForFork, UnlockAfterFork, PrivatizeInChild);
    return new Registry;  // never destroyed: frees may run during exit
  }();
  return *registry;
}

// At most a quarter of the descriptors this process may open: the rest of
// the program keeps room for its files and sockets.
size_t MaxLive() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 1024;
  return std::min<size_t>(1024, limit.rlim_cur / 4);
}

}  // namespace

absl::StatusOr<std::byte*> AllocateMappable(size_t nbytes) {
  Registry& registry = TheRegistry();
  {
    std::lock_guard<std::mutex> lock(registry.mu);
    if (registry.live >= MaxLive()) {
      return absl::ResourceExhaustedError(absl::StrCat(registry.live, " mappable buffers are live already"));
    }
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t length = (nbytes + page - 1) / page * page;
  const int fd = memfd_create("braid-buffer", MFD_CLOEXEC);
  if (fd < 0) return absl::ResourceExhaustedError(absl::StrCat("memfd_create: ", std::strerror(errno)));
  void* data = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(length)) == 0) {
    data = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (data == MAP_FAILED) {
    const int error = errno;
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("mapping a memfd of ", length, " bytes: ", std::strerror(error)));
  }
  std::lock_guard<std::mutex> lock(registry.mu);
  auto* bytes = static_cast<std::byte*>(data);
  registry.by_address[reinterpret_cast<uintptr_t>(bytes)] = {bytes, length, fd, registry.next_id++};
  ++registry.live;
  registry.generation.fetch_add(1, std::memory_order_release);
  return bytes;
}

void FreeMappable(std::byte* data) {
  MappableRegion region;
  {
    Registry& registry = TheRegistry();
    std::lock_guard<std::mutex> lock(registry.mu);
    auto it = registry.by_address.find(reinterpret_cast<uintptr_t>(data));
    if (it == registry.by_address.end()) return;
    region = it->second;
    registry.by_address.erase(it);
    if (region.fd >= 0) --registry.live;
    registry.generation.fetch_add(1, std::memory_order_release);
  }
  munmap(const_cast<std::byte*>(region.base), region.length);
  if (region.fd >= 0) close(region.fd);
}

std::optional<MappableRegion> FindMappable(const void* data, size_t bytes) {
  const auto at = reinterpret_cast<uintptr_t>(data);
  Registry& registry = TheRegistry();
  // A collective asks about the same few buffers several times a call: a
  // thread remembers its last answers until the registry changes, which
  // keeps the lock off a small call's path.
  struct Remembered {
    uint64_t generation = 0;
    uintptr_t at = 0;
    size_t bytes = 0;
    std::optional<MappableRegion> region;
  };
  thread_local std::array<Remembered, 8> remembered;
  thread_local size_t next_slot = 0;
  const uint64_t now = registry.generation.load(std::memory_order_acquire);
  for (const Remembered& r : remembered) {
    if (r.generation == now && r.at == at && r.bytes == bytes) return r.region;
  }
  std::optional<MappableRegion> found;
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(registry.mu);
    generation = registry.generation.load(std::memory_order_relaxed);
    auto it = registry.by_address.upper_bound(at);
    if (it != registry.by_address.begin()) {
      const MappableRegion& region = std::prev(it)->second;
      const auto base = reinterpret_cast<uintptr_t>(region.base);
      if (region.fd >= 0 && at + bytes <= base + region.length) found = region;
    }
  }
  remembered[next_slot] = {generation, at, bytes, found};
  next_slot = (next_slot + 1) % remembered.size();
  return found;
}

}  // namespace braid
