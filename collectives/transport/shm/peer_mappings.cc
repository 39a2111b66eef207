#include "collectives/transport/shm/peer_mappings.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace braid::shm_internal {
namespace {

int PidfdGetfd(int pidfd, int fd) {
#ifdef SYS_pidfd_getfd
  return static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, fd, 0));
#else
  (void)pidfd;
  (void)fd;
  return -1;
#endif
}

std::byte* MapPeerBuffer(int pidfd, const MappedBuffer& buffer) {
  if (pidfd < 0) return nullptr;
  const int fd = PidfdGetfd(pidfd, buffer.fd);
  if (fd < 0) return nullptr;
  void* local = mmap(nullptr, buffer.length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // the mapping holds the memory
  return local == MAP_FAILED ? nullptr : static_cast<std::byte*>(local);
}

bool Overlap(const MappedBuffer& a, const MappedBuffer& b) {
  return a.base < b.base + b.length && b.base < a.base + a.length;
}

}  // namespace

PeerMappings::~PeerMappings() {
  for (std::vector<Mapping>& mappings : by_peer_) {
    for (Mapping& mapping : mappings) Unmap(mapping);
  }
}

void PeerMappings::Unmap(Mapping& mapping) {
  if (mapping.local != nullptr) munmap(mapping.local, mapping.buffer.length);
  mapping.local = nullptr;
}

std::byte* PeerMappings::Resolve(int peer, int pidfd, const MappedBuffer& buffer, uint64_t at, size_t bytes) {
  if (buffer.length == 0 || at < buffer.base || at + bytes > buffer.base + buffer.length) return nullptr;
  std::vector<Mapping>& mappings = by_peer_[static_cast<size_t>(peer)];
  ++uses_;
  for (Mapping& mapping : mappings) {
    if (mapping.buffer.id != buffer.id) continue;
    mapping.last_used = uses_;
    return mapping.local == nullptr ? nullptr : mapping.local + (at - buffer.base);
  }
  // A new buffer: the ones it overlaps were freed by the peer.
  for (Mapping& mapping : mappings) {
    if (Overlap(mapping.buffer, buffer)) Unmap(mapping);
  }
  mappings.erase(std::remove_if(mappings.begin(), mappings.end(),
                                [&](const Mapping& m) { return Overlap(m.buffer, buffer); }),
                 mappings.end());
  if (mappings.size() >= kPerPeer) {
    auto oldest = std::min_element(mappings.begin(), mappings.end(),
                                   [](const Mapping& a, const Mapping& b) { return a.last_used < b.last_used; });
    Unmap(*oldest);
    mappings.erase(oldest);
  }
  mappings.push_back(Mapping{buffer, MapPeerBuffer(pidfd, buffer), uses_});
  const Mapping& added = mappings.back();
  return added.local == nullptr ? nullptr : added.local + (at - buffer.base);
}

}  // namespace braid::shm_internal
