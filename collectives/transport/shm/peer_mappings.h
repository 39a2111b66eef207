// PeerMappings: this rank's mappings of its peers' mappable buffers
// (tensor/mappable_memory.h). A peer publishes, with a Sync, where each of
// its buffers lies in its own address space and which memfd holds it; the
// first access takes the descriptor (pidfd_getfd, the same permission as
// process_vm_readv) and maps it here, and later collectives on the same
// buffer find the mapping cached. A buffer the peer freed is unmapped here
// once a newer one of that peer overlaps its addresses (addresses of live
// buffers never overlap), or when more than kPerPeer are held.
//
// Internal to the shm transport; one thread at a time (the transport's).
#ifndef BRAID_COLLECTIVES_TRANSPORT_SHM_PEER_MAPPINGS_H_
#define BRAID_COLLECTIVES_TRANSPORT_SHM_PEER_MAPPINGS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace braid::shm_internal {

// What a rank publishes of one mappable buffer (plain data in its segment).
struct MappedBuffer {
  uint64_t base = 0;    // in the owner's address space
  uint64_t length = 0;  // 0: not mappable
  uint64_t id = 0;      // unique within the owner's process
  int32_t fd = -1;      // the owner's descriptor of its memfd
  int32_t unused = 0;
};

class PeerMappings {
 public:
  static constexpr size_t kPerPeer = 32;

  explicit PeerMappings(int size) : by_peer_(static_cast<size_t>(size)) {}
  ~PeerMappings();
  PeerMappings(const PeerMappings&) = delete;
  PeerMappings& operator=(const PeerMappings&) = delete;

  // Where [at, at + bytes) of `peer`'s memory, inside `buffer`, lies in this
  // process; null when it is not inside `buffer` or cannot be mapped (the
  // caller copies through the kernel instead). `pidfd` is the peer's.
  std::byte* Resolve(int peer, int pidfd, const MappedBuffer& buffer, uint64_t at, size_t bytes);

 private:
  struct Mapping {
    MappedBuffer buffer;
    std::byte* local = nullptr;  // null: mapping it failed; not retried
    uint64_t last_used = 0;
  };
  void Unmap(Mapping& mapping);

  std::vector<std::vector<Mapping>> by_peer_;
  uint64_t uses_ = 0;
};

}  // namespace braid::shm_internal

#endif  // BRAID_COLLECTIVES_TRANSPORT_SHM_PEER_MAPPINGS_H_
